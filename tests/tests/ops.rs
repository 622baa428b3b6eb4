//! Every op, fused and eager, against the f64 reference on random inputs and random dynamic dims.
//! Tolerances: 1e-5 absolute + 1e-5 relative for elementwise ops (f32 rounding and the polynomial
//! transcendentals, max error ~4e-7), looser where f32 accumulates over a row or an inner dim.

use fuse_runtime::Tensor;
use fuse_tests::check::check_model;
use rand::{Rng, SeedableRng};

use fuse_tests::op_models::{
    cumsum_inputs, extremes_inputs, non_finite_inputs, ops, rounding_inputs,
};

use ops::*;

/// Random dynamic dims per case: a property test over shapes.
fn cases(seed: u64) -> impl Iterator<Item = (usize, usize, u64)> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    (0..4).map(move |i| (rng.gen_range(1..6), rng.gen_range(1..9), seed * 100 + i))
}

#[test]
fn elementwise_ops() {
    let m = Elementwise::random(1);
    for (batch, _, seed) in cases(1) {
        let (x, y) = (
            Tensor::randn(&[batch, D], seed),
            Tensor::randn(&[batch, D], seed + 1),
        );
        check_model("elementwise", m.compiled(), &[&x, &y], 1e-5, 1e-5);
    }
}

#[test]
fn sin_and_cos() {
    let m = Trig::random(4);
    for (batch, _, seed) in cases(4) {
        let x = Tensor::randn(&[batch, D], seed);
        check_model("trig", m.compiled(), &[&x], 1e-6, 1e-6);
    }
}

#[test]
fn floor_ceil_round_and_trunc() {
    let m = Rounding::random(13);
    for (batch, _, seed) in cases(13) {
        let x = rounding_inputs(batch + 2, seed);
        check_model("rounding", m.compiled(), &[&x], 1e-6, 1e-6);
    }
}

/// Running sums against the reference's f64 ones: the CPU sums in f64 too, so only the output's rounding differs.
/// Sequences of up to 40 positions, so the rows of `seq · D` reach 960. The position ids are also checked against
/// transformers' `create_position_ids_from_input_ids`, written out here (the reference interprets the graph the
/// front end made, so it cannot tell a running sum lowered along the wrong axis).
#[test]
fn cumsum_along_any_axis() {
    let m = Cumsum::random(15);
    for (batch, seq, seed) in cases(15) {
        let seq = seq * 5;
        let inputs = cumsum_inputs(batch, seq, seed);
        let refs: Vec<&Tensor> = inputs.iter().collect();
        check_model("cumsum", m.compiled(), &refs, 1e-6, 1e-6);
        let ids = inputs[1].as_i64().expect("i64 ids");
        let mut want = Vec::new();
        for row in ids.chunks(seq) {
            let mut count = 0;
            for &id in row {
                count += i64::from(id != 1);
                want.push(if id != 1 { count + 1 } else { 1 } as f32);
            }
        }
        let outputs = m.forward(&inputs[0], &inputs[1]).expect("the model runs");
        assert_eq!(outputs.4.to_f32_vec(), want, "position ids {batch}x{seq}");
    }
}

/// PyTorch's `argmax` and `argmin` of a row, written out: the first position of its largest (smallest) value, or
/// of its first NaN; `+0.0` and `-0.0` are equal.
fn first_extreme(row: impl Iterator<Item = f32>, smallest: bool) -> f32 {
    let mut best: Option<(usize, f32)> = None;
    for (i, x) in row.enumerate() {
        if x.is_nan() {
            return i as f32;
        }
        let better = match best {
            None => true,
            Some((_, b)) if smallest => x < b,
            Some((_, b)) => x > b,
        };
        if better {
            best = Some((i, x));
        }
    }
    best.map_or(0.0, |(i, _)| i as f32)
}

/// `argmax` and `argmin` against the reference, and against PyTorch's rule written out above (the reference
/// interprets the graph the front end made, so it cannot tell a wrong lowering), on rows with ties, a NaN, ±∞ and
/// signed zeros; the picked tokens' rows of the table match the reference's, a mask's argmax is its first true, and
/// a concat of picks holds them.
#[test]
fn argmax_and_argmin_pick_the_first_extreme() {
    let m = FirstExtremes::random(30);
    for (batch, seq, seed) in cases(30) {
        let x = extremes_inputs(batch, seq, seed);
        check_model("first extremes", m.compiled(), &[&x], 0.0, 0.0);
        let v = x.to_f32_vec();
        let along_last = |smallest| -> Vec<f32> {
            v.chunks(VOCAB)
                .map(|row| first_extreme(row.iter().copied(), smallest))
                .collect()
        };
        let mut along_seq = Vec::new();
        for b in 0..batch {
            for j in 0..VOCAB {
                let column = (0..seq).map(|s| v[(b * seq + s) * VOCAB + j]);
                along_seq.push(first_extreme(column, false));
            }
        }
        let first_above_two: Vec<f32> = v
            .chunks(VOCAB)
            .map(|row| row.iter().position(|&x| x > 2.0).unwrap_or(0) as f32)
            .collect();
        let (token, smallest, over_seq, _, above, both) = m.forward(&x).expect("the model runs");
        let shape = format!("{batch}x{seq}");
        assert_eq!(token.shape(), &[batch, seq], "{shape}");
        assert_eq!(token.to_f32_vec(), along_last(false), "argmax {shape}");
        assert_eq!(smallest.shape(), &[batch, seq, 1], "{shape}");
        assert_eq!(smallest.to_f32_vec(), along_last(true), "argmin {shape}");
        assert_eq!(over_seq.shape(), &[batch, 1, VOCAB], "{shape}");
        assert_eq!(over_seq.to_f32_vec(), along_seq, "argmax over seq {shape}");
        assert_eq!(
            above.to_f32_vec(),
            first_above_two,
            "a mask's first true {shape}"
        );
        let side_by_side: Vec<f32> = along_last(false)
            .into_iter()
            .zip(along_last(true))
            .flat_map(|(a, b)| [a, b])
            .collect();
        assert_eq!(both.to_f32_vec(), side_by_side, "both picks {shape}");
    }
}

