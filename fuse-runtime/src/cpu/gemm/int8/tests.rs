//! The int8 GEMM on every kernel this CPU runs, against an f64 evaluation of the quantised product (exact up to
//! the f32 rounding of the dequantisation) and against the f32 product within a bound derived from the scales.

use super::*;
use crate::cpu::gemm::test_cases::{self, cases, randv, Case};

/// The quantisation as documented, written out again: scale max|x| / 127, values round(x · 127 / max|x|) with
/// ties to even.
fn quantised(x: &[f32]) -> (f64, Vec<i64>) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    if amax == 0.0 {
        return (0.0, vec![0; x.len()]);
    }
    let inv = 127.0 / amax;
    let q = x
        .iter()
        .map(|&v| (v * inv).round_ties_even() as i64)
        .collect();
    (f64::from(amax / 127.0), q)
}

/// The documented quantisation of a row of A, written out: each group of [`activation_group`] depths asymmetric
/// over [min(x, 0), max(x, 0)] with 255 steps; per group its scale and each element's u − zero.
fn quantised_row(x: &[f32]) -> Vec<(f64, Vec<i64>)> {
    x.chunks(activation_group(x.len()))
        .map(|group| {
            let lo = group.iter().fold(0.0f32, |m, &v| m.min(v));
            let hi = group.iter().fold(0.0f32, |m, &v| m.max(v));
            if hi == lo {
                return (0.0, vec![0; group.len()]);
            }
            let inv = 255.0 / (hi - lo);
            let zero = (-lo * inv).round_ties_even();
            let q = group
                .iter()
                .map(|&v| {
                    ((v * inv).round_ties_even() + zero).clamp(0.0, 255.0) as i64 - zero as i64
                })
                .collect();
            (f64::from((hi - lo) / 255.0), q)
        })
        .collect()
}

/// Runs one case on `kernel`: (C, A's rows, B's columns).
fn run_case(
    kernel: Int8Kernel,
    case: &Case,
    seed: u64,
) -> (Vec<f32>, Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let pack = |b: &[f32], view| QuantB::new(b, view).unwrap().expect("the view fits");
    // SAFETY: A is m×k at its strides inside its buffer; C is m×cols; the columns are inside the pack.
    let gemm = |p: &QuantB, dims, col0, a, c| unsafe { p.gemm_on(kernel, dims, col0, a, c) };
    test_cases::run_case(case, seed, pack, gemm)
}

fn check_case(kernel: Int8Kernel, case: &Case, seed: u64) {
    let (c, a_rows, b_cols) = run_case(kernel, case, seed);
    let qa: Vec<_> = a_rows.iter().map(|r| quantised_row(r)).collect();
    let qb: Vec<_> = b_cols.iter().map(|col: &Vec<f32>| quantised(col)).collect();
    for (i, groups) in qa.iter().enumerate() {
        // Each depth's activation scale, for the bound against the f32 product.
        let sa_at: Vec<f64> = groups
            .iter()
            .flat_map(|(sa, q)| std::iter::repeat_n(*sa, q.len()))
            .collect();
        for (j, (sb, b)) in qb.iter().enumerate() {
            // Σ over groups of (the group's integer dot product · its scale), then · s_b.
            let terms: Vec<f64> = groups
                .iter()
                .zip(b.chunks(activation_group(b.len())))
                .map(|((sa, a), b)| {
                    a.iter().zip(b).map(|(x, y)| x * y).sum::<i64>() as f64 * sa * sb
                })
                .collect();
            let want: f64 = terms.iter().sum();
            let size: f64 = terms.iter().map(|t| t.abs()).sum();
            let got = f64::from(c[i * case.cols + j]);
            let what = format!(
                "{kernel:?} {}x{}x{} b_trans {} pad {} cols {}+{} at ({i}, {j})",
                case.m, case.k, case.n, case.b_trans, case.pad, case.col0, case.cols
            );
            // f32 roundings: per group the product by its scale and the running sum's addition, then · s_b; each
            // relative to the terms' size (groups may cancel), not to the result's.
            let roundings = 4.0 + 2.0 * groups.len() as f64;
            assert!(
                (got - want).abs() <= roundings * 6e-8 * size,
                "{what}: {got} vs quantised {want}"
            );
            // Against the f32 product: each term is off by s_a·s_b·(|qa|·½ + |qb|·½ + ¼) at most.
            let (x, y) = (&a_rows[i], &b_cols[j]);
            let exact: f64 = x
                .iter()
                .zip(y)
                .map(|(&p, &q)| f64::from(p) * f64::from(q))
                .sum();
            let bound: f64 = x
                .iter()
                .zip(y)
                .zip(&sa_at)
                .map(|((&p, &q), &sa)| {
                    0.5 * sb * f64::from(p).abs() + 0.5 * sa * f64::from(q).abs() + 0.25 * sa * sb
                })
                .sum();
            assert!(
                (got - exact).abs()
                    <= bound * (1.0 + 1e-6) + 1e-6 * exact.abs() + roundings * 6e-8 * size,
                "{what}: {got} vs f32 product {exact}, bound {bound}"
            );
        }
    }
}

