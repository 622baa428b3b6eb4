//! The example RoBERTa (`examples/src/models/roberta.rs`: BERT's layers, position ids made in the model from the
//! padding, one token type) in its `tiny` configuration, against transformers' `RobertaModel` on the same weights:
//! the last hidden state at real and padded positions of three right-padded sequences, the longest (40) as long as
//! the position table allows. transformers was given neither position nor token type ids, so it made both itself;
//! a padded position's hidden state shows its position id (the padding id's row).
//!
//! The reference is `tests/data/roberta_hidden.json`, made by `scripts/roberta_reference.py`; the weights come from
//! the generator that script shares with the MPNet test (`fuse_tests::harness::bert_weights`).

use fuse_examples::models::roberta::roberta_tiny::{Roberta, HIDDEN, MAX_POSITIONS};
use fuse_runtime::{Error, Tensor};
use fuse_tests::harness::bert_weights;
use fuse_tests::hidden_reference::{assert_plans_match_rows, HiddenReference};

/// The model with the reference's weights, drawn as `scripts/roberta_reference.py` draws them.
fn model() -> Roberta {
    Roberta::from_weights(bert_weights(Roberta::spec())).expect("weights fit the model")
}

#[test]
fn hidden_states_match_transformers() {
    let reference = HiddenReference::read("roberta_hidden.json");
    let inputs = [reference.ids("input_ids"), reference.mask()];
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let (model, rows) = (model(), reference.rows(HIDDEN));
    assert_plans_match_rows(model.compiled(), &refs, &rows, 2e-5, 2e-5);
}

/// One position more than the table holds: the last real token's position id is `seq + 1`, one past the table,
/// which the run refuses before any kernel runs rather than reading a row of zeros.
#[test]
fn a_sequence_past_the_position_table_is_refused() {
    let model = model();
    let run = |seq: usize| {
        let ids = Tensor::from_i64(&[1, seq], vec![5; seq]).expect("ids");
        let mask = Tensor::from_f32(&[1, seq], vec![1.0; seq]).expect("mask");
        model.forward(&ids, &mask)
    };
    assert!(run(MAX_POSITIONS - 2).is_ok(), "the longest sequence runs");
    match run(MAX_POSITIONS - 1) {
        Err(Error::IdOutOfRange { id, vocab, .. }) => {
            assert_eq!((id, vocab), (MAX_POSITIONS as i64, MAX_POSITIONS))
        }
        other => panic!("{} positions: {:?}", MAX_POSITIONS - 1, other.map(drop)),
    }
}
