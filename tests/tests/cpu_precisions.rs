//! The int8 and bf16 CPU precisions end to end: a Linear layer with a bias, an activation and a residual (the
//! epilogue runs on the dequantised or f32-summed tile) against an f64 evaluation of the quantised or rounded
//! product, on both plans and every GEMM path (one row block, columns split across threads, several row blocks);
//! switching back to f32 restores the f32 numbers; the device report names the precision.

use fuse_runtime::cpu::gemm::bf16::{from_bf16, to_bf16};
use fuse_runtime::cpu::gemm::int8::A_GROUP;
use fuse_runtime::{CpuPrecision, Tensor};

#[fuse_runtime::fused_model]
mod layer {
    /// Not a multiple of 4 (the int8 depth quad) nor of a tile; both depths span two or three activation groups,
    /// the last one partial.
    pub const D: usize = 203;
    pub const H: usize = 333;

    pub struct Layer {
        #[shape(H, D)]
        w: Tensor,
        #[shape(H)]
        b: Tensor,
        #[shape(H, D)]
        v: Tensor,
    }

    impl Layer {
        pub fn forward(&self, #[shape(batch, D)] x: Tensor) -> Tensor {
            let h = (x.matmul(&self.w.t()) + &self.b).relu();
            h.matmul(&self.v) + x
        }
    }
}

use layer::{Layer, D, H};

/// The documented quantisation, written out: (scale, values) with scale max|x| / 127 and values
/// round(x · 127 / max|x|), ties to even.
fn quantised(x: &[f32]) -> (f64, Vec<i64>) {
    let amax = x.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    if amax == 0.0 {
        return (0.0, vec![0; x.len()]);
    }
    let inv = 127.0 / amax;
    (
        f64::from(amax / 127.0),
        x.iter()
            .map(|&v| (v * inv).round_ties_even() as i64)
            .collect(),
    )
}

/// The documented quantisation of a row of A, written out: each group of `A_GROUP` depths asymmetric over
/// [min(x, 0), max(x, 0)] with 255 steps; per group (scale, u − zero) per element.
fn quantised_row(x: &[f32]) -> Vec<(f64, Vec<i64>)> {
    x.chunks(A_GROUP)
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

/// `x · B` for rows `x` (f32) and B given by its columns, quantised as the int8 GEMM does, in f64: each group's
/// integer sum times its scale, summed over the groups, times the column's scale.
fn quantised_product(x: &[Vec<f32>], columns: &[Vec<f32>]) -> Vec<Vec<f64>> {
    let qb: Vec<_> = columns.iter().map(|c| quantised(c)).collect();
    x.iter()
        .map(|row| {
            let groups = quantised_row(row);
            qb.iter()
                .map(|(sb, q)| {
                    let sum: f64 = groups
                        .iter()
                        .zip(q.chunks(A_GROUP))
                        .map(|((sa, qa), qg)| {
                            qa.iter().zip(qg).map(|(a, b)| a * b).sum::<i64>() as f64 * sa
                        })
                        .sum();
                    sum * sb
                })
                .collect()
        })
        .collect()
}

/// `x · B` for rows `x` and B given by its columns, both rounded to bf16 as the bf16 GEMM does, in f64.
fn rounded_product(x: &[Vec<f32>], columns: &[Vec<f32>]) -> Vec<Vec<f64>> {
    let round = |v: &[f32]| -> Vec<f64> {
        v.iter()
            .map(|&e| f64::from(from_bf16(to_bf16(e))))
            .collect()
    };
    let cols: Vec<Vec<f64>> = columns.iter().map(|c| round(c)).collect();
    x.iter()
        .map(|row| {
            let r = round(row);
            cols.iter()
                .map(|c| r.iter().zip(c).map(|(a, b)| a * b).sum())
                .collect()
        })
        .collect()
}

type Product = fn(&[Vec<f32>], &[Vec<f32>]) -> Vec<Vec<f64>>;

/// The forward with both products computed by `product` (quantised or rounded), in f64 (the hidden layer
/// rounded to f32 as it is stored).
fn reference(model: &Layer, x: &[f32], batch: usize, product: Product) -> Vec<f64> {
    let [w, b, v] = [0, 1, 2].map(|i| model.weights()[i].to_f32_vec());
    let rows: Vec<Vec<f32>> = x.chunks(D).map(<[f32]>::to_vec).collect();
    // Columns of Wᵀ are rows of W; columns of V are strided.
    let w_cols: Vec<Vec<f32>> = w.chunks(D).map(<[f32]>::to_vec).collect();
    let v_cols: Vec<Vec<f32>> = (0..D)
        .map(|j| (0..H).map(|l| v[l * D + j]).collect())
        .collect();
    let h: Vec<Vec<f32>> = product(&rows, &w_cols)
        .into_iter()
        .map(|r| {
            r.iter()
                .zip(&b)
                .map(|(&p, &bias)| ((p + f64::from(bias)).max(0.0)) as f32)
                .collect()
        })
        .collect();
    let y = product(&h, &v_cols);
    (0..batch)
        .flat_map(|i| (0..D).map(move |j| (i, j)))
        .map(|(i, j)| y[i][j] + f64::from(x[i * D + j]))
        .collect()
}

fn weights(seed: u64) -> Vec<Tensor> {
    let scaled = |shape: &[usize], seed: u64, by: f32| {
        let v = Tensor::randn(shape, seed).to_f32_vec();
        Tensor::from_f32(shape, v.iter().map(|x| x * by).collect()).unwrap()
    };
    vec![
        scaled(&[H, D], seed, 1.0 / (D as f32).sqrt()),
        scaled(&[H], seed + 1, 0.1),
        scaled(&[H, D], seed + 2, 1.0 / (H as f32).sqrt()),
    ]
}

/// The layer in `precision` against `product`'s f64 forward on every GEMM path, within `tolerance` of the
/// output's largest value.
fn matches_reference(precision: CpuPrecision, product: Product, tolerance: f64) {
    let model = Layer::from_weights(weights(3))
        .unwrap()
        .with_cpu_precision(precision)
        .unwrap();
    assert_eq!(model.compiled().cpu_precision(), precision);
    // Batch 3: one row block; 70: columns split across threads; 300: two row blocks of 256.
    for (batch, seed) in [(3, 1), (70, 2), (300, 3)] {
        let x = Tensor::randn(&[batch, D], seed);
        let want = reference(&model, &x.to_f32_vec(), batch, product);
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for (mode, got) in [
            ("fused", model.forward(&x).unwrap()),
            ("eager", model.forward_eager(&x).unwrap()),
        ] {
            for (i, (&g, &w)) in got.to_f32_vec().iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(g) - w).abs() <= tolerance * scale,
                    "{precision} {mode} batch {batch} at {i}: {g} vs {w}"
                );
            }
        }
    }
}