/// A case of an `m`×`k`×`n` product over `cols` columns from `col0` (the fields of [`Case`]).
fn case(m: usize, k: usize, n: usize, b_trans: bool, pad: usize, col0: usize, cols: usize) -> Case {
    Case {
        m,
        k,
        n,
        b_trans,
        pad,
        col0,
        cols,
    }
}

/// Products deep enough for groups of 256 and 512 depths ([`activation_group`]), on blocks of rows and on a
/// decoding step's few, with a last group left short of an AMX step: 1380 deep ends in a depth block's second
/// group of 100, 2404 in a block's only group of 356.
fn deep_cases() -> [Case; 4] {
    [
        case(19, 1380, 40, false, 1, 0, 40),
        case(21, 2404, 40, false, 1, 0, 40),
        case(17, 4100, 70, true, 2, 32, 38),
        case(3, 5000, 64, false, 0, 32, 32),
    ]
}

/// Products whose C is too wide for one row block to keep in L2 (`kernels::rows_for_c`, on any L2 up to 2 MiB): the
/// driver cuts their rows into blocks of equal height, each quantised and run over every panel on its own.
fn wide_cases() -> [Case; 2] {
    [
        case(300, 16, 1024, false, 0, 0, 1024),
        case(77, 100, 2200, true, 1, 64, 2136),
    ]
}

#[test]
fn activation_groups_deepen_only_where_a_row_keeps_four() {
    let groups = [
        (1, 128),
        (384, 128),
        (1023, 128),
        (1024, 256),
        (2047, 256),
        (2048, 512),
    ];
    for (k, group) in groups.into_iter().chain([(MAX_DEPTH, MAX_A_GROUP)]) {
        assert_eq!(activation_group(k), group, "k = {k}");
    }
    for case in deep_cases() {
        assert!(activation_group(case.k) > A_GROUP, "{case:?}");
    }
}

#[test]
fn every_kernel_matches_the_quantised_product_on_odd_shapes_and_views() {
    let mut cases = cases(NR);
    cases.extend(deep_cases());
    cases.extend(wide_cases());
    let kernels = Int8Kernel::supported();
    if kernels.len() < 5 {
        eprintln!("int8 kernels this CPU (or OS) cannot run are skipped; testing {kernels:?}");
    }
    for kernel in kernels {
        for (s, case) in cases.iter().enumerate() {
            check_case(kernel, case, 40 + 3 * s as u64);
        }
    }
}