/// Ids computed in the model pick the rows the reference picks, and a `seq` whose ids would reach past the table
/// is refused before any kernel runs.
#[test]
fn ids_computed_in_the_model() {
    let m = ComputedIds::random(16);
    for (batch, seq, seed) in cases(16).chain([(2, 38, 7)]) {
        let ids = &cumsum_inputs(batch, seq, seed)[1];
        check_model("computed ids", m.compiled(), &[ids], 0.0, 0.0);
    }
    let ids = &cumsum_inputs(2, 39, 8)[1];
    match m.forward(ids) {
        Err(fuse_runtime::Error::IdOutOfRange { id, vocab, .. }) => {
            assert_eq!((id, vocab), (40, 40))
        }
        other => panic!("39 positions: {:?}", other.map(drop)),
    }
}

/// Clamped ids run at any length: each row is the table's row at the position this test counts itself
/// (`min(count + 1, 7)` for a real token, 1 for padding), and the reference picks the same.
#[test]
fn clamped_ids_run_at_any_length() {
    let m = ClampedIds::random(19);
    let table = m.compiled().weights().expect("f32 weights")[0].to_f32_vec();
    for (batch, seq, seed) in cases(19).chain([(2, 40, 3)]) {
        let ids = &cumsum_inputs(batch, seq, seed)[1];
        check_model("clamped ids", m.compiled(), &[ids], 0.0, 0.0);
        let got = m.forward(ids).expect("any length runs").to_f32_vec();
        let ids = ids.as_i64().expect("i64 ids");
        for b in 0..batch {
            let mut count = 0;
            for s in 0..seq {
                let real = ids[b * seq + s] != 1;
                count += usize::from(real);
                let position = if real { (count + 1).min(7) } else { 1 };
                let at = (b * seq + s) * D;
                assert_eq!(
                    got[at..at + D],
                    table[position * D..(position + 1) * D],
                    "{batch}x{seq}: sequence {b}, position {s}"
                );
            }
        }
    }
}

/// The methods against values this test computes itself: PyTorch's `floor`, `ceil`, `round` (ties to even),
/// `trunc`, `clamp` (`min(max(x, lo), hi)`: `hi` where `lo > hi`, NaN where any operand is NaN) and the `min`
/// reduction (`amin`: NaN where the lane holds one).
#[test]
fn rounding_and_clamp_are_pytorchs() {
    let m = Named::random(14);
    let nan = f32::NAN;
    let x = [
        -2.5,
        -1.5,
        -0.5,
        0.5,
        1.5,
        2.5,
        -0.7,
        0.7,
        3.0,
        nan,
        f32::INFINITY,
        -1.0,
    ];
    let lo = [
        -1.0, -2.0, 0.0, 0.6, 2.0, 1.0, -0.5, 0.0, 4.0, 0.0, 0.0, nan,
    ];
    let hi = [1.0, 2.0, 1.0, 0.4, 3.0, 2.0, 0.5, 1.0, 5.0, 1.0, 1.0, 1.0];
    let row = |v: &[f32]| -> Vec<f32> { v.iter().copied().cycle().take(D).collect() };
    let input = |v: &[f32]| Tensor::from_f32(&[1, D], row(v)).expect("a [1, D] tensor");
    let out = m
        .forward(&input(&x), &input(&lo), &input(&hi))
        .expect("the model runs");
    let clamp = |(x, lo, hi): (f32, f32, f32)| {
        if x.is_nan() || lo.is_nan() || hi.is_nan() {
            nan
        } else {
            x.max(lo).min(hi)
        }
    };
    let want: [Vec<f32>; 5] = [
        x.map(f32::floor).to_vec(),
        x.map(f32::ceil).to_vec(),
        x.map(f32::round_ties_even).to_vec(),
        x.map(f32::trunc).to_vec(),
        (0..x.len()).map(|i| clamp((x[i], lo[i], hi[i]))).collect(),
    ];
    for (i, (got, want)) in [out.0, out.1, out.2, out.3, out.4]
        .iter()
        .zip(&want)
        .enumerate()
    {
        let (got, want) = (got.to_f32_vec(), row(want));
        let same = got
            .iter()
            .zip(&want)
            .all(|(g, w)| g == w || (g.is_nan() && w.is_nan()));
        assert!(same, "output {i}: {got:?}, want {want:?}");
    }
    let least = row(&hi).into_iter().fold(f32::INFINITY, f32::min);
    assert_eq!(
        (out.5.shape(), out.5.to_f32_vec()),
        (&[1, 1][..], vec![least])
    );
    let nan = out.6.to_f32_vec();
    assert!(out.6.shape() == [1] && nan[0].is_nan(), "{nan:?}");
}

/// NaN and ±∞ against the reference, fused (with its attention kernel) and eager: see `NonFinite`.
#[test]
fn nan_and_infinities_pass_on() {
    let m = NonFinite::random(12);
    let fused = m.compiled().report(fuse_runtime::PlanMode::Fused).dump();
    assert_eq!(fused.matches("_attention -> ").count(), 1, "{fused}");
    for (batch, seq, seed) in cases(12) {
        let inputs = non_finite_inputs(batch + 3, seq, seed);
        let refs: Vec<&Tensor> = inputs.iter().collect();
        check_model("non-finite", m.compiled(), &refs, 1e-5, 1e-5);
    }
}