#[test]
fn int8_layer_matches_the_quantised_f64_forward_on_every_gemm_path() {
    // f32 rounding of sums of ~200 terms, and a hidden value near a quantisation step may round to the
    // neighbouring step (one step of h is max|h| / 127 times a column of V).
    matches_reference(CpuPrecision::Int8, quantised_product, 2e-3);
}

#[test]
fn bf16_layer_matches_the_rounded_f64_forward_on_every_gemm_path() {
    // f32 sums of ~300 exact products, and a hidden value near a bf16 step may round to the neighbouring one
    // (2⁻⁸ of itself, in one term of a sum of 333). Rounding either operand wrongly (truncating, or not at all)
    // is off by ~2⁻⁹ of every term.
    matches_reference(CpuPrecision::Bf16, rounded_product, 2e-4);
}

/// The layer in `precision` is close to f32 (cosine) and not equal to it, packs fewer bytes, is named in the
/// device report, and switching back restores the f32 numbers exactly.
fn close_to_f32_and_back(precision: CpuPrecision, min_cosine: f64) {
    let f32_model = Layer::from_weights(weights(5)).unwrap();
    let x = Tensor::randn(&[64, D], 9);
    let exact = f32_model.forward(&x).unwrap().to_f32_vec();
    let f32_bytes = f32_model.compiled().packed_weight_bytes();
    let reduced = f32_model.with_cpu_precision(precision).unwrap();
    let report = reduced.compiled().device_report();
    assert!(
        report.contains(&format!("{precision} GEMMs")) && report.contains("2 of the 2"),
        "{report}"
    );
    let approx = reduced.forward(&x).unwrap().to_f32_vec();
    let (mut dot, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
    for (&a, &b) in approx.iter().zip(&exact) {
        dot += f64::from(a) * f64::from(b);
        na += f64::from(a).powi(2);
        nb += f64::from(b).powi(2);
    }
    let cosine = dot / (na * nb).sqrt();
    assert!(cosine > min_cosine, "{precision} cosine {cosine}");
    assert_ne!(approx, exact);
    if f32_bytes > 0 {
        assert!(reduced.compiled().packed_weight_bytes() < f32_bytes);
    }
    let back = reduced.with_cpu_precision(CpuPrecision::F32).unwrap();
    assert_eq!(back.forward(&x).unwrap().to_f32_vec(), exact);
    assert!(!back
        .compiled()
        .device_report()
        .contains(&format!("{precision}")));
}

#[test]
fn int8_is_close_to_f32_and_switching_back_restores_f32() {
    close_to_f32_and_back(CpuPrecision::Int8, 0.9995);
}

#[test]
fn bf16_is_close_to_f32_and_switching_back_restores_f32() {
    close_to_f32_and_back(CpuPrecision::Bf16, 0.99995);
}
