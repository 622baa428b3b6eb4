//! This core's multiply-add peak, measured: the ceiling the GEMM's GFLOP/s are read against.
//!
//! A loop of fused multiply-adds into independent accumulators, with nothing else in it: no loads, no stores, no
//! chain longer than one FMA per accumulator per step. Twelve AVX2 (or twenty-four AVX-512) accumulators cover
//! the FMA latency (4–5 cycles) times the two FMA pipes of current x86 cores, so the pipes, not the latency,
//! set the rate. Where a core issues a 512-bit FMA as two 256-bit halves, the AVX-512 figure shows it.

use fuse_runtime::cpu::gemm::Backend;

/// Steps of the loop per timing (each step is one FMA per accumulator): ≈ 2–4 ms on current cores, as short as
/// the GEMM's timings, and as many rounds, so both see the same chance of an undisturbed slice.
const STEPS: usize = 2_000_000;

/// GFLOP/s of one thread for each vector width fuse's tiles use on this CPU, best of a few rounds.
pub fn measure() -> Vec<(Backend, f64)> {
    let mut peaks = Vec::new();
    #[cfg(target_arch = "x86_64")]
    for backend in Backend::available() {
        let (lanes, accumulators, run): (usize, usize, unsafe fn(usize) -> f32) = match backend {
            Backend::Avx512 => (16, 24, x86::fma_avx512),
            Backend::Avx2 => (8, 12, x86::fma_avx2),
            Backend::Portable => continue,
        };
        // SAFETY: `Backend::available` lists only instruction sets this CPU runs.
        let best = super::best_seconds(|| unsafe { run(std::hint::black_box(STEPS)) });
        let flops = (STEPS * accumulators * lanes * 2) as f64;
        peaks.push((backend, flops / best / 1e9));
    }
    peaks
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// `steps` rounds of acc ← acc·x + y on 12 ymm accumulators; returns a lane of their sum so nothing is
    /// dead code. x = 1 − 2⁻²⁰ and y small keep every value normal and finite.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn fma_avx2(steps: usize) -> f32 {
        let x = _mm256_set1_ps(std::hint::black_box(1.0 - 1.0 / 1_048_576.0));
        let y = _mm256_set1_ps(std::hint::black_box(1e-3));
        let mut acc: [__m256; 12] = std::array::from_fn(|i| _mm256_set1_ps(i as f32));
        for _ in 0..steps {
            for a in &mut acc {
                *a = _mm256_fmadd_ps(*a, x, y);
            }
        }
        let sum = acc
            .iter()
            .fold(_mm256_setzero_ps(), |s, &a| _mm256_add_ps(s, a));
        _mm256_cvtss_f32(sum)
    }

    /// [`fma_avx2`] on 24 zmm accumulators.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn fma_avx512(steps: usize) -> f32 {
        let x = _mm512_set1_ps(std::hint::black_box(1.0 - 1.0 / 1_048_576.0));
        let y = _mm512_set1_ps(std::hint::black_box(1e-3));
        let mut acc: [__m512; 24] = std::array::from_fn(|i| _mm512_set1_ps(i as f32));
        for _ in 0..steps {
            for a in &mut acc {
                *a = _mm512_fmadd_ps(*a, x, y);
            }
        }
        _mm512_reduce_add_ps(
            acc.iter()
                .fold(_mm512_setzero_ps(), |s, &a| _mm512_add_ps(s, a)),
        )
    }
}