#[test]
fn broadcasting() {
    let m = Broadcasts::random(2);
    for (batch, _, seed) in cases(2) {
        let (x, y) = (
            Tensor::randn(&[batch, 1, D], seed),
            Tensor::randn(&[3, 1], seed + 1),
        );
        check_model("broadcast", m.compiled(), &[&x, &y], 1e-5, 1e-5);
    }
}

#[test]
fn comparisons_and_where() {
    let m = Masks::random(3);
    for (batch, _, seed) in cases(3) {
        let (x, y) = (
            Tensor::randn(&[batch, D], seed),
            Tensor::randn(&[batch, D], seed + 1),
        );
        check_model("masks", m.compiled(), &[&x, &y], 1e-6, 1e-6);
    }
}

#[test]
fn broadcast_values_recomputed_in_their_readers() {
    let m = RecomputedBroadcasts::random(31);
    for (batch, seq, seed) in cases(31) {
        let (x, mask) = (
            Tensor::randn(&[batch, seq, D], seed),
            Tensor::randn(&[seq, D], seed + 1),
        );
        check_model("recomputed", m.compiled(), &[&x, &mask], 1e-5, 1e-5);
    }
}

#[test]
fn reductions_on_every_axis() {
    let m = Reductions::random(4);
    for (batch, seq, seed) in cases(4) {
        let x = Tensor::randn(&[batch, seq, D], seed);
        check_model("reductions", m.compiled(), &[&x], 1e-5, 1e-5);
    }
}

#[test]
fn softmax_on_last_and_inner_axis() {
    let m = Softmaxes::random(5);
    for (batch, seq, seed) in cases(5) {
        let x = Tensor::randn(&[batch, seq, D], seed);
        check_model("softmax", m.compiled(), &[&x], 1e-6, 1e-5);
    }
}

/// `log_softmax` against values this test computes itself in f64 (the reference interprets the graph the front
/// end made, so it cannot tell a lowering off by a term), fused and eager: along the last axis of logits spread
/// over hundreds, where `softmax().log()` gives `-inf` for most of them, and along the middle axis.
#[test]
fn log_softmax_is_pytorchs() {
    let m = Softmaxes::random(5);
    let log_softmax = |row: &[f64]| -> Vec<f64> {
        let largest = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = row.iter().map(|v| (v - largest).exp()).sum();
        row.iter().map(|v| v - largest - total.ln()).collect()
    };
    for (batch, seq, seed) in cases(15) {
        let x = Tensor::randn(&[batch, seq, D], seed);
        let xs: Vec<f64> = x.to_f32_vec().iter().map(|&v| f64::from(v)).collect();
        let at = |b: usize, s: usize, d: usize| (b * seq + s) * D + d;
        let (mut last, mut middle) = (vec![0.0; xs.len()], vec![0.0; xs.len()]);
        for b in 0..batch {
            for s in 0..seq {
                // The logits as the model rounds them to f32: their rounding is not log_softmax's error.
                let row: Vec<f64> = (0..D)
                    .map(|d| f64::from(200.0 * xs[at(b, s, d)] as f32))
                    .collect();
                for (d, v) in log_softmax(&row).into_iter().enumerate() {
                    last[at(b, s, d)] = v;
                }
            }
            for d in 0..D {
                let column: Vec<f64> = (0..seq).map(|s| xs[at(b, s, d)]).collect();
                for (s, v) in log_softmax(&column).into_iter().enumerate() {
                    middle[at(b, s, d)] = v;
                }
            }
        }
        for (mode, out) in [("fused", m.forward(&x)), ("eager", m.forward_eager(&x))] {
            let out = out.expect("the model runs");
            for (name, got, want) in [
                ("last axis", &out.2, &last),
                ("middle axis", &out.3, &middle),
            ] {
                for (g, w) in got.to_f32_vec().iter().zip(want) {
                    let err = (f64::from(*g) - w).abs();
                    assert!(
                        err <= 1e-5 + 1e-6 * w.abs(),
                        "{mode}, {name} at {batch}x{seq}: {g} against {w}"
                    );
                }
            }
        }
    }
    // One row kernel for each: the reductions fuse with the row.
    let fused = m.compiled().report(fuse_runtime::PlanMode::Fused).dump();
    assert_eq!(fused.matches("_row -> ").count(), 4, "{fused}");
}

