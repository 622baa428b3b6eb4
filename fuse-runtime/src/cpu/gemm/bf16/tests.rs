//! The bf16 GEMM on every kernel this CPU runs, against an f64 evaluation of the product of the rounded operands
//! (exact up to the f32 sums) and against the f32 product within the bound bf16's rounding gives; and the
//! rounding of A, on every kernel, bit for bit as `to_bf16` documents it.

use super::*;
use crate::cpu::gemm::test_cases::{self, cases, randv, Case};

fn rounded(x: f32) -> f64 {
    f64::from(from_bf16(to_bf16(x)))
}

/// Runs one case on `kernel`: (C, A's rows, B's columns).
fn run_case(
    kernel: Bf16Kernel,
    case: &Case,
    seed: u64,
) -> (Vec<f32>, Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let pack = |b: &[f32], view| Bf16B::new(b, view).unwrap().expect("the view fits");
    // SAFETY: A is m×k at its strides inside its buffer; C is m×cols; the columns are inside the pack.
    let gemm = |p: &Bf16B, dims, col0, a, c| unsafe { p.gemm_on(kernel, dims, col0, a, c) };
    test_cases::run_case(case, seed, pack, gemm)
}

#[test]
fn every_kernel_matches_the_rounded_product_on_odd_shapes_and_views() {
    let kernels = Bf16Kernel::supported();
    if kernels.len() < 6 {
        eprintln!("bf16 kernels this CPU (or OS) cannot run are skipped; testing {kernels:?}");
    }
    for kernel in kernels {
        for (s, case) in cases(NR).iter().enumerate() {
            let (c, a_rows, b_cols) = run_case(kernel, case, 40 + 3 * s as u64);
            check_case(&format!("{kernel:?} {case:?}"), case, &c, &a_rows, &b_cols);
        }
    }
}

/// B an operand of the call (attention's keys or values), packed per call into the scratch, from both of its
/// layouts (depth-contiguous, as keys read transposed, and row-contiguous, as values), at odd depths.
#[test]
fn every_kernel_matches_the_rounded_product_with_b_packed_per_call() {
    for kernel in Bf16Kernel::supported() {
        for (s, case) in cases(NR).iter().enumerate() {
            let pack = |b: &[f32], view: BView| (b.to_vec(), view);
            let gemm = |(b, v): &(Vec<f32>, BView), dims, col0: usize, a, c| {
                let b = Strided::new(
                    b[v.offset + col0 * v.cs..].as_ptr(),
                    v.rs as isize,
                    v.cs as isize,
                );
                // SAFETY: A is m×k at its strides inside its buffer, B k×cols from column col0 inside its
                // buffer, C m×cols.
                unsafe { gemm_operands_on(kernel, dims, a, b, c) }
            };
            let (c, a_rows, b_cols) = test_cases::run_case(case, 90 + s as u64, pack, gemm);
            check_case(
                &format!("operand B, {kernel:?} {case:?}"),
                case,
                &c,
                &a_rows,
                &b_cols,
            );
        }
    }
}

/// Each element of `c` against an f64 evaluation of the product of the rounded operands (exact up to the f32
/// sums) and against the f32 product within the bound bf16's rounding gives.
fn check_case(what: &str, case: &Case, c: &[f32], a_rows: &[Vec<f32>], b_cols: &[Vec<f32>]) {
    for (i, x) in a_rows.iter().enumerate() {
        for (j, y) in b_cols.iter().enumerate() {
            let got = f64::from(c[i * case.cols + j]);
            let what = format!("{what} at ({i}, {j})");
            let terms = x.iter().zip(y);
            let want: f64 = terms.clone().map(|(&p, &q)| rounded(p) * rounded(q)).sum();
            let size: f64 = terms
                .clone()
                .map(|(&p, &q)| (rounded(p) * rounded(q)).abs())
                .sum();
            // f32 sums of exact products: at most one rounding per depth, each relative to the running sum,
            // bounded by the terms' size.
            assert!(
                (got - want).abs() <= (case.k as f64 + 2.0) * 6e-8 * size,
                "{what}: {got} vs rounded product {want}"
            );
            // Against the f32 product: each operand is off by at most 2⁻⁸ of itself (8 significant bits).
            let exact: f64 = terms
                .clone()
                .map(|(&p, &q)| f64::from(p) * f64::from(q))
                .sum();
            let unrounded: f64 = terms.map(|(&p, &q)| f64::from(p * q).abs()).sum();
            let bound = (2.0 * 2f64.powi(-8) + 2f64.powi(-16)) * unrounded;
            assert!(
                (got - exact).abs() <= bound + (case.k as f64 + 2.0) * 6e-8 * size,
                "{what}: {got} vs f32 product {exact}, bound {bound}"
            );
        }
    }
}

