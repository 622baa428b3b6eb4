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

use fuse_examples::models::mpnet::mpnet_tiny::{MpNet, HIDDEN};
use fuse_runtime::Tensor;
use fuse_tests::harness::named_weight;
use fuse_tests::hidden_reference::{assert_plans_match_rows, HiddenReference};

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

#[test]
fn hidden_states_match_transformers() {
    let reference = HiddenReference::read("mpnet_hidden.json");
    // The model makes transformers' position ids from the input ids; the file's are what transformers was given.
    let inputs = [reference.ids("input_ids"), reference.mask()];
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let (model, rows) = (model(), reference.rows(HIDDEN));
    assert_plans_match_rows(model.compiled(), &refs, &rows, 2e-5, 2e-5);
}