/// Concats that broadcast a size-1 axis (a parameter row before each sequence, an input shared by the batch, one
/// row of each sequence repeated along it) against the values this test places itself (the reference interprets
/// the graph the front end made, broadcasts included), fused and eager, at several batches and lengths.
#[test]
fn concats_broadcast_size_one_axes() {
    let m = BroadcastConcats::random(21);
    let cls = m.compiled().weights().expect("weights")[0].to_f32_vec();
    for (batch, seq, seed) in cases(21) {
        let x = Tensor::randn(&[batch, seq, D], seed);
        let y = Tensor::randn(&[1, seq, 2], seed + 1);
        let (xs, ys) = (x.to_f32_vec(), y.to_f32_vec());
        let row = |b: usize, t: usize| &xs[(b * seq + t) * D..][..D];
        let (mut with_cls, mut wider, mut repeated) = (Vec::new(), Vec::new(), Vec::new());
        for b in 0..batch {
            with_cls.extend(cls.iter().map(|v| v * 2.0));
            for t in 0..seq {
                with_cls.extend(row(b, t).iter().map(|v| v * 2.0));
                wider.extend(row(b, t));
                wider.extend(&ys[t * 2..][..2]);
                repeated.extend(row(b, 0).iter().map(|v| v.exp()));
                repeated.extend(row(b, t));
            }
        }
        for (mode, out) in [
            ("fused", m.forward(&x, &y)),
            ("eager", m.forward_eager(&x, &y)),
        ] {
            let out = out.expect("the model runs");
            for (name, got, want) in [
                ("[CLS] row", &out.0, &with_cls),
                ("shared input", &out.1, &wider),
                ("repeated row", &out.2, &repeated),
            ] {
                let got = got.to_f32_vec();
                assert_eq!(got.len(), want.len(), "{mode}, {name} at {batch}x{seq}");
                for (i, (g, w)) in got.iter().zip(want).enumerate() {
                    // exp's rounding may differ from the host's by an ulp or two; the rest is copied.
                    assert!(
                        (g - w).abs() <= 1e-6 * w.abs(),
                        "{mode}, {name} at {batch}x{seq}, element {i}: {g} against {w}"
                    );
                }
            }
        }
    }
}

#[test]
fn layer_and_rms_norm() {
    let m = Norms::random(6);
    for (batch, _, seed) in cases(6) {
        let (x, y) = (
            Tensor::randn(&[batch, D], seed),
            Tensor::randn(&[batch, D], seed + 1),
        );
        check_model("norms", m.compiled(), &[&x, &y], 1e-5, 1e-5);
    }
}

/// Written-out RMSNorm, LayerNorm, softmax and Gemma's RMSNorm cost the kernels their built-ins cost (one
/// each), every one a row region.
#[test]
fn written_out_norms_cost_what_the_builtins_cost() {
    use fuse_kernels::plan::{plan, KernelKind, Mode};
    use fuse_tests::harness::graph_of;
    let written = plan(&graph_of(WrittenNorms::spec()), Mode::Fused);
    let builtin = plan(&graph_of(BuiltinNorms::spec()), Mode::Fused);
    let kinds = |p: &fuse_kernels::plan::Plan| -> Vec<&'static str> {
        p.kernels.iter().map(|k| k.kind.name()).collect()
    };
    assert_eq!(builtin.kernels.len(), 4, "{:?}", kinds(&builtin));
    assert_eq!(
        written.kernels.len(),
        builtin.kernels.len(),
        "{}",
        fuse_kernels::plan::dump(&written)
    );
    assert!(
        written
            .kernels
            .iter()
            .all(|k| k.kind == KernelKind::RowRegion),
        "{:?}",
        kinds(&written)
    );
}

/// The written-out norms against the f64 reference, at random dynamic dims.
#[test]
fn written_out_norms() {
    let m = WrittenNorms::random(11);
    for (batch, seq, seed) in cases(11) {
        let (x, y) = (
            Tensor::randn(&[batch, seq, D], seed),
            Tensor::randn(&[batch, seq, D], seed + 1),
        );
        check_model("written norms", m.compiled(), &[&x, &y], 1e-5, 1e-5);
    }
}

#[test]
fn matmuls_with_epilogues_batches_and_transposes() {
    let m = MatMuls::random(7);
    for (batch, seq, seed) in cases(7) {
        let (x, y) = (
            Tensor::randn(&[batch, seq, D], seed),
            Tensor::randn(&[batch, D, seq], seed + 1),
        );
        check_model("matmul", m.compiled(), &[&x, &y], 1e-5, 1e-5);
    }
}

/// Few rows, many columns, on two threads: the product's columns are split between them, then the epilogue (a
/// bias, a strided read and a per-row value) runs over whole rows, against the reference.
#[test]
fn an_epilogue_on_column_blocks() {
    let m = WideEpilogue::random(16);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("a pool of two threads");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(16);
    for seed in 0..3 {
        let rows = rng.gen_range(33..200);
        let inputs = [
            Tensor::randn(&[rows, 64], seed),
            Tensor::randn(&[512, rows], seed + 1),
            Tensor::randn(&[rows, 1], seed + 2),
        ];
        let refs: Vec<&Tensor> = inputs.iter().collect();
        pool.install(|| check_model("wide epilogue", m.compiled(), &refs, 1e-5, 1e-5));
    }
}

/// Query and key lengths differ (`keys` = `seq` + 3), padding masks off a random tail of the keys, and the
/// fused plan must hold exactly three attention kernels (the fourth attention keeps its probabilities).
#[test]
fn attention_kernels() {
    let m = Attentions::random(10);
    let fused = m.compiled().report(fuse_runtime::PlanMode::Fused).dump();
    assert_eq!(fused.matches("_attention -> ").count(), 4, "{fused}");
    for (batch, seq, seed) in cases(10) {
        let keys = seq + 3;
        let mask: Vec<f32> = (0..batch * keys)
            .map(|i| f32::from(u8::from(i % keys < keys - (seed as usize % 3))))
            .collect();
        let inputs = [
            Tensor::randn(&[batch, seq, D], seed),
            Tensor::randn(&[batch, keys, D], seed + 1),
            Tensor::randn(&[batch, keys, 8], seed + 2),
            Tensor::from_f32(&[batch, keys], mask).expect("mask"),
        ];
        let refs: Vec<&Tensor> = inputs.iter().collect();
        check_model("attention", m.compiled(), &refs, 1e-5, 1e-5);
    }
}

