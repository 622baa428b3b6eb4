//! The CPU kernel library that generated kernels call: vectorisable scalar math, GEMM, and row operations.

pub mod attention;
pub mod gemm;
pub mod math;
pub mod par;
pub mod processor;
pub mod rows;
pub mod scratch;

/// Reserves every kernel's per-thread scratch on every worker (see [`scratch`]); models call it when they load.
pub fn reserve_scratch() {
    let mut needs = vec![(&scratch::SCORES, attention::SCRATCH_ELEMENTS)];
    needs.extend(gemm::scratch_needs());
    scratch::reserve(&needs);
}
