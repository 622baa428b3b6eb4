//! The f32 tile over a weight held in f16 ([`PackedB::new_f16`]), on every backend and few-row kernel this CPU
//! runs: bit for bit the f32 product over the f16-rounded weight (the same blocking and sums, only the panels'
//! source differs), within f32's summation bound of an f64 evaluation of that product, and within f16's rounding
//! bound of the unrounded product.

use super::half::to_f16;
use super::test_cases::{self, cases, Case};
use super::{BView, Backend, GemvKernel, PackedB};

fn rounded(x: f32) -> f32 {
    to_f16(x).expect("test values are in f16's range").to_f32()
}

/// Runs `case` over a pack made by `pack` on `gemv`: (C, A's rows, B's columns as stored, unrounded).
fn run_case(
    gemv: GemvKernel,
    case: &Case,
    seed: u64,
    pack: impl Fn(&[f32], BView) -> PackedB,
) -> (Vec<f32>, Vec<Vec<f32>>, Vec<Vec<f32>>) {
    // SAFETY: A is m×k at its strides inside its buffer; C is m×cols; the columns are inside the pack; `gemv`
    // is one of this CPU's.
    let gemm =
        |p: &PackedB, dims, col0, a, c| unsafe { p.sgemm_on(gemv, dims, col0, 1.0, a, 0.0, c) };
    test_cases::run_case(case, seed, pack, gemm)
}

#[test]
fn f16_panels_give_the_f32_product_of_the_rounded_weight_on_every_kernel() {
    let backends: Vec<Backend> = Backend::available()
        .into_iter()
        .filter(|b| *b != Backend::Portable)
        .collect();
    if backends.is_empty() {
        eprintln!("skipped: this CPU runs neither GEMM tile that packs");
        return;
    }
    for backend in backends {
        let nr = PackedB::new(
            backend,
            &[0.0],
            BView {
                offset: 0,
                rs: 1,
                cs: 1,
                k: 1,
                n: 1,
            },
        )
        .unwrap()
        .expect("packs for its own backend")
        .nr();
        for gemv in GemvKernel::supported() {
            for (s, case) in cases(nr).iter().enumerate() {
                let seed = 70 + 5 * s as u64;
                let half =
                    |b: &[f32], v| PackedB::new_f16(backend, b, v).unwrap().expect("in range");
                let (c, a_rows, b_cols) = run_case(gemv, case, seed, half);
                let f32_of_rounded = |b: &[f32], v| {
                    let b: Vec<f32> = b.iter().map(|&x| rounded(x)).collect();
                    PackedB::new(backend, &b, v).unwrap().expect("fits")
                };
                let (want, ..) = run_case(gemv, case, seed, f32_of_rounded);
                let what = format!("{backend:?} {gemv:?} {case:?}");
                for (i, (g, w)) in c.iter().zip(&want).enumerate() {
                    assert_eq!(g.to_bits(), w.to_bits(), "{what} at {i}: {g} vs {w}");
                }
                for (i, x) in a_rows.iter().enumerate() {
                    for (j, y) in b_cols.iter().enumerate() {
                        let got = f64::from(c[i * case.cols + j]);
                        let terms = x.iter().zip(y);
                        let of_rounded: f64 = terms
                            .clone()
                            .map(|(&p, &q)| f64::from(p) * f64::from(rounded(q)))
                            .sum();
                        let size: f64 = terms
                            .clone()
                            .map(|(&p, &q)| (f64::from(p) * f64::from(q)).abs())
                            .sum();
                        let sums = (case.k as f64 + 2.0) * 6e-8 * size;
                        assert!(
                            (got - of_rounded).abs() <= sums,
                            "{what} ({i}, {j}): {got} vs {of_rounded}"
                        );
                        // Each weight is off by at most 2⁻¹¹ of itself (11 significant bits); none here is subnormal.
                        let exact: f64 = terms.map(|(&p, &q)| f64::from(p) * f64::from(q)).sum();
                        let bound = 2f64.powi(-11) * size + sums;
                        assert!(
                            (got - exact).abs() <= bound,
                            "{what} ({i}, {j}): {got} vs {exact}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn a_weight_beyond_f16s_range_is_not_packed_in_f16_and_columns_widen_exactly() {
    let Some(&backend) = Backend::available()
        .iter()
        .find(|b| **b != Backend::Portable)
    else {
        eprintln!("skipped: this CPU runs neither GEMM tile that packs");
        return;
    };
    let (k, n) = (5, 40);
    let view = BView {
        offset: 0,
        rs: n,
        cs: 1,
        k,
        n,
    };
    let mut b = test_cases::randv(k * n, 9);
    let pack = PackedB::new_f16(backend, &b, view)
        .unwrap()
        .expect("in range");
    let mut column = vec![0.0; k];
    for j in 0..n {
        assert!(pack.column(j, &mut column));
        let want: Vec<f32> = (0..k).map(|l| rounded(b[l * n + j])).collect();
        assert_eq!(column, want, "column {j}");
    }
    assert!(!pack.column(n, &mut column));
    assert_eq!(pack.bytes(), 2 * k * n.next_multiple_of(pack.nr()));
    b[3 * n + 17] = 7e4;
    assert!(PackedB::new_f16(backend, &b, view).unwrap().is_none());
}
