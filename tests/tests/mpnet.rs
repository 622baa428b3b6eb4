//! The example MPNet (`examples/src/models/mpnet.rs`: BERT-like layers plus a relative position bias whose buckets
//! come from `log` and `trunc` of the distance between positions) in its `tiny` configuration, against
//! transformers' `MPNetModel` on the same weights: the last hidden state at a spread of positions of two
//! right-padded sequences of 72, so every distance from 0 to 71 enters the bias, 16, 32 and 64 included (where the
//! bucket's quotient is an integer).
//!
//! The reference is `tests/data/mpnet_hidden.json`, made by `scripts/mpnet_reference.py`; the weights come from
//! the generator that script shares with the Llama test (`fuse_tests::harness::bert_weights`). The bias table is
//! drawn wide (±2), so a bucket off by one for a single pair moves that row's hidden state by far more than the
//! tolerance.

use fuse_examples::models::mpnet::mpnet_tiny::{MpNet, HIDDEN};
use fuse_runtime::Tensor;
use fuse_tests::harness::bert_weights;
use fuse_tests::hidden_reference::{assert_plans_match_rows, HiddenReference};

/// The model with the reference's weights, drawn as `scripts/mpnet_reference.py` draws them.
fn model() -> MpNet {
    MpNet::from_weights(bert_weights(MpNet::spec())).expect("weights fit the model")
}

#[test]
fn hidden_states_match_transformers() {
    let reference = HiddenReference::read("mpnet_hidden.json");
    // transformers made its position ids from the input ids, as the model does.
    let inputs = [reference.ids("input_ids"), reference.mask()];
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let (model, rows) = (model(), reference.rows(HIDDEN));
    assert_plans_match_rows(model.compiled(), &refs, &rows, 2e-5, 2e-5);
}