/// Queries that broadcast to the scores (one head against four, one shared by every batch) stay separate products,
/// which compute them right.
#[test]
fn attention_with_broadcast_queries() {
    let m = BroadcastQueries::random(11);
    let fused = m.compiled().report(fuse_runtime::PlanMode::Fused).dump();
    assert_eq!(fused.matches("_attention -> ").count(), 0, "{fused}");
    for (batch, seq, seed) in cases(11) {
        let keys = seq + 2;
        let inputs = [
            Tensor::randn(&[batch, 1, seq, 6], seed),
            Tensor::randn(&[batch, 4, keys, 6], seed + 1),
        ];
        let refs: Vec<&Tensor> = inputs.iter().collect();
        check_model("broadcast queries", m.compiled(), &refs, 1e-5, 1e-5);
    }
}

/// The fused plan of a model, and for each of its attention kernels whether it computes Q.
fn computed_queries(spec: &fuse_runtime::ModelSpec) -> (fuse_kernels::plan::Plan, Vec<bool>) {
    use fuse_kernels::plan::{plan, KernelKind, Mode};
    let fused = plan(&fuse_tests::harness::graph_of(spec), Mode::Fused);
    let queries = fused
        .kernels
        .iter()
        .filter_map(|k| match &k.kind {
            KernelKind::Attention(a) => Some(a.query.is_some()),
            _ => None,
        })
        .collect();
    (fused, queries)
}

/// Q computed inside the attention kernel (RoPE's rotate-half, an elementwise chain, grouped heads) against the
/// f64 reference, at sequence lengths whose attention runs in several blocks of query rows; where Q must stay in
/// memory (also an output, or a permuted view of what is computed) it is read as before.
#[test]
fn attention_kernels_compute_their_queries() {
    use fuse_kernels::plan::KernelKind;
    let (fused, queries) = computed_queries(ComputedQueries::spec());
    let dump = fuse_kernels::plan::dump(&fused);
    assert_eq!(queries, [true, true, true, false, false], "{dump}");
    let placed: Vec<bool> = fused
        .kernels
        .iter()
        .filter(|k| matches!(k.kind, KernelKind::Attention(_)))
        .map(|k| k.write.is_some())
        .collect();
    assert_eq!(placed, [true, false, true, false, false], "{dump}");
    let m = ComputedQueries::random(12);
    for (batch, seq, seed) in [(1, 1, 1200), (2, 7, 1201), (3, 150, 1202), (1, 300, 1203)] {
        let keys = seq + 2;
        let inputs = [
            Tensor::randn(&[batch, seq, D], seed),
            Tensor::randn(&[batch, keys, D], seed + 1),
            Tensor::randn(&[batch, seq, 6], seed + 2),
            Tensor::randn(&[batch, seq, 6], seed + 3),
        ];
        let refs: Vec<&Tensor> = inputs.iter().collect();
        check_model("computed queries", m.compiled(), &refs, 1e-5, 1e-5);
    }
}

/// A tensor read by both the chain that would compute Q and the chain over the scores, at different shapes
/// (grouped heads, and plain heads whose scores are `t` wide): a kernel reads each tensor at one shape, so Q stays
/// a kernel of its own (computing it in the attention kernel made the build panic on the grouped heads), and the
/// results match the f64 reference.
#[test]
fn queries_and_scores_sharing_a_read() {
    let (fused, queries) = computed_queries(SharedQueryReads::spec());
    assert_eq!(
        queries,
        [false, false],
        "{}",
        fuse_kernels::plan::dump(&fused)
    );
    let m = SharedQueryReads::random(13);
    for (batch, seq, seed) in [(1, 1, 1300), (2, 7, 1301), (1, 150, 1302)] {
        let inputs = [
            Tensor::randn(&[batch, seq, D], seed),
            Tensor::randn(&[batch, seq + 3, D], seed + 1),
            Tensor::randn(&[seq, 1], seed + 2),
        ];
        let refs: Vec<&Tensor> = inputs.iter().collect();
        check_model("shared query reads", m.compiled(), &refs, 1e-5, 1e-5);
    }
}

#[test]
fn permute_reshape_slice_concat() {
    let m = Views::random(8);
    for (batch, seq, seed) in cases(8) {
        let x = Tensor::randn(&[batch, seq, D], seed);
        check_model("views", m.compiled(), &[&x], 1e-6, 1e-6);
    }
}

/// Two transposed reads of different strides in one kernel: each steps by its own stride (they once shared one
/// binding, the second read's, which read out of bounds or returned wrong values).
#[test]
fn reads_strided_by_different_strides_in_one_kernel() {
    let m = TwoInnerStrides::random(15);
    for (batch, _, seed) in cases(15) {
        let (x, y) = (
            Tensor::randn(&[batch, D], seed),
            Tensor::randn(&[batch, 48], seed + 1),
        );
        check_model("two inner strides", m.compiled(), &[&x, &y], 1e-6, 1e-6);
    }
}

/// Rotary embeddings and other concats of computed views, against the f64 reference at random dims.
#[test]
fn concats_fused_into_their_readers() {
    let m = Ropes::random(12);
    for (batch, seq, seed) in cases(12) {
        let inputs = [
            Tensor::randn(&[batch, seq, 4, R], seed),
            Tensor::randn(&[seq, R], seed + 1),
            Tensor::randn(&[seq, R], seed + 2),
        ];
        let refs: Vec<&Tensor> = inputs.iter().collect();
        check_model("ropes", m.compiled(), &refs, 1e-5, 1e-5);
    }
}

