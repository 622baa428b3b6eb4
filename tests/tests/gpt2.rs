//! The example GPT-2 (`examples/src/models/gpt2.rs`: `Conv1D` weights stored `[in, out]`, queries, keys and values
//! from one product split by `narrow`, learned positions, tanh GELU, pre-norm) in its `tiny` configuration, against
//! transformers' `GPT2Model` on the same weights: the last hidden state of every real position of three
//! right-padded sequences (40, 23 and 1 tokens), fused and eager.
//!
//! The reference is `tests/data/gpt2_hidden.json`, made by `scripts/gpt2_reference.py`; the weights come from the
//! generator that script shares with the Llama test (`fuse_tests::harness::named_weight`).

use std::path::Path;

use fuse_examples::models::gpt2::gpt2_tiny::{Gpt2, EMBD};
use fuse_runtime::{PlanMode, Tensor};
use fuse_tests::harness::{assert_rows_close, named_weight, RefRow};

/// The model with the reference's weights, drawn as `scripts/gpt2_reference.py` draws them.
fn model() -> Gpt2 {
    let weights = Gpt2::spec()
        .params
        .iter()
        .map(|p| {
            let norm = p.name.contains(".ln_") || p.name.starts_with("ln_f");
            let (scale, offset) = if norm && p.name.ends_with("weight") {
                (0.2, 1.0)
            } else if p.name == "wte.weight" || p.name == "wpe.weight" {
                (1.0, 0.0)
            } else if p.name.ends_with("bias") {
                (0.1, 0.0)
            } else {
                // `Conv1D` weights are `[in, out]`.
                ((3.0 / p.shape[0] as f64).sqrt(), 0.0)
            };
            named_weight(p.name, p.shape, scale, offset)
        })
        .collect();
    Gpt2::from_weights(weights).expect("weights fit the model")
}

#[test]
fn hidden_states_match_transformers() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/gpt2_hidden.json");
    let text = std::fs::read_to_string(&path).expect("tests/data/gpt2_hidden.json");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let rows = |key: &str| -> Vec<Vec<i64>> {
        let rows = doc[key].as_array().expect("rows");
        rows.iter()
            .map(|r| {
                r.as_array()
                    .expect("a row")
                    .iter()
                    .map(|v| v.as_i64().expect("an integer"))
                    .collect()
            })
            .collect()
    };
    let (ids, mask) = (rows("input_ids"), rows("attention_mask"));
    let (batch, seq) = (ids.len(), ids[0].len());
    let inputs = [
        Tensor::from_i64(&[batch, seq], ids.concat()).expect("ids"),
        Tensor::from_f32(
            &[batch, seq],
            mask.concat().iter().map(|&m| m as f32).collect(),
        )
        .expect("mask"),
    ];
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let model = model();
    let mut rows = Vec::new();
    for (b, sequence) in doc["hidden"]
        .as_array()
        .expect("sequences")
        .iter()
        .enumerate()
    {
        for (p, want) in sequence.as_array().expect("positions").iter().enumerate() {
            let values = want.as_array().expect("a hidden row");
            rows.push(RefRow {
                label: format!("sequence {b}, position {p}"),
                start: (b * seq + p) * EMBD,
                values: values
                    .iter()
                    .map(|v| v.as_f64().expect("a value"))
                    .collect(),
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