/// A row of A that holds a NaN or an infinity gives NaN in that row only; a zero row gives zeros.
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
    let pack = QuantB::new(&b, view).unwrap().unwrap();
    let mut a = randv(4 * k, 8);
    a[3] = f32::NAN;
    a[k + 5] = f32::INFINITY;
    a[2 * k..3 * k].fill(0.0);
    for kernel in Int8Kernel::supported() {
        let mut c = vec![1.5f32; 4 * n];
        // SAFETY: A is 4×k, C 4×n, the pack k×n.
        unsafe {
            pack.gemm_on(
                kernel,
                (4, k, n),
                0,
                Strided::new(a.as_ptr(), k as isize, 1),
                Strided::new(c.as_mut_ptr(), n as isize, 1),
            )
        };
        assert!(c[..2 * n].iter().all(|v| v.is_nan()), "{kernel:?}");
        assert!(c[2 * n..3 * n].iter().all(|&v| v == 0.0), "{kernel:?}");
        assert!(c[3 * n..].iter().all(|v| v.is_finite()), "{kernel:?}");
    }
}

/// Views outside their buffer and depths past the i32 accumulator's range are not quantised (the product stays
/// f32).
#[test]
fn unfit_views_are_not_quantised() {
    let buf = randv(12, 1);
    let outside = BView {
        offset: 1,
        rs: 4,
        cs: 1,
        k: 3,
        n: 4,
    };
    assert!(QuantB::new(&buf, outside).unwrap().is_none());
    let deep = BView {
        offset: 0,
        rs: 1,
        cs: 0,
        k: MAX_DEPTH + 1,
        n: 1,
    };
    assert!(QuantB::new(&vec![0.0; MAX_DEPTH + 1], deep)
        .unwrap()
        .is_none());
}

/// Every kernel's quantiser (the SIMD ones written with intrinsics) gives the portable one's levels, scales and
/// zero points bit for bit: on random rows of lengths around the vector widths and the group size, rows that
/// are all positive, all negative or all zero, rows with exact ties (x · 255 / width at half-integers), and rows
/// with a NaN or an infinity.
#[test]
fn every_quantiser_gives_the_portable_levels() {
    let mut rows: Vec<Vec<f32>> = [1, 7, 8, 9, 15, 16, 17, 33, 127, 128, 129, 300, 384]
        .iter()
        .enumerate()
        .map(|(i, &n)| randv(n, 40 + i as u64))
        .collect();
    rows.push(randv(129, 60).iter().map(|v| v.abs() + 0.5).collect());
    rows.push(randv(40, 61).iter().map(|v| -v.abs() - 0.5).collect());
    rows.push(vec![0.0; 21]);
    // Range [-2.55, 0]: a step of 0.01, so x = -0.005 · (2j + 1) lands halfway between levels.
    rows.push(
        (0..40)
            .map(|j| -0.005 * (2 * j + 1) as f32)
            .chain([-2.55])
            .collect(),
    );
    // A NaN or an infinity in each of the AVX-512 scan's places: its first vector, the second (the other running
    // scan), an odd last vector, a partial one after an even count, and a later group.
    for (len, at, bad) in [
        (200, 3, f32::NAN),
        (200, 20, f32::INFINITY),
        (48, 40, f32::NAN),
        (40, 35, f32::NAN),
        (200, 52, f32::NAN),
        (200, 130, f32::NEG_INFINITY),
    ] {
        let mut row = randv(len, 70 + at as u64);
        row[at] = bad;
        rows.push(row);
    }
    // Rows of more groups than the AVX-512 quantiser reduces together (16), its last batch partial, with odd
    // groups among common ones: a NaN, an infinity, all zeros, and a range so narrow that 255 / width overflows.
    let g = MAX_A_GROUP;
    let mut long = randv(17 * g + 52, 80);
    assert_eq!(activation_group(long.len()), g);
    long[5 * g + 7] = f32::NAN;
    long[16 * g + 3] = f32::NEG_INFINITY;
    long[2 * g..3 * g].fill(0.0);
    long[9 * g..10 * g].fill(0.0);
    long[9 * g + 1] = 1e-45;
    long[12 * g + 100] = f32::INFINITY;
    rows.push(long);
    // Exactly 16 groups of the shallowest size, and rows in groups of 256 and 512.
    for (n, seed) in [
        (16 * A_GROUP - 1, 81),
        (17 * A_GROUP + 52, 82),
        (32 * A_GROUP, 83),
    ] {
        rows.push(randv(n, seed));
    }
    let levels = |kernel: Int8Kernel, x: &[f32]| {
        let groups = x.len().div_ceil(activation_group(x.len())).max(1);
        let mut out = vec![0xAAAAu16; x.len().next_multiple_of(4)];
        let (mut scales, mut zeros) = (vec![0.0; groups], vec![0.0; groups]);
        kernel
            .quantize_row(x, &mut out, &mut scales, &mut zeros)
            .unwrap();
        // The byte kernels fill the first half of `out` with bytes.
        let cells: Vec<u16> = if kernel == Int8Kernel::Avx2 {
            out
        } else {
            let bytes: Vec<u8> = out.iter().flat_map(|w| w.to_le_bytes()).collect();
            bytes[..out.len()].iter().map(|&b| u16::from(b)).collect()
        };
        let bits = |v: Vec<f32>| v.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
        (cells, bits(scales), bits(zeros))
    };
    for kernel in Int8Kernel::supported() {
        for x in &rows {
            assert_eq!(
                levels(kernel, x),
                levels(Int8Kernel::Portable, x),
                "{kernel:?} on a row of {} starting {:?}",
                x.len(),
                &x[..x.len().min(3)]
            );
        }
    }
}