/// `to_bf16` on the values whose rounding is easy to get wrong.
#[test]
fn rounding_is_to_nearest_even_and_keeps_nans_and_infinities() {
    let cases: [(u32, u16); 10] = [
        (0x3F80_0000, 0x3F80), // 1.0
        (0x3F80_7FFF, 0x3F80), // below the half: down
        (0x3F80_8000, 0x3F80), // a tie to even (down)
        (0x3F81_8000, 0x3F82), // a tie to even (up)
        (0x3F80_8001, 0x3F81), // above the half: up
        (0x7F7F_FFFF, 0x7F80), // the largest f32 rounds to infinity
        (0xFF80_0000, 0xFF80), // −∞
        (0x0000_0001, 0x0000), // a subnormal flushes to zero
        (0x8040_0000, 0x8000), // a negative one to −0
        (0x7F80_0001, 0x7FC0), // a signalling NaN becomes quiet
    ];
    for (bits, want) in cases {
        assert_eq!(to_bf16(f32::from_bits(bits)), want, "{bits:#010x}");
    }
    assert_eq!(from_bf16(0x3F82), 1.015625);
}

/// Every kernel rounds A as `to_bf16` does: B's columns pick single depths (exact ones), so C holds A's rounded
/// values exactly; the rows hold ties both ways, subnormals and random values, with lengths around the vector
/// widths. (A non-finite value would make every column NaN through its zero products: see the next test.)
#[test]
fn every_kernel_rounds_a_as_documented() {
    let mut special: Vec<f32> = [
        0x3F80_8000u32,
        0x3F81_8000,
        0xBF80_8000,
        0x4049_0FDB,
        0x0000_0001,
        0x8040_0000,
        0x7F7F_0000,
    ]
    .iter()
    .map(|&b| f32::from_bits(b))
    .collect();
    special.extend(randv(23, 5));
    for k in [1, 7, 8, 9, 16, 17, 31, 33] {
        let x: Vec<f32> = special.iter().cycle().skip(k).take(k).copied().collect();
        // B (k×k): column j is 1 at depth j.
        let b: Vec<f32> = (0..k * k)
            .map(|i| f32::from(u8::from(i % (k + 1) == 0)))
            .collect();
        let view = BView {
            offset: 0,
            rs: k,
            cs: 1,
            k,
            n: k,
        };
        let pack = Bf16B::new(&b, view).unwrap().unwrap();
        for kernel in Bf16Kernel::supported() {
            let mut c = vec![0.5f32; k];
            // SAFETY: A is 1×k, C 1×k, the pack k×k.
            unsafe {
                pack.gemm_on(
                    kernel,
                    (1, k, k),
                    0,
                    Strided::new(x.as_ptr(), k as isize, 1),
                    Strided::new(c.as_mut_ptr(), k as isize, 1),
                )
            };
            for (j, (&got, &v)) in c.iter().zip(&x).enumerate() {
                let want = from_bf16(to_bf16(v));
                let same = got == want || (got.is_nan() && want.is_nan());
                assert!(
                    same,
                    "{kernel:?} k {k} at {j}: {v:e} gave {got:e}, not {want:e}"
                );
            }
        }
    }
}

