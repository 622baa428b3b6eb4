//! The int8 GEMM on one thread: each int8 kernel this CPU runs on the workloads' task shapes (B quantised and
//! packed beforehand, as a model does at load), in GOP/s (two operations per multiply-add, as GFLOP/s count
//! them) and as a share of the VNNI peak measured by a loop of `vpdpbusd` alone; and what quantising A costs
//! inside the product.

use fuse_examples::timing::thread_seconds;
use fuse_runtime::cpu::gemm::int8::{Int8Kernel, QuantB};
use fuse_runtime::cpu::gemm::Strided;

use super::{Shape, ROUNDS};

/// Steps of the peak loop per timing.
const STEPS: usize = 1_000_000;

/// GOP/s of one thread's `vpdpbusd` on 256-bit and 512-bit vectors (four multiply-adds per 32-bit lane).
pub fn vnni_peaks() -> Vec<(&'static str, f64)> {
    #[cfg(target_arch = "x86_64")]
    if Int8Kernel::supported().contains(&Int8Kernel::Vnni256) {
        // Per step: every accumulator's lanes, four multiply-adds each, two operations per multiply-add.
        let per_lane = x86::ACCUMULATORS * 4 * 2;
        let runs: [super::PeakRun<i32>; 2] = [
            ("256-bit", 8 * per_lane, x86::dpbusd_256),
            ("512-bit", 16 * per_lane, x86::dpbusd_512),
        ];
        // SAFETY: the CPU has AVX-512 VNNI and VL (checked above).
        return unsafe { super::loop_rates(STEPS, &runs) };
    }
    Vec::new()
}

/// GOP/s of one thread's AVX2 integer multiply-adds without VNNI: `vpmaddwd` + `vpaddd` on i16 pairs (what the
/// AVX2 tile issues per 16 multiply-adds), and `vpmaddubsw` + `vpmaddwd` by ones + `vpaddd` on u8 × s8 quads
/// (32 multiply-adds, the sequence ONNX Runtime's AVX2 kernel issues; exact only while pair sums fit i16).
pub fn avx2_peaks() -> Vec<(&'static str, f64)> {
    #[cfg(target_arch = "x86_64")]
    if Int8Kernel::supported().contains(&Int8Kernel::Avx2) {
        // Per step: every accumulator's multiply-adds, two operations each.
        let per_mac = x86::AVX2_ACCUMULATORS * 2;
        let runs: [super::PeakRun<i32>; 2] = [
            ("vpmaddwd (i16 pairs)", 16 * per_mac, x86::maddwd_256),
            (
                "vpmaddubsw+vpmaddwd (u8 × s8 quads)",
                32 * per_mac,
                x86::maddubsw_256,
            ),
        ];
        // SAFETY: the CPU has AVX2 (checked above).
        return unsafe { super::loop_rates(STEPS, &runs) };
    }
    Vec::new()
}