/// Each of [`Ropes`]' outputs is one elementwise kernel: the concat, the negations and scalings of its inputs
/// and the ops reading it share the kernel (the eager plan spends a kernel on each).
#[test]
fn a_fused_concat_costs_no_kernel() {
    use fuse_kernels::plan::{plan, KernelKind, Mode};
    use fuse_tests::harness::graph_of;
    let fused = plan(&graph_of(Ropes::spec()), Mode::Fused);
    let dump = fuse_kernels::plan::dump(&fused);
    assert_eq!(fused.kernels.len(), 4, "{dump}");
    assert!(
        fused
            .kernels
            .iter()
            .all(|k| matches!(k.kind, KernelKind::Piecewise(_))),
        "{dump}"
    );
    let eager = plan(&graph_of(Ropes::spec()), Mode::Eager);
    let concats = eager
        .kernels
        .iter()
        .filter(|k| matches!(k.kind, KernelKind::Concat { .. }))
        .count();
    assert_eq!(concats, 4, "{}", fuse_kernels::plan::dump(&eager));
}

/// Concats that stay kernels of their own (read twice, read by a reduction, a concat of a concat) still match
/// the reference, and the report says why each was not fused.
#[test]
fn concats_kept_apart() {
    use fuse_kernels::plan::{plan, Mode};
    use fuse_tests::harness::graph_of;
    let fused = plan(&graph_of(UnfusedConcats::spec()), Mode::Fused);
    let dump = fuse_kernels::plan::dump(&fused);
    assert_eq!(fused.kernels.len(), 6, "{dump}");
    for why in [
        "value read 2 times",
        "a concat fuses only into elementwise ops",
        "a kernel reads through one concat at most",
    ] {
        assert!(dump.contains(why), "no refusal `{why}` in\n{dump}");
    }
    let m = UnfusedConcats::random(13);
    for (batch, _, seed) in cases(13) {
        let x = Tensor::randn(&[batch, R], seed);
        check_model("unfused concats", m.compiled(), &[&x], 1e-5, 1e-5);
    }
}

#[test]
fn embedding_gather_and_cast() {
    let m = Embeddings::random(9);
    for (batch, seq, seed) in cases(9) {
        let ids = Tensor::uniform_ids(&[batch, seq], 50, seed);
        check_model("embedding", m.compiled(), &[&ids], 1e-6, 1e-6);
    }
}

#[fuse_runtime::fused_model]
mod reread {
    pub const D: usize = 8;

    /// Reads that a fused kernel would need at two shapes: gamma as the norm's `[D]` weight and again,
    /// broadcast, in the epilogue; x as a matmul operand and again in the epilogue.
    pub struct Reread {
        #[shape(D)]
        gamma: Tensor,
        #[shape(D)]
        beta: Tensor,
        #[shape(D, D)]
        w: Tensor,
    }
    impl Reread {
        pub fn forward(&self, #[shape(batch, D)] x: Tensor) -> (Tensor, Tensor) {
            let normed = x.layer_norm(&self.gamma, &self.beta, 1e-5) * &self.gamma + &self.beta;
            let projected = x.matmul(&self.w) + &x;
            (normed, projected)
        }
    }
}

#[test]
fn a_value_read_at_two_shapes_in_one_kernel() {
    let m = reread::Reread::random(10);
    for (batch, _, seed) in cases(10) {
        let x = Tensor::randn(&[batch, 8], seed);
        check_model("reread", m.compiled(), &[&x], 1e-5, 1e-5);
    }
}

#[test]
fn narrow_at_a_run_time_start_reads_the_rope_rows_of_the_current_positions() {
    let m = NarrowRope::random(14);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(14);
    for (batch, _, seed) in cases(14) {
        let seq = rng.gen_range(1..=6);
        // Every start that fits, the last one included.
        let past = rng.gen_range(0..=MAX_POS - seq);
        for past in [past, MAX_POS - seq] {
            let x = Tensor::randn(&[batch, seq, 4, R], seed);
            let past_arg = fuse_runtime::exec::dim_arg(past).unwrap();
            check_model("narrow rope", m.compiled(), &[&x, &past_arg], 1e-5, 1e-5);
        }
    }
}

#[test]
fn narrow_with_run_time_lengths_feeds_matmuls_attention_and_elementwise_kernels() {
    let m = NarrowCache::random(15);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(15);
    for (batch, _, seed) in cases(15) {
        let seq = rng.gen_range(1..=5);
        let past = rng.gen_range(0..=D - 4);
        let past = past.min(MAX_POS - seq);
        let total = rng.gen_range(1..=MAX_POS);
        let (q, cache) = (
            Tensor::randn(&[batch, seq, D], seed),
            Tensor::randn(&[batch, MAX_POS, D], seed + 1),
        );
        let (p, t) = (
            fuse_runtime::exec::dim_arg(past).unwrap(),
            fuse_runtime::exec::dim_arg(total).unwrap(),
        );
        check_model(
            "narrow cache",
            m.compiled(),
            &[&q, &cache, &p, &t],
            1e-5,
            1e-5,
        );
    }
}

#[test]
fn the_last_position_read_by_a_negative_start_or_a_difference_of_dims() {
    let m = LastPosition::random(30);
    for (batch, seq, seed) in cases(30).chain([(2, 1, 31)]) {
        let x = Tensor::randn(&[batch, seq, D], seed);
        check_model("last position", m.compiled(), &[&x], 1e-5, 1e-5);
    }
}

