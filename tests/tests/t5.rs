//! The example T5 encoder (`examples/src/models/t5.rs`: RMS norms, unscaled scores, a gated GELU feed-forward and
//! the relative position bias the first block makes for all) in its `tiny` configuration, against transformers'
//! `T5EncoderModel` on the same weights: the last hidden state at a spread of positions of two right-padded
//! sequences of 72, so every distance from 0 to 71, both ways, enters the bias, 16, 32 and 64 included.
//!
//! The reference is `tests/data/t5_hidden.json`, made by `scripts/t5_reference.py`; the weights come from the
//! generator that script shares with the Llama test (`fuse_tests::harness::named_weight`). The file also lists
//! transformers' parameter names, which must be the model's, so a checkpoint loads as it is.

use fuse_examples::models::t5::t5_tiny::{T5Encoder, D_MODEL};
use fuse_runtime::Tensor;
use fuse_tests::harness::named_weight;
use fuse_tests::hidden_reference::{assert_plans_match_rows, HiddenReference};

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

#[test]
fn hidden_states_match_transformers() {
    let reference = HiddenReference::read("t5_hidden.json");
    let mut theirs: Vec<&str> = reference.doc["parameters"]
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

    let inputs = [reference.ids("input_ids"), reference.mask()];
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let (model, rows) = (model(), reference.rows(D_MODEL));
    assert_plans_match_rows(model.compiled(), &refs, &rows, 2e-5, 2e-5);
}
