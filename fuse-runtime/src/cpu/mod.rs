//! The CPU kernel library that generated kernels call: vectorisable scalar math, GEMM, and row operations.

pub mod attention;
pub mod gemm;
pub mod math;
pub mod par;
pub mod rows;
