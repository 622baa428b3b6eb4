//! The example T5 encoder (`examples/src/models/t5.rs`: RMS norms, unscaled scores, a gated GELU feed-forward and
//! the relative position bias the first block makes for all) in its `tiny` configuration, against transformers'
//! `T5EncoderModel` on the same weights: the last hidden state at a spread of positions of two right-padded
//! sequences of 72, so every distance from 0 to 71, both ways, enters the bias, 16, 32 and 64 included.
//!
//! The reference is `tests/data/t5_hidden.json`, made by `scripts/t5_reference.py`; the weights come from the
//! generator that script shares with the Llama test (`fuse_tests::harness::named_weight`). The file also lists
//! transformers' parameter names, which must be the model's, so a checkpoint loads as it is.

use std::path::Path;

use fuse_examples::models::t5::t5_tiny::{T5Encoder, D_MODEL};
use fuse_runtime::{PlanMode, Tensor};
use fuse_tests::harness::{assert_rows_close, named_weight, RefRow};

/// The model with the reference's weights, drawn as `scripts/t5_reference.py` draws them.
fn model() -> T5Encoder {
    let weights = T5Encoder::spec()
        .params
        .iter()
        .map(|p| {
            let (scale, offset) = if p.name.contains("layer_norm") {
                (0.2, 1.0)
            } else if p.name.ends_with("relative_attention_bias.weight") {
                (2.0, 0.0)
            } else if p.name == "shared.weight" {
                (1.0, 0.0)
            } else {
                ((3.0 / p.shape[1] as f64).sqrt(), 0.0)
            };
            named_weight(p.name, p.shape, scale, offset)
        })
        .collect();
    T5Encoder::from_weights(weights).expect("weights fit the model")
}

fn rows_of<T>(v: &serde_json::Value, each: impl Fn(&serde_json::Value) -> T) -> Vec<Vec<T>> {
    let rows = v.as_array().expect("rows");
    rows.iter()
        .map(|r| r.as_array().expect("a row").iter().map(&each).collect())
        .collect()
}

#[test]
fn hidden_states_match_transformers() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/t5_hidden.json");
    let text = std::fs::read_to_string(&path).expect("tests/data/t5_hidden.json");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let mut theirs: Vec<&str> = doc["parameters"]
        .as_array()
        .expect("names")
        .iter()
        .map(|n| n.as_str().expect("a name"))
        .collect();
    let mut ours: Vec<&str> = T5Encoder::spec().params.iter().map(|p| p.name).collect();
    theirs.sort_unstable();
    ours.sort_unstable();
    assert_eq!(
        ours, theirs,
        "the model's parameters are transformers' names"
    );

    let ids = rows_of(&doc["input_ids"], |v| v.as_i64().expect("an id"));
    let mask = rows_of(&doc["attention_mask"], |v| {
        v.as_f64().expect("0 or 1") as f32
    });
    let (batch, seq) = (ids.len(), ids[0].len());
    let inputs = [
        Tensor::from_i64(&[batch, seq], ids.concat()).expect("ids"),
        Tensor::from_f32(&[batch, seq], mask.concat()).expect("mask"),
    ];
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let positions = doc["positions"].as_array().expect("positions");
    let hidden = rows_of(&doc["hidden"], |row| {
        let values = row.as_array().expect("a hidden row");
        values
            .iter()
            .map(|v| v.as_f64().expect("a value"))
            .collect::<Vec<f64>>()
    });
    let mut rows = Vec::new();
    for (b, sequence) in hidden.into_iter().enumerate() {
        for (values, p) in sequence.into_iter().zip(positions) {
            let p = p.as_u64().expect("a position") as usize;
            rows.push(RefRow {
                label: format!("sequence {b}, position {p}"),
                start: (b * seq + p) * D_MODEL,
                values,
            });
        }
    }
    let model = model();
    for mode in [PlanMode::Fused, PlanMode::Eager] {
        let out = model
            .compiled()
            .run_one(mode, &refs)
            .expect("the model runs");
        let what = format!("{mode:?} against transformers");
        let worst = assert_rows_close(&what, &out.to_f32_vec(), &rows, 2e-5, 2e-5);
        eprintln!("{mode:?}: largest difference from transformers {worst:.2e}");
    }
}
