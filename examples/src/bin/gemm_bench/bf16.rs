//! The bf16 GEMM on one thread: each bf16 kernel this CPU runs on the workloads' task shapes (B rounded and
//! packed beforehand, as a model does at load), in GFLOP/s and as a share of the `vdpbf16ps` peak measured by a
//! loop of it alone (each 32-bit lane does two multiply-adds).

use fuse_runtime::cpu::gemm::bf16::{Bf16B, Bf16Kernel};
use fuse_runtime::cpu::gemm::Strided;

use super::Shape;

/// Steps of the peak loop per timing.
const STEPS: usize = 1_000_000;

/// GFLOP/s of one thread's `vdpbf16ps` on 256-bit and 512-bit vectors.
pub fn peaks() -> Vec<(&'static str, f64)> {
    #[cfg(target_arch = "x86_64")]
    if Bf16Kernel::supported().contains(&Bf16Kernel::Avx512Ymm) {
        // Per step: every accumulator's lanes, two multiply-adds each, two operations per multiply-add.
        let per_lane = x86::ACCUMULATORS * 2 * 2;
        let runs: [super::PeakRun<f32>; 2] = [
            ("256-bit", 8 * per_lane, x86::dpbf16_256),
            ("512-bit", 16 * per_lane, x86::dpbf16_512),
        ];
        // SAFETY: the CPU has AVX-512 BF16 and VL (checked above).
        return unsafe { super::loop_rates(STEPS, &runs) };
    }
    Vec::new()
}

/// Prints the bf16 kernels' rates on `shapes`, against `peak` (its name and GFLOP/s) where there is one.
pub fn report(shapes: &[Shape], peak: Option<(&str, f64)>) {
    let kernels = Bf16Kernel::supported();
    super::print_header("bf16", "GFLOP/s", peak, &kernels);
    println!();
    for s in shapes {
        let (a, b, view) = s.reduced_operands();
        let pack = Bf16B::new(&b, view).unwrap().unwrap();
        let mut c = vec![0.0f32; s.m * s.n];
        let flops = 2.0 * (s.m * s.n * s.k) as f64;
        let best = super::best_per_kernel(&kernels, flops, |kernel| {
            // SAFETY: A is m×k row-major, C m×n; the pack holds B; the kernel runs on this CPU.
            unsafe {
                pack.gemm_on(
                    kernel,
                    (s.m, s.k, s.n),
                    0,
                    Strided::new(a.as_ptr(), s.k as isize, 1),
                    Strided::new(c.as_mut_ptr(), s.n as isize, 1),
                )
            }
        });
        super::print_rates(s, flops, &best, peak);
        println!();
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Independent accumulators: enough to cover `vdpbf16ps`'s latency times its pipes.
    pub const ACCUMULATORS: usize = 24;

    #[target_feature(enable = "avx512f,avx512bf16,avx512vl")]
    pub unsafe fn dpbf16_256(steps: usize) -> f32 {
        let a: __m256bh = std::mem::transmute(_mm256_set1_epi32(std::hint::black_box(0x3F80_3F80)));
        let b: __m256bh = std::mem::transmute(_mm256_set1_epi32(std::hint::black_box(0x2000_2000)));
        let mut acc: [__m256; ACCUMULATORS] = std::array::from_fn(|i| _mm256_set1_ps(i as f32));
        for _ in 0..steps {
            for c in &mut acc {
                *c = _mm256_dpbf16_ps(*c, a, b);
            }
        }
        let sum = acc
            .iter()
            .fold(_mm256_setzero_ps(), |s, &c| _mm256_add_ps(s, c));
        _mm256_cvtss_f32(sum)
    }

    #[target_feature(enable = "avx512f,avx512bf16")]
    pub unsafe fn dpbf16_512(steps: usize) -> f32 {
        let a: __m512bh = std::mem::transmute(_mm512_set1_epi32(std::hint::black_box(0x3F80_3F80)));
        let b: __m512bh = std::mem::transmute(_mm512_set1_epi32(std::hint::black_box(0x2000_2000)));
        let mut acc: [__m512; ACCUMULATORS] = std::array::from_fn(|i| _mm512_set1_ps(i as f32));
        for _ in 0..steps {
            for c in &mut acc {
                *c = _mm512_dpbf16_ps(*c, a, b);
            }
        }
        _mm512_reduce_add_ps(
            acc.iter()
                .fold(_mm512_setzero_ps(), |s, &c| _mm512_add_ps(s, c)),
        )
    }
}
