//! `#[state]` fields: a write at a run-time offset into a buffer the caller's session owns, then reads of the
//! written value, against the f64 reference (outputs and the state the call leaves), in both plans.

use fuse_runtime::{Error, PlanMode, Tensor};
use fuse_tests::check::check_stateful;
use rand::{Rng, SeedableRng};

use fuse_tests::op_models::ops::{CacheWrite, ComputedWrites, StateBesideADifference, D, MAX_POS};

/// A session needs only the dims its states name: one nothing asked for (`seq`, under a `seq - 2` that a mean
/// reads over) takes a size that keeps every difference of dims at least 1. Before, it took 1, and `seq - 2` at
/// -1 refused the session. A dim given twice with two sizes, or a sum given a size its terms do not make, is an
/// error too.
#[test]
fn a_session_needs_only_the_dims_its_states_name() {
    let m = StateBesideADifference::random(4);
    let mut session = m
        .session(&[("batch", 2)])
        .expect("a session from `batch` alone");
    for seq in [3, 6] {
        let x = Tensor::randn(&[2, seq, D], seq as u64);
        check_stateful(
            "state beside a difference",
            m.compiled(),
            &mut session,
            &[&x],
            1e-5,
            1e-5,
        );
    }
    match m.session(&[("batch", 2), ("batch", 3)]) {
        Err(Error::DimSizeConflict { dim, first, second }) => {
            assert_eq!((dim.as_str(), first, second), ("batch", 2, 3))
        }
        other => panic!("batch given twice: {:?}", other.err()),
    }
    assert!(m.session(&[("batch", 2), ("batch", 2)]).is_ok());
    let cache = CacheWrite::random(5).into_compiled();
    let sum = *cache
        .spec()
        .dyn_dims
        .iter()
        .find(|d| d.contains(" + "))
        .expect("a sum");
    let sizes = |n| [("batch", 1), ("seq", 3), ("past", 4), (sum, n)];
    assert!(cache.reserve(&sizes(7)).is_ok());
    match cache.reserve(&sizes(8)) {
        Err(Error::DimSizeConflict { dim, first, second }) => {
            assert_eq!((dim.as_str(), first, second), (sum, 8, 7))
        }
        other => panic!("{sum} given 8: {other:?}"),
    }
}

#[test]
fn writes_at_random_offsets_then_reads_of_the_prefix_match_the_reference() {
    let m = CacheWrite::random(30);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(30);
    for case in 0..4u64 {
        let batch = rng.gen_range(1..=3);
        let mut session = m.session(&[("batch", batch)]).unwrap();
        // A prompt, then steps of a few tokens, until the cache is nearly full: each call checked against the
        // reference from the state the previous calls left.
        let mut past = 0;
        while past < MAX_POS {
            let seq = rng.gen_range(1..=(MAX_POS - past).min(5));
            let x = Tensor::randn(&[batch, seq, D], case * 100 + past as u64);
            check_stateful(
                "cache write",
                m.compiled(),
                &mut session,
                &[&x, &fuse_runtime::exec::dim_arg(past).unwrap()],
                1e-5,
                1e-5,
            );
            let (_, keys) = m.forward(&mut session, &x, past).unwrap();
            assert_eq!(keys.shape(), &[batch, past + seq, D]);
            past += seq;
        }
        // The state holds every row written, in order.
        assert!(session.states().unwrap()[0]
            .as_f32()
            .unwrap()
            .iter()
            .all(|v| *v != 0.0));
    }
}

/// Values computed by the write kernel itself (RoPE through a concat along a cache's positions; an elementwise
/// value along a state's last axis) land where a copy of them would, call after call.
#[test]
fn writes_that_compute_their_values_match_the_reference() {
    use fuse_kernels::plan::{plan, KernelKind, Mode};
    use fuse_tests::harness::graph_of;
    let fused = plan(&graph_of(ComputedWrites::spec()), Mode::Fused);
    let computing: Vec<usize> = fused
        .kernels
        .iter()
        .filter(|k| matches!(k.kind, KernelKind::Write { .. }))
        .map(|k| k.nodes.len())
        .collect();
    assert!(
        computing.iter().all(|&n| n > 1),
        "{}",
        fuse_kernels::plan::dump(&fused)
    );
    let m = ComputedWrites::random(32);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(32);
    for case in 0..3u64 {
        let batch = rng.gen_range(1..=3);
        let mut session = m.session(&[("batch", batch)]).unwrap();
        let mut past = 0;
        while past < MAX_POS {
            let seq = rng.gen_range(1..=(MAX_POS - past).min(6));
            let seed = case * 100 + past as u64;
            let inputs = [
                Tensor::randn(&[batch, seq, 12], seed),
                Tensor::randn(&[batch, seq, 6], seed + 1),
                Tensor::randn(&[batch, seq, 6], seed + 2),
                fuse_runtime::exec::dim_arg(past).unwrap(),
            ];
            let refs: Vec<&Tensor> = inputs.iter().collect();
            check_stateful(
                "computed writes",
                m.compiled(),
                &mut session,
                &refs,
                1e-5,
                1e-5,
            );
            m.forward(&mut session, &inputs[0], &inputs[1], &inputs[2], past)
                .unwrap();
            past += seq;
        }
    }
}