#[test]
fn differences_of_dims_are_checked_when_the_call_binds_its_dims() {
    let m = AllButFirst::random(32);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(32);
    for (batch, _, seed) in cases(32) {
        let seq = rng.gen_range(2..=6);
        // Starts from 0 (`past` 2) to the last that fits.
        for past in [2, rng.gen_range(2..=MAX_POS + 3 - seq), MAX_POS + 3 - seq] {
            let x = Tensor::randn(&[batch, seq, D], seed);
            let past = fuse_runtime::exec::dim_arg(past).unwrap();
            check_model("all but first", m.compiled(), &[&x, &past], 1e-5, 1e-5);
        }
    }
    let run = |seq: usize, past: usize| {
        let x = Tensor::randn(&[1, seq, D], 33);
        let past = fuse_runtime::exec::dim_arg(past).unwrap();
        m.compiled()
            .run(fuse_runtime::PlanMode::Fused, &[&x, &past])
            .map(drop)
    };
    // `seq - 1` sizes the first result: at `seq` 1 it is empty, as in PyTorch, and the second (a concat of the
    // last row and the empty rest) is whole.
    let (x, past) = (
        Tensor::randn(&[2, 1, D], 34),
        fuse_runtime::exec::dim_arg(4).unwrap(),
    );
    check_model(
        "all but first, seq 1",
        m.compiled(),
        &[&x, &past],
        1e-5,
        1e-5,
    );
    let outputs = m
        .compiled()
        .run(fuse_runtime::PlanMode::Fused, &[&x, &past])
        .unwrap();
    assert_eq!(
        (outputs[0].shape(), outputs[1].shape()),
        (&[2, 0, D][..], &[2, 1, D][..])
    );
    // `past - 2` only offsets a view: 0 is a start, -1 is not.
    match run(3, 1) {
        Err(fuse_runtime::Error::DimOutOfRange { dim, value: -1 }) => assert_eq!(dim, "past - 2"),
        other => panic!("past 1: {other:?}"),
    }
    assert!(run(3, 2).is_ok());
    // Past the table's end: the narrow's own check.
    assert!(matches!(
        run(3, MAX_POS + 2),
        Err(fuse_runtime::Error::NarrowOutOfRange { .. })
    ));
}

#[test]
fn a_narrow_past_its_axis_is_a_typed_error_before_any_kernel_runs() {
    let m = NarrowRope::random(16);
    let x = Tensor::randn(&[2, 3, 4, R], 1);
    for (mode, run) in [
        ("fused", m.forward(&x, MAX_POS - 2)),
        ("eager", m.forward_eager(&x, MAX_POS - 2)),
    ] {
        let err = run.expect_err(mode);
        assert!(
            matches!(
                err,
                fuse_runtime::Error::NarrowOutOfRange {
                    axis: 0,
                    start: 14,
                    len: 3,
                    size: 16,
                    ..
                }
            ),
            "{mode}: {err:?}"
        );
        let text = err.to_string();
        assert_eq!(
            text, "narrow of axis 0 of cos [16, 10]: start 14 + length 3 > 16",
            "{mode}"
        );
    }
    // The last start that fits runs.
    assert!(m.forward(&x, MAX_POS - 3).is_ok());
    // The report and the plan (so its hash) name the bound checked per call, in the dims' names.
    let report = m.plan().to_string();
    assert!(
        report.contains("checked per call:")
            && report.contains("narrow of axis 0 of cos [16, 10]: past + seq <= 16"),
        "{report}"
    );
    assert!(
        m.plan().dump().contains("axis 0: past + seq <= 16"),
        "{}",
        m.plan().dump()
    );
    // A dim that sizes a value cannot be 0; one that only offsets views can.
    let cache = NarrowCache::random(17);
    let (q, c) = (
        Tensor::randn(&[1, 2, D], 2),
        Tensor::randn(&[1, MAX_POS, D], 3),
    );
    assert!(cache.forward(&q, &c, 0, 4).is_ok());
    let zero = cache.forward(&q, &c, 1, 0).expect_err("total = 0");
    assert!(
        matches!(&zero, fuse_runtime::Error::ZeroDim { dim, .. } if dim == "total"),
        "{zero:?}"
    );
    // Reserving (and a session) by name takes the same rule: `past` 0 is a prompt, `total` 0 sizes nothing.
    let dims = |past, total| [("batch", 1), ("seq", 2), ("past", past), ("total", total)];
    let compiled = cache.compiled();
    assert!(compiled.reserve(&dims(0, 4)).is_ok());
    assert!(compiled.session(&dims(0, 4)).is_ok());
    let zero = compiled.reserve(&dims(1, 0)).expect_err("total = 0");
    assert!(
        matches!(&zero, fuse_runtime::Error::ZeroDim { dim, .. } if dim == "total"),
        "{zero:?}"
    );
    // A value the untyped API cannot carry, and a negative one handed to it directly.
    assert!(matches!(
        fuse_runtime::exec::dim_arg(usize::MAX),
        Err(fuse_runtime::Error::DimArgTooLarge { .. })
    ));
    let negative = Tensor::from_i64(&[], vec![-1]).unwrap();
    let err = cache
        .compiled()
        .run(
            fuse_runtime::PlanMode::Fused,
            &[&q, &c, &negative, &negative],
        )
        .expect_err("negative dim");
    assert_eq!(
        err.to_string(),
        "dimension argument `past` is -1; a dim argument must be a non-negative integer"
    );
    // Past the cache on the inner axis.
    let long = cache
        .forward(&q, &c, 0, MAX_POS + 1)
        .expect_err("total > MAX_POS");
    assert!(
        matches!(
            long,
            fuse_runtime::Error::NarrowOutOfRange {
                axis: 1,
                start: 0,
                len: 17,
                size: 16,
                ..
            }
        ),
        "{long:?}"
    );
}

