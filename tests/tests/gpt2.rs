//! The example GPT-2 (`examples/src/models/gpt2.rs`: `Conv1D` weights stored `[in, out]`, queries, keys and values
//! from one product split by `narrow`, learned positions, tanh GELU, pre-norm) in its `tiny` configuration, against
//! transformers' `GPT2Model` on the same weights: the last hidden state of every real position of three
//! right-padded sequences (40, 23 and 1 tokens), fused and eager.
//!
//! The reference is `tests/data/gpt2_hidden.json`, made by `scripts/gpt2_reference.py`; the weights come from the
//! generator that script shares with the Llama test (`fuse_tests::harness::named_weight`).

use fuse_examples::models::gpt2::gpt2_tiny::{Gpt2, EMBD};
use fuse_runtime::Tensor;
use fuse_tests::harness::named_weight;
use fuse_tests::hidden_reference::{assert_plans_match_rows, HiddenReference};

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
    let reference = HiddenReference::read("gpt2_hidden.json");
    let inputs = [reference.ids("input_ids"), reference.mask()];
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let (model, rows) = (model(), reference.rows(EMBD));
    assert_plans_match_rows(model.compiled(), &refs, &rows, 2e-5, 2e-5);
}
