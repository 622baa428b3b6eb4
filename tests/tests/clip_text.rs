//! The example CLIP text tower (`examples/src/models/clip_text.rs`: causal attention in an encoder, quick GELU,
//! pre-norm, and the pooled row at each sequence's end-of-text token, found by `argmax`) in its `tiny`
//! configuration, against transformers' `CLIPTextModel` on the same weights: the last hidden state of every real
//! position of three right-padded sequences (12, 7 and 2 tokens), and each sequence's pooled output, fused and eager.
//! The sequences are padded with the end-of-text id, the largest, so the pooled row is right only if `argmax` picks
//! the first of its ties.
//!
//! The reference is `tests/data/clip_text_hidden.json`, made by `scripts/clip_text_reference.py`; the weights come
//! from the generator that script shares with the Llama test (`fuse_tests::harness::named_weight`).

use fuse_examples::models::clip_text::clip_text_tiny::{ClipText, HIDDEN};
use fuse_runtime::{PlanMode, Tensor};
use fuse_tests::harness::named_weight;
use fuse_tests::hidden_reference::{
    assert_plans_match_output_rows, assert_plans_match_rows, HiddenReference, RefRow,
};

/// The model with the reference's weights, drawn as `scripts/clip_text_reference.py` draws them.
fn model() -> ClipText {
    let weights = ClipText::spec()
        .params
        .iter()
        .map(|p| {
            let (scale, offset) = if p.name.contains("layer_norm") && p.name.ends_with("weight") {
                (0.2, 1.0)
            } else if p.name.ends_with("bias") {
                (0.1, 0.0)
            } else if p.name.contains("embedding") {
                (1.0, 0.0)
            } else {
                ((3.0 / p.shape[1] as f64).sqrt(), 0.0)
            };
            named_weight(p.name, p.shape, scale, offset)
        })
        .collect();
    ClipText::from_weights(weights).expect("weights fit the model")
}

#[test]
fn hidden_states_and_pooled_rows_match_transformers() {
    let reference = HiddenReference::read("clip_text_hidden.json");
    let inputs = [reference.ids("input_ids"), reference.mask()];
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let (model, rows) = (model(), reference.rows(HIDDEN));
    assert_plans_match_rows(model.compiled(), &refs, &rows, 2e-5, 2e-5);
    let pooled: Vec<RefRow> = reference.doc["pooled"]
        .as_array()
        .expect("pooled rows")
        .iter()
        .enumerate()
        .map(|(b, row)| RefRow {
            label: format!("sequence {b}'s pooled row"),
            start: b * HIDDEN,
            values: row
                .as_array()
                .expect("a pooled row")
                .iter()
                .map(|v| v.as_f64().expect("a value"))
                .collect(),
        })
        .collect();
    assert_eq!(pooled.len(), reference.batch);
    let outputs = model
        .compiled()
        .run(PlanMode::Fused, &refs)
        .expect("the model runs");
    assert_eq!(outputs[1].shape(), &[reference.batch, HIDDEN]);
    assert_plans_match_output_rows(model.compiled(), &refs, 1, &pooled, 2e-5, 2e-5);
}