/// A row of A that holds a NaN gives NaN in that row only, one that holds an infinity non-finite values there
/// only (as the f32 product would); a zero row gives zeros; at every tile height.
#[test]
fn non_finite_rows_are_nan_and_zero_rows_are_zero() {
    let (k, n) = (20, 40);
    let b = randv(k * n, 7);
    let view = BView {
        offset: 0,
        rs: n,
        cs: 1,
        k,
        n,
    };
    let pack = Bf16B::new(&b, view).unwrap().unwrap();
    for m in [3, 4, 13] {
        let mut a = randv(m * k, 8);
        a[3] = f32::NAN;
        a[k + 5] = f32::INFINITY;
        a[2 * k..3 * k].fill(0.0);
        for kernel in Bf16Kernel::supported() {
            let mut c = vec![1.5f32; m * n];
            // SAFETY: A is m×k, C m×n, the pack k×n.
            unsafe {
                pack.gemm_on(
                    kernel,
                    (m, k, n),
                    0,
                    Strided::new(a.as_ptr(), k as isize, 1),
                    Strided::new(c.as_mut_ptr(), n as isize, 1),
                )
            };
            assert!(c[..n].iter().all(|v| v.is_nan()), "{kernel:?} m {m}");
            assert!(
                c[n..2 * n].iter().all(|v| !v.is_finite()),
                "{kernel:?} m {m}"
            );
            assert!(
                c[2 * n..3 * n].iter().all(|&v| v == 0.0),
                "{kernel:?} m {m}"
            );
            assert!(c[3 * n..].iter().all(|v| v.is_finite()), "{kernel:?} m {m}");
        }
    }
}

/// A view outside its buffer is not packed (the product stays f32).
#[test]
fn views_outside_their_buffer_are_not_packed() {
    let outside = BView {
        offset: 1,
        rs: 4,
        cs: 1,
        k: 3,
        n: 4,
    };
    assert!(Bf16B::new(&randv(12, 1), outside).unwrap().is_none());
}

/// The kernel each kind of core gets: AMX wherever it is; Zen 4 (512-bit FMAs split) the 256-bit `vdpbf16ps` tile;
/// a core whose `vdpbf16ps` has half its FMAs' rate (Intel's) the 512-bit widening tile; one with AVX-512 but no
/// BF16 the widening tile too; AVX2 and the portable tile below that.
#[test]
fn each_kind_of_core_gets_its_fastest_kernel() {
    use Bf16Kernel::*;
    let every = [Amx, Avx512, Avx512Ymm, Avx512Fma, Avx2, Portable];
    let no_amx = &every[1..];
    let cases: [(&[Bf16Kernel], bool, bool, Bf16Kernel); 7] = [
        (&every, false, true, Amx),
        (no_amx, true, false, Avx512Ymm),
        (no_amx, false, false, Avx512),
        (no_amx, false, true, Avx512Fma),
        (&[Avx512Fma, Avx2, Portable], false, true, Avx512Fma),
        (&[Avx512Fma, Avx2, Portable], true, false, Avx2),
        (&[Portable], false, false, Portable),
    ];
    for (all, splits, half_rate, want) in cases {
        assert_eq!(
            Bf16Kernel::choose(all, splits, half_rate),
            want,
            "{all:?}, splits {splits}, half rate {half_rate}"
        );
    }
}

/// The vector tile a product of few rows runs on: AMX's 8 rows or fewer, and a widening kernel's 1 or 2, go to
/// the faster at that height (`vdpbf16ps` at 1–2 rows; the widening tile from 3 on a core whose `vdpbf16ps` has
/// half the FMAs' rate), and every other product stays on its kernel.
#[test]
fn few_rows_run_on_the_faster_vector_tile() {
    use Bf16Kernel::*;
    let every = [Amx, Avx512, Avx512Ymm, Avx512Fma, Avx2, Portable];
    let no_bf16 = [Avx512Fma, Avx2, Portable];
    let cases: [(Bf16Kernel, usize, &[Bf16Kernel], bool, Bf16Kernel); 12] = [
        (Amx, 1, &every, true, Avx512),
        (Amx, 2, &every, true, Avx512),
        (Amx, 3, &every, true, Avx512Fma),
        (Amx, 8, &every, true, Avx512Fma),
        (Amx, 9, &every, true, Amx),
        (Amx, 5, &every, false, Avx512),
        (Avx512Fma, 1, &every[1..], true, Avx512),
        (Avx512Fma, 2, &every[1..], true, Avx512),
        (Avx512Fma, 3, &every[1..], true, Avx512Fma),
        (Avx512Fma, 1, &no_bf16, true, Avx512Fma),
        (Avx512Ymm, 1, &every[1..], false, Avx512Ymm),
        (Avx2, 1, &no_bf16[1..], false, Avx2),
    ];
    for (kernel, m, all, half_rate, want) in cases {
        assert_eq!(
            kernel.on_rows(m, all, half_rate),
            want,
            "{kernel:?} over {m} rows among {all:?}, half rate {half_rate}"
        );
    }
}
