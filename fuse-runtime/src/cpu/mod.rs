//! The CPU kernel library that generated kernels call: vectorisable scalar math, GEMM, and row operations.

pub mod amx;
pub mod attention;
pub mod gemm;
pub mod math;
pub mod par;
pub mod processor;
pub mod rows;
pub mod scratch;
mod trig;
pub mod write_rows;

/// The arithmetic of a model's CPU GEMMs whose B is a weight, chosen when the model is put together
/// (`CompiledModel::with_cpu_precision`). Norms, softmax and elementwise chains compute in f32 in every precision;
/// attention's two products of activations follow int8 and bf16 in bf16 where the CPU has AVX-512 BF16
/// (`attention::Products::for_precision`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CpuPrecision {
    /// f32 throughout (the default).
    #[default]
    F32,
    /// Weights quantised to int8 per output channel at load, activations per row at each call, i32
    /// accumulation, f32 output and epilogue (`gemm::int8`).
    Int8,
    /// Weights rounded to bf16 at load, activations per call, f32 accumulation and epilogue (`gemm::bf16`):
    /// `vdpbf16ps` where the CPU has AVX-512 BF16, bf16 widened to f32 elsewhere.
    Bf16,
    /// Weights rounded to f16 at load (11 significant bits to bf16's 8), widened to f32 at each call (`vcvtph2ps`)
    /// for the f32 tile (`gemm::half`): half the bytes of f32, the arithmetic of f32. A weight beyond f16's range
    /// (±65504) stays f32. Needs the AVX2 or AVX-512 GEMM; on other CPUs the products stay f32.
    F16,
}

impl std::fmt::Display for CpuPrecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CpuPrecision::F32 => "f32",
            CpuPrecision::Int8 => "int8",
            CpuPrecision::Bf16 => "bf16",
            CpuPrecision::F16 => "f16",
        })
    }
}

/// Reserves every kernel's per-thread scratch on every worker (see [`scratch`]); models call it when they load.
pub fn reserve_scratch() {
    let mut needs = vec![
        (&scratch::SCORES, attention::SCRATCH_ELEMENTS),
        (&scratch::QUERIES, attention::SCRATCH_ELEMENTS),
        (&scratch::ATTENTION_ROWS, attention::SCRATCH_ELEMENTS),
        // Keys or values packed to bf16 (a block's share of the scores' size is a typical head's).
        (&scratch::BF16_OPERAND, attention::SCRATCH_ELEMENTS),
    ];
    needs.extend(gemm::scratch_needs());
    scratch::reserve(&needs);
}