#[test]
fn rows_quantised_together_match_each_row_alone() {
    // Rows of 1 to 17 groups: five rows of 384 share one batch of ranges, two of 1536, one of 4096, and a row of
    // 8756 fills a batch and starts another; a NaN, an infinity and an all-zero row sit inside batches.
    for (k, m) in [
        (7, 6),
        (384, 11),
        (1536, 5),
        (4096, 3),
        (17 * MAX_A_GROUP + 52, 2),
    ] {
        let mut a = randv(m * k, k as u64);
        a[k + k / 2] = f32::NAN;
        a[(m - 1) * k + 1] = f32::INFINITY;
        if m > 4 {
            a[3 * k..4 * k].fill(0.0);
        }
        let b = randv(k * 8, 7);
        let view = BView {
            offset: 0,
            rs: 8,
            cs: 1,
            k,
            n: 8,
        };
        let pack = QuantB::new(&b, view).unwrap().unwrap();
        let mut buf = vec![0.0f32; pack.quantised_len(m)];
        let q = pack.quantise_rows(&a, (0, k, 1), m, &mut buf).unwrap();
        let groups = pack.groups();
        for r in 0..m {
            let x = &a[r * k..(r + 1) * k];
            let mut alone = vec![0u16; k.next_multiple_of(4)];
            let (mut scales, mut zeros) = (vec![0.0f32; groups], vec![0.0f32; groups]);
            Int8Kernel::Portable
                .quantize_row(x, &mut alone, &mut scales, &mut zeros)
                .unwrap();
            let alone: Vec<u8> = alone.iter().flat_map(|w| w.to_le_bytes()).collect();
            // SAFETY: `q` holds m rows of `stride` bytes and m·groups scales and zero points, inside `buf`.
            let (cells, s, z) = unsafe {
                (
                    std::slice::from_raw_parts(q.cells.add(r * q.stride), k.next_multiple_of(4)),
                    std::slice::from_raw_parts(q.scales.add(r * groups), groups),
                    std::slice::from_raw_parts(q.zeros.add(r * groups), groups),
                )
            };
            let bits = |v: &[f32]| v.iter().map(|s| s.to_bits()).collect::<Vec<_>>();
            assert_eq!(cells, &alone[..cells.len()], "cells of row {r} of {m}×{k}");
            assert_eq!(bits(s), bits(&scales), "scales of row {r} of {m}×{k}");
            assert_eq!(bits(z), bits(&zeros), "zero points of row {r} of {m}×{k}");
        }
    }
}
