//! The example ViT (`examples/src/models/vit.rs`: an image cut into patches and projected, a `[CLS]` row broadcast
//! over the batch before them, learned positions, pre-norm layers) in its `tiny` configuration, against
//! transformers' `ViTModel` on the same weights: the last hidden state of every row of two images; and in int8,
//! bf16 and f16, each image's `[CLS]` row against the f32 model's.
//!
//! The reference is `tests/data/vit_hidden.json`, made by `scripts/vit_reference.py`, which draws the weights and
//! the images by the generator this test draws them by, under the names of Hugging Face's ViT checkpoints.

use fuse_examples::models::vit::vit_tiny::{Vit, HIDDEN, PATCHES};
use fuse_runtime::Tensor;
use fuse_tests::harness::named_weight;
use fuse_tests::hidden_reference::{assert_plans_match_rows, RefRow};
use serde_json::Value;

/// A parameter drawn as `init_weights` in `scripts/vit_reference.py` draws it: norms' weights near 1, biases ±0.1,
/// the `[CLS]` row and the positions ±1, products' weights (the patch projection's too) uniform with a spread of
/// 1/√fan_in.
fn vit_weight(name: &str, shape: &[usize]) -> Tensor {
    let (scale, offset) = if name.contains("layernorm") && name.ends_with("weight") {
        (0.2, 1.0)
    } else if name.ends_with("bias") {
        (0.1, 0.0)
    } else if shape.len() < 2 || (name.contains("embeddings") && !name.contains("projection")) {
        (1.0, 0.0)
    } else {
        let fan_in: usize = shape[1..].iter().product();
        ((3.0 / fan_in as f64).sqrt(), 0.0)
    };
    named_weight(name, shape, scale, offset)
}

/// The model with the reference's weights.
fn model() -> Vit {
    let weights = Vit::spec()
        .params
        .iter()
        .map(|p| vit_weight(p.name, p.shape))
        .collect();
    Vit::from_weights(weights).expect("weights fit the model")
}

/// In int8, bf16 and f16 (the patch projection's weight packed from its 4-D tensor, seen as a matrix, like the
/// layers'), each image's `[CLS]` row, what a classifier reads, against the f32 model's: cosine at least
/// `min_cosine` of each precision (int8 quantises each product's activations too).
#[test]
fn reduced_precisions_stay_close_to_f32() {
    use fuse_runtime::CpuPrecision;
    let pixels = named_weight("pixel_values", &[3, 3, 32, 32], 1.0, 0.0);
    let rows = |m: &Vit| -> Vec<Vec<f64>> {
        let out = m.forward(&pixels).expect("the model runs").to_f32_vec();
        (0..3)
            .map(|b| {
                let start = b * (PATCHES + 1) * HIDDEN;
                out[start..start + HIDDEN]
                    .iter()
                    .map(|&v| f64::from(v))
                    .collect()
            })
            .collect()
    };
    let exact = rows(&model());
    for (precision, min_cosine) in [
        (CpuPrecision::Int8, 0.9995),
        (CpuPrecision::Bf16, 0.99995),
        (CpuPrecision::F16, 0.999999),
    ] {
        let reduced = model()
            .with_cpu_precision(precision)
            .expect("packs in the precision");
        let report = reduced.compiled().device_report();
        assert!(report.contains(&format!("{precision} GEMMs")), "{report}");
        for (b, (got, want)) in rows(&reduced).iter().zip(&exact).enumerate() {
            let dot: f64 = got.iter().zip(want).map(|(x, y)| x * y).sum();
            let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
            let cosine = dot / (norm(got) * norm(want));
            assert!(
                cosine >= min_cosine,
                "{precision}, image {b}: cosine {cosine} to f32"
            );
            eprintln!("{precision}, image {b}: cosine {cosine:.7} to f32");
        }
    }
}

#[test]
fn hidden_states_match_transformers() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/vit_hidden.json");
    let text = std::fs::read_to_string(path).expect("the reference file");
    let doc: Value = serde_json::from_str(&text).expect("JSON");
    let shape: Vec<usize> = doc["pixel_shape"]
        .as_array()
        .expect("pixel_shape")
        .iter()
        .map(|d| d.as_u64().expect("a dim") as usize)
        .collect();
    let pixels = named_weight("pixel_values", &shape, 1.0, 0.0);
    let model = model();
    let rows_per_image = PATCHES + 1;
    let mut rows = Vec::new();
    for (b, image) in doc["hidden"].as_array().expect("hidden").iter().enumerate() {
        for (p, values) in image.as_array().expect("rows").iter().enumerate() {
            let values = values.as_array().expect("a row");
            rows.push(RefRow {
                label: format!("image {b}, row {p}"),
                start: (b * rows_per_image + p) * HIDDEN,
                values: values
                    .iter()
                    .map(|v| v.as_f64().expect("a value"))
                    .collect(),
            });
        }
    }
    assert_eq!(
        rows.len(),
        shape[0] * rows_per_image,
        "every row of every image"
    );
    assert_plans_match_rows(model.compiled(), &[&pixels], &rows, 2e-5, 2e-5);
}
