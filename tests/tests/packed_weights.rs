//! GEMM weights packed once at load: a model computes with the weights it was given, packed or not, on every
//! GEMM path (row blocks, column blocks), with tied weights packed once; a model built from other weights uses
//! those, never a pack made for the first.

use fuse_runtime::cpu::gemm::Backend;
use fuse_runtime::Tensor;

#[fuse_runtime::fused_model]
mod tied {
    /// Deeper than a Zen 3 AVX2 depth block (kc = 384) and not a whole number of tiles.
    pub const D: usize = 400;
    pub const H: usize = 37;

    pub struct Tied {
        #[shape(D, D)]
        w: Tensor,
        #[shape(D, H)]
        v: Tensor,
    }

    impl Tied {
        pub fn forward(&self, #[shape(batch, D)] x: Tensor) -> Tensor {
            // `w` is read twice through the same view (tied), `v` as stored (row-major B).
            let h = x.matmul(&self.w.t()).relu();
            let h = h.matmul(&self.w.t());
            h.matmul(&self.v)
        }
    }
}

use tied::{Tied, D, H};

/// The forward in f64: relu(x·Wᵀ)·Wᵀ·V.
fn reference(x: &[f32], w: &[f32], v: &[f32], batch: usize) -> Vec<f64> {
    let linear = |h: &[f64], rows: usize| -> Vec<f64> {
        let mut out = vec![0.0; rows * D];
        for i in 0..rows {
            for o in 0..D {
                out[i * D + o] = (0..D).map(|l| h[i * D + l] * f64::from(w[o * D + l])).sum();
            }
        }
        out
    };
    let x: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let h: Vec<f64> = linear(&x, batch).into_iter().map(|v| v.max(0.0)).collect();
    let h = linear(&h, batch);
    let mut out = vec![0.0; batch * H];
    for i in 0..batch {
        for j in 0..H {
            out[i * H + j] = (0..D).map(|l| h[i * D + l] * f64::from(v[l * H + j])).sum();
        }
    }
    out
}

fn check(model: &Tied, batch: usize, seed: u64) {
    let x = Tensor::randn(&[batch, D], seed);
    let [w, v] = [0, 1].map(|i| model.weights().expect("f32 weights")[i].to_f32_vec());
    let want = reference(&x.to_f32_vec(), &w, &v, batch);
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    for (mode, got) in [
        ("fused", model.forward(&x).unwrap()),
        ("eager", model.forward_eager(&x).unwrap()),
    ] {
        assert_eq!(got.shape(), &[batch, H]);
        for (i, (&g, &w)) in got.to_f32_vec().iter().zip(&want).enumerate() {
            assert!(
                (f64::from(g) - w).abs() <= 1e-4 * scale,
                "{mode} batch {batch} at {i}: {g} vs {w}"
            );
        }
    }
}

/// Weights scaled so activations stay near 1 through the layers.
fn weights(seed: u64) -> Vec<Tensor> {
    let scaled = |shape: &[usize], seed: u64, by: f32| {
        let v = Tensor::randn(shape, seed).to_f32_vec();
        Tensor::from_f32(shape, v.iter().map(|x| x * by).collect()).unwrap()
    };
    let by = 1.0 / (D as f32).sqrt();
    vec![scaled(&[D, D], seed, by), scaled(&[D, H], seed + 1, by)]
}

#[test]
fn packed_weights_give_the_f64_product_on_every_gemm_path() {
    let model = Tied::from_weights(weights(10)).unwrap();
    // Batch 3: one row block; 70: columns split across threads; 300: more than one row block of 256.
    for (batch, seed) in [(3, 1), (70, 2), (300, 3)] {
        check(&model, batch, seed);
    }
}

#[test]
fn a_model_built_from_new_weights_computes_with_them() {
    let first = Tied::from_weights(weights(20)).unwrap();
    check(&first, 70, 4);
    let second = Tied::from_weights(weights(30)).unwrap();
    check(&second, 70, 5);
    // The first model still computes with its own weights.
    check(&first, 70, 6);
}

/// Tied weights are packed once (one pack for `w.t()`, read by two GEMMs in each plan, one for `v`), each
/// padded to whole panels of the tile this CPU runs; nothing where `matrixmultiply` runs.
#[test]
fn tied_weights_are_packed_once() {
    let model = Tied::from_weights(weights(40)).unwrap();
    let nr = match Backend::best() {
        Backend::Avx512 => 32,
        Backend::Avx2 => 16,
        Backend::Portable => 0,
    };
    let floats = if nr == 0 {
        0
    } else {
        D * D.div_ceil(nr) * nr + D * H.div_ceil(nr) * nr
    };
    assert_eq!(model.compiled().packed_weight_bytes(), floats * 4);
    let tables = &model.compiled().spec().fused.decode().unwrap().packed_b;
    assert_eq!(tables.len(), 3, "{tables:?}");
}