/// Prints the int8 kernels' rates on `shapes`, against `peak` (its name and GOP/s) where there is one.
pub fn report(shapes: &[Shape], peak: Option<(&str, f64)>) {
    let kernels = Int8Kernel::supported();
    let chosen = kernels
        .iter()
        .position(|&k| k == Int8Kernel::best())
        .unwrap_or(0);
    super::print_header("int8", "GOP/s", peak, &kernels);
    println!(" {:>18}", "quantise A (share)");
    for s in shapes {
        let (a, b, view) = s.reduced_operands();
        let pack = QuantB::new(&b, view).unwrap().unwrap();
        let mut c = vec![0.0f32; s.m * s.n];
        let ops = 2.0 * (s.m * s.n * s.k) as f64;
        let reps = (1e9 / ops).ceil() as usize;
        let best = super::best_per_kernel(&kernels, ops, |kernel| {
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
        // Quantising the block's rows alone, in one call as the driver does once per product (on the best
        // kernel); timed per row through `Int8Kernel::quantize_row`, each call's set-up added about a tenth.
        let mut buf = vec![0.0f32; pack.quantised_len(s.m)];
        let mut quant = f64::MAX;
        for _ in 0..ROUNDS {
            let start = thread_seconds();
            for _ in 0..reps {
                std::hint::black_box(pack.quantise_rows(&a, (0, s.k, 1), s.m, &mut buf));
            }
            quant = quant.min((thread_seconds() - start) / reps as f64);
        }
        super::print_rates(s, ops, &best, peak);
        println!(
            " {:>18}",
            format!(
                "{:.1} µs, {:.0} %",
                quant * 1e6,
                100.0 * quant / best[chosen]
            )
        );
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Independent accumulators: enough to cover `vpdpbusd`'s latency times its pipes.
    pub const ACCUMULATORS: usize = 24;

    #[target_feature(enable = "avx512f,avx512vl,avx512vnni,avx2")]
    pub unsafe fn dpbusd_256(steps: usize) -> i32 {
        let a = _mm256_set1_epi32(std::hint::black_box(0x0101_0101));
        let b = _mm256_set1_epi32(std::hint::black_box(0x01ff_01ff));
        let mut acc: [__m256i; ACCUMULATORS] = std::array::from_fn(|i| _mm256_set1_epi32(i as i32));
        for _ in 0..steps {
            for c in &mut acc {
                *c = _mm256_dpbusd_epi32(*c, a, b);
            }
        }
        let sum = acc
            .iter()
            .fold(_mm256_setzero_si256(), |s, &c| _mm256_add_epi32(s, c));
        _mm256_extract_epi32::<0>(sum)
    }

    /// Accumulators of the AVX2 loops: 16 registers hold them and the operands.
    pub const AVX2_ACCUMULATORS: usize = 12;

    // Each accumulator feeds its own next product (the values are meaningless), so no product is loop-invariant
    // and the chains are independent: 12 of them cover the instructions' latency.

    #[target_feature(enable = "avx2")]
    pub unsafe fn maddwd_256(steps: usize) -> i32 {
        let b = _mm256_set1_epi32(std::hint::black_box(0x0003_0004));
        let mut acc: [__m256i; AVX2_ACCUMULATORS] =
            std::array::from_fn(|i| _mm256_set1_epi32(i as i32));
        for _ in 0..steps {
            for c in &mut acc {
                *c = _mm256_add_epi32(_mm256_madd_epi16(*c, b), b);
            }
        }
        fold_256(&acc)
    }

    #[target_feature(enable = "avx2")]
    pub unsafe fn maddubsw_256(steps: usize) -> i32 {
        let b = _mm256_set1_epi32(std::hint::black_box(0x01ff_01ff));
        let ones = _mm256_set1_epi16(1);
        let mut acc: [__m256i; AVX2_ACCUMULATORS] =
            std::array::from_fn(|i| _mm256_set1_epi32(i as i32));
        for _ in 0..steps {
            for c in &mut acc {
                let pairs = _mm256_maddubs_epi16(*c, b);
                *c = _mm256_add_epi32(_mm256_madd_epi16(pairs, ones), b);
            }
        }
        fold_256(&acc)
    }

    #[target_feature(enable = "avx2")]
    unsafe fn fold_256(acc: &[__m256i]) -> i32 {
        let sum = acc
            .iter()
            .fold(_mm256_setzero_si256(), |s, &c| _mm256_add_epi32(s, c));
        _mm256_extract_epi32::<0>(sum)
    }

    #[target_feature(enable = "avx512f,avx512vnni")]
    pub unsafe fn dpbusd_512(steps: usize) -> i32 {
        let a = _mm512_set1_epi32(std::hint::black_box(0x0101_0101));
        let b = _mm512_set1_epi32(std::hint::black_box(0x01ff_01ff));
        let mut acc: [__m512i; ACCUMULATORS] = std::array::from_fn(|i| _mm512_set1_epi32(i as i32));
        for _ in 0..steps {
            for c in &mut acc {
                *c = _mm512_dpbusd_epi32(*c, a, b);
            }
        }
        _mm512_reduce_add_epi32(
            acc.iter()
                .fold(_mm512_setzero_si512(), |s, &c| _mm512_add_epi32(s, c)),
        )
    }
}