#[test]
fn a_constant_slice_of_a_dynamic_axis_runs_where_it_fits_and_is_a_typed_error_where_not() {
    let m = SliceOfDynamicAxis::random(18);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(18);
    for (batch, _, seed) in cases(18) {
        let seq = rng.gen_range(5..=9);
        let x = Tensor::randn(&[batch, seq, D], seed);
        check_model("constant slice", m.compiled(), &[&x], 1e-6, 1e-6);
    }
    let short = Tensor::randn(&[2, 4, D], 1);
    for (mode, run) in [
        ("fused", m.forward(&short)),
        ("eager", m.forward_eager(&short)),
    ] {
        let err = run.expect_err(mode);
        assert!(
            matches!(
                err,
                fuse_runtime::Error::NarrowOutOfRange {
                    axis: 1,
                    start: 2,
                    len: 3,
                    size: 4,
                    ..
                }
            ),
            "{mode}: {err:?}"
        );
    }
}

#[test]
fn sums_of_dims_size_a_concat_a_narrow_and_an_input_against_the_reference() {
    let m = SumOfDims::random(19);
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(19);
    for (i, (batch, _, seed)) in cases(19).enumerate() {
        // `old` is read by the concat alone, so it may be empty: the first call of a decoder whose cache is passed
        // in (`past` 0).
        let past = if i % 2 == 0 { 0 } else { rng.gen_range(1..=8) };
        let seq = rng.gen_range(1..=8);
        let old = Tensor::randn(&[batch, past, D], seed);
        let new = Tensor::randn(&[batch, seq, D], seed + 1);
        let mask = Tensor::randn(&[batch, seq, past + seq], seed + 2);
        let cache = Tensor::randn(&[batch, MAX_POS, D], seed + 3);
        check_model(
            "sum of dims",
            m.compiled(),
            &[&old, &new, &mask, &cache],
            1e-5,
            1e-5,
        );
    }
    // The plan names the sum and the bound it is checked against per call.
    let dump = m.plan().dump();
    assert!(dump.contains("sum dim past + seq = "), "{dump}");
    assert!(dump.contains("0 + past + seq <= 16"), "{dump}");
    let (old, new) = (Tensor::randn(&[1, 9, D], 1), Tensor::randn(&[1, 8, D], 2));
    let cache = Tensor::randn(&[1, MAX_POS, D], 3);
    // 9 + 8 rows of a 16-row cache: a typed error before any kernel, in both plans.
    let mask = Tensor::randn(&[1, 8, 17], 4);
    for (mode, run) in [
        ("fused", m.forward(&old, &new, &mask, &cache)),
        ("eager", m.forward_eager(&old, &new, &mask, &cache)),
    ] {
        let err = run.expect_err(mode);
        assert!(
            matches!(
                err,
                fuse_runtime::Error::NarrowOutOfRange {
                    axis: 1,
                    start: 0,
                    len: 17,
                    size: 16,
                    ..
                }
            ),
            "{mode}: {err:?}"
        );
    }
    // A mask whose last axis is not `past + seq`.
    let (old, new) = (Tensor::randn(&[1, 3, D], 1), Tensor::randn(&[1, 2, D], 2));
    let mask = Tensor::randn(&[1, 2, 6], 4);
    let err = m.forward(&old, &new, &mask, &cache).expect_err("mask");
    assert!(
        matches!(
            &err,
            fuse_runtime::Error::InconsistentDim { dim, first: 5, found: 6, .. } if dim == "past + seq"
        ),
        "{err:?}"
    );
}

/// A model output that is a reshape no strides can read (heads permuted, then merged with the sequence) is
/// copied from the permuted value, in both plans.
#[test]
fn an_output_reshaped_across_a_permute_is_copied() {
    let m = ReshapedOutput::random(13);
    for (batch, seq, seed) in cases(13) {
        let x = Tensor::randn(&[batch, seq, D], seed);
        check_model("reshaped output", m.compiled(), &[&x], 1e-6, 1e-6);
    }
}

/// The same NaN and ±∞ in the reduced CPU precisions (weight products in bf16, f16 and int8): every output is NaN
/// or infinite exactly where the f32 plan's is, so a quantised row that held a NaN does not come back finite.
#[test]
fn nan_and_infinities_pass_on_in_reduced_cpu_precisions() {
    use fuse_runtime::{CompiledModel, CpuPrecision, PlanMode};
    let f32_model = NonFinite::random(12).into_compiled();
    let weights = f32_model.weights().expect("f32 weights").to_vec();
    for precision in [CpuPrecision::Bf16, CpuPrecision::F16, CpuPrecision::Int8] {
        let model = CompiledModel::from_weights_in(f32_model.spec(), weights.clone(), precision)
            .expect("a model in a reduced precision");
        for (batch, seq, seed) in cases(12) {
            let inputs = non_finite_inputs(batch + 3, seq, seed);
            let refs: Vec<&Tensor> = inputs.iter().collect();
            let want = f32_model.run(PlanMode::Fused, &refs).expect("f32 run");
            for mode in [PlanMode::Fused, PlanMode::Eager] {
                let got = model.run(mode, &refs).expect("a reduced-precision run");
                for (o, (g, w)) in got.iter().zip(&want).enumerate() {
                    let kind = |v: f32| (v.is_nan(), v.is_infinite().then_some(v.signum()));
                    let (g, w) = (g.to_f32_vec(), w.to_f32_vec());
                    let differ = g.iter().zip(&w).position(|(a, b)| kind(*a) != kind(*b));
                    assert!(
                        differ.is_none(),
                        "{precision:?} {mode:?} output {o} at {batch}x{seq}: element {differ:?} is {:?}, in f32 {:?}",
                        differ.map(|i| g[i]),
                        differ.map(|i| w[i])
                    );
                }
            }
        }
    }
}
