//! The example MPNet (`examples/src/models/mpnet.rs`: BERT-like layers plus a relative position bias whose buckets
//! come from `log` and `trunc` of the distance between positions) in its `tiny` configuration, against
//! transformers' `MPNetModel` on the same weights: the last hidden state at a spread of positions of two
//! right-padded sequences of 72, so every distance from 0 to 71 enters the bias, 16, 32 and 64 included (where the
//! bucket's quotient is an integer).
//!
//! The reference is `tests/data/mpnet_hidden.json`, made by `scripts/mpnet_reference.py`; the weights come from
//! the generator that script shares with the Llama test (`fuse_tests::harness::named_weight`). The bias table is
//! drawn wide (±2), so a bucket off by one for a single pair moves that row's hidden state by far more than the
//! tolerance.

use std::path::Path;

use fuse_examples::models::mpnet::mpnet_tiny::{MpNet, HIDDEN};
use fuse_runtime::{PlanMode, Tensor};
use fuse_tests::harness::{assert_rows_close, named_weight, RefRow};

/// The model with the reference's weights, drawn as `scripts/mpnet_reference.py` draws them.
fn model() -> MpNet {
    let weights = MpNet::spec()
        .params
        .iter()
        .map(|p| {
            let (scale, offset) = if p.name.contains("LayerNorm.weight") {
                (0.2, 1.0)
            } else if p.name.ends_with("relative_attention_bias.weight") {
                (2.0, 0.0)
            } else if p.name.contains("embeddings") {
                (1.0, 0.0)
            } else if p.name.ends_with("bias") {
                (0.1, 0.0)
            } else {
                ((3.0 / p.shape[1] as f64).sqrt(), 0.0)
            };
            named_weight(p.name, p.shape, scale, offset)
        })
        .collect();
    MpNet::from_weights(weights).expect("weights fit the model")
}

fn floats(v: &serde_json::Value) -> Vec<f64> {
    let values = v.as_array().expect("numbers");
    values
        .iter()
        .map(|x| x.as_f64().expect("a number"))
        .collect()
}

fn ints(v: &serde_json::Value) -> Vec<i64> {
    let rows = v.as_array().expect("rows");
    rows.iter()
        .flat_map(|row| row.as_array().expect("a row").iter())
        .map(|x| x.as_i64().expect("an integer"))
        .collect()
}

#[test]
fn hidden_states_match_transformers() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/mpnet_hidden.json");
    let text = std::fs::read_to_string(&path).expect("tests/data/mpnet_hidden.json");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let (ids, positions) = (ints(&doc["input_ids"]), ints(&doc["position_ids"]));
    let mask: Vec<f32> = ints(&doc["attention_mask"])
        .iter()
        .map(|&m| m as f32)
        .collect();
    let batch = doc["input_ids"].as_array().expect("rows").len();
    let seq = ids.len() / batch;
    let inputs = [
        Tensor::from_i64(&[batch, seq], ids).expect("ids"),
        Tensor::from_i64(&[batch, seq], positions).expect("positions"),
        Tensor::from_f32(&[batch, seq], mask).expect("mask"),
    ];
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let at: Vec<usize> = doc["positions"]
        .as_array()
        .expect("positions")
        .iter()
        .map(|p| p.as_u64().expect("a position") as usize)
        .collect();
    let model = model();
    let mut rows = Vec::new();
    for b in 0..batch {
        for (i, &p) in at.iter().enumerate() {
            rows.push(RefRow {
                label: format!("sequence {b}, position {p}"),
                start: (b * seq + p) * HIDDEN,
                values: floats(&doc["hidden"][b][i]),
            });
        }
    }
    for mode in [PlanMode::Fused, PlanMode::Eager] {
        let hidden = model
            .compiled()
            .run_one(mode, &refs)
            .expect("the model runs");
        let what = format!("{mode:?} against transformers");
        let worst = assert_rows_close(&what, &hidden.to_f32_vec(), &rows, 2e-5, 2e-5);
        eprintln!("{mode:?}: largest difference from transformers {worst:.2e}");
    }
}