#[test]
fn a_write_past_the_state_is_a_typed_error_and_changes_nothing() {
    let m = CacheWrite::random(31);
    let mut session = m.session(&[("batch", 2)]).unwrap();
    let x = Tensor::randn(&[2, 3, D], 1);
    m.forward(&mut session, &x, 0).unwrap();
    let before = session.states().unwrap()[0].clone();
    for mode in [PlanMode::Fused, PlanMode::Eager] {
        let err = m
            .forward_with(mode, &mut session, &x, MAX_POS - 2)
            .expect_err("past the cache");
        assert!(
            matches!(
                err,
                Error::StateWriteOutOfRange {
                    axis: 1,
                    start: 14,
                    len: 3,
                    size: 16,
                    ..
                }
            ),
            "{mode:?}: {err:?}"
        );
        assert_eq!(
            session.states().unwrap()[0].to_f32_vec(),
            before.to_f32_vec()
        );
    }
    // The last offset that fits runs.
    assert!(m.forward(&mut session, &x, MAX_POS - 3).is_ok());
}

#[test]
fn sessions_are_the_callers_and_checked() {
    let m = CacheWrite::random(32);
    let x = Tensor::randn(&[2, 3, D], 1);
    let past = fuse_runtime::exec::dim_arg(0).unwrap();
    // Without a session.
    let err = m
        .compiled()
        .run(PlanMode::Fused, &[&x, &past])
        .expect_err("no session");
    assert!(matches!(err, Error::NeedsSession { .. }), "{err:?}");
    // A session made for another batch.
    let mut small = m.session(&[("batch", 1)]).unwrap();
    let err = m.forward(&mut small, &x, 0).expect_err("batch");
    assert!(
        matches!(&err, Error::StateShape { expected, found, .. } if expected[0] == 2 && found[0] == 1),
        "{err:?}"
    );
    // A session needs the dims its states name.
    assert!(matches!(m.session(&[]), Err(Error::MissingDim { .. })));
    // Two sessions of one model are independent.
    let (mut a, mut b) = (
        m.session(&[("batch", 2)]).unwrap(),
        m.session(&[("batch", 2)]).unwrap(),
    );
    m.forward(&mut a, &x, 0).unwrap();
    assert!(b.states().unwrap()[0]
        .as_f32()
        .unwrap()
        .iter()
        .all(|v| *v == 0.0));
    let y = Tensor::randn(&[2, 3, D], 2);
    m.forward(&mut b, &y, 0).unwrap();
    let (_, from_a) = m.forward(&mut a, &y, 3).unwrap();
    let (_, from_b) = m.forward(&mut b, &y, 3).unwrap();
    // Same new rows, different history.
    assert_ne!(from_a.to_f32_vec(), from_b.to_f32_vec());
    a.reset();
    assert!(a.states().unwrap()[0]
        .as_f32()
        .unwrap()
        .iter()
        .all(|v| *v == 0.0));
    assert_eq!(a.bytes(), 2 * MAX_POS * D * 4);
}

#[test]
fn the_plan_report_shows_the_state_bytes() {
    let m = CacheWrite::random(33);
    // batch, seq, past, past + seq: 2 × 16 × 24 f32 of state at batch 2.
    let report = m.plan().at(&[2, 3, 4]);
    assert_eq!(report.checked_state_bytes(), Some(2 * MAX_POS * D * 4));
    let text = report.to_string();
    assert!(
        text.contains("state 0.00 MB in 1 buffer(s), the session's"),
        "{text}"
    );
    assert!(m.plan().dump().contains("write"), "{}", m.plan().dump());
}

/// On a GPU a write launches threads for the value it writes, not for the whole state (a KV cache holds every
/// position; a decode step writes one).
#[test]
fn a_write_launches_over_its_value_not_the_state() {
    use fuse_kernels::back::cuda::{launches, Grid};
    use fuse_kernels::ir::Op;
    use fuse_kernels::plan::{plan, KernelKind, Mode};
    use fuse_tests::harness::graph_of;
    for spec in [CacheWrite::spec(), ComputedWrites::spec()] {
        let p = plan(&graph_of(spec), Mode::Fused);
        let mut writes = 0;
        for launch in launches(&p, "model") {
            let KernelKind::Write { node } = p.kernels[launch.kernel].kind else {
                continue;
            };
            let Op::Write { value, state, .. } = &p.graph.node(node).op else {
                panic!("a write kernel's node is a write");
            };
            let (value, state) = (
                p.graph.ty(*value).shape.numel(),
                p.graph.ty(*state).shape.numel(),
            );
            assert_ne!(value, state);
            assert_eq!(launch.grid, Grid::Elements(value));
            writes += 1;
        }
        assert!(writes > 0);
    }
}
