//! `arange`: positions and causal masks made inside a model, against the f64 reference at random dims and
//! run-time starts, and the rows an embedding reads at `arange` ids checked before any kernel runs.

use fuse_runtime::Tensor;
use fuse_tests::check::check_model;
use fuse_tests::op_models::ops::{Positions, D, MAX_POS};
use rand::{Rng, SeedableRng};

#[test]
fn arange_positions_mask_attention_and_pick_table_rows() {
    let m = Positions::random(21);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(21);
    for case in 0..4u64 {
        let batch = rng.gen_range(1..4);
        let seq = rng.gen_range(1..=6);
        // The first position, a random one, and the last start whose rows fit the table.
        for past in [0, rng.gen_range(0..=MAX_POS - seq), MAX_POS - seq] {
            let seed = 2100 + case * 10 + past as u64;
            let q = Tensor::randn(&[batch, seq, D], seed);
            let k = Tensor::randn(&[batch, past + seq, D], seed + 1);
            let past_arg = fuse_runtime::exec::dim_arg(past).unwrap();
            check_model("positions", m.compiled(), &[&q, &k, &past_arg], 1e-5, 1e-5);
        }
    }
}

#[test]
fn table_rows_past_the_end_at_arange_ids_are_a_typed_error() {
    let m = Positions::random(22);
    let (seq, past) = (3, MAX_POS - 2);
    let q = Tensor::randn(&[1, seq, D], 1);
    let k = Tensor::randn(&[1, past + seq, D], 2);
    for (mode, run) in [
        ("fused", m.forward(&q, &k, past)),
        ("eager", m.forward_eager(&q, &k, past)),
    ] {
        let err = run.expect_err(mode);
        match &err {
            fuse_runtime::Error::IdOutOfRange {
                id, vocab, table, ..
            } => {
                assert_eq!(*id, (past + seq - 1) as i64, "{mode}");
                assert_eq!(*vocab, MAX_POS, "{mode}");
                assert_eq!(table, "table", "{mode}");
            }
            other => panic!("{mode}: expected IdOutOfRange, got {other:?}"),
        }
    }
    // The report names the bound checked per call.
    let report = m.plan().to_string();
    assert!(
        report.contains("rows read at arange ids of axis 0 of table: past + seq <= 16"),
        "{report}"
    );
}
