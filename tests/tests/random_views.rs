//! Every random-view model (`gen/random_views.rs`: seeded chains of transposes, permutes, narrows, slices,
//! reshapes and broadcasts, read by each kernel kind or written into a cache), fused and eager, against the f64
//! reference at random dynamic dims, outputs and the states a call leaves; in the reduced CPU precisions against
//! f32; on pools of 1 to 16 threads; from four threads at once; and with every kind of bad input. A failure names
//! the model; its source is in the build's `OUT_DIR/random_views.rs`.
//! `FUSE_VIEW_SEED=n cargo test -p fuse-tests --test random_views` checks another set.

use fuse_runtime::{CompiledModel, CpuPrecision, PlanMode, Session, Tensor};
use fuse_tests::drift::{check_with_session, random_inputs};
use fuse_tests::harness::rel_l2_floored;
use fuse_tests::random_views::{
    bad_inputs, check_mutant, check_zero_dim_call, dims_of, past_sizes_an_input,
    reduced_mutant_error, zero_dim_calls, Case, CASES, COVERAGE, DEFAULT_SET, MUTANTS,
};

/// The `(batch, seq)` each model is checked at: one row, a few, odd sizes, and more rows than one block.
const SIZES: [(usize, usize); 4] = [(1, 1), (3, 5), (2, 9), (7, 33)];

#[test]
fn random_views_match_the_reference() {
    let mut failures = Vec::new();
    for (i, case) in CASES.iter().enumerate() {
        let spec = (case.spec)();
        let model = CompiledModel::random(spec, i as u64);
        for (batch, seq) in SIZES {
            let dims = dims_of(spec, batch, seq);
            if let Err(e) = check_at(&model, case, &dims, 7 * i as u64 + batch as u64) {
                failures.push(e);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} random-view checks failed:\n{}",
        failures.len(),
        CASES.len() * SIZES.len(),
        failures.join("\n")
    );
}

/// `model` (of `case`) against the reference at `dims`, both plans, outputs and the states a call leaves, on
/// inputs from `seed`; the failure's report otherwise.
fn check_at(
    model: &CompiledModel,
    case: &Case,
    dims: &[(&str, usize)],
    seed: u64,
) -> Result<(), String> {
    let spec = (case.spec)();
    let tolerance = case.tolerance(1.0);
    let checked = random_inputs(spec, dims, seed).and_then(|inputs| {
        let refs: Vec<&Tensor> = inputs.iter().collect();
        // A session holds the states of a model that writes a cache (none for the others).
        let mut session = model.session(dims)?;
        check_with_session(model, Some(&mut session), &refs, tolerance)
    });
    match checked {
        Ok(report)
            if report
                .outputs
                .iter()
                .all(|o| o.fused.within() && o.eager.within()) =>
        {
            Ok(())
        }
        Ok(report) => Err(format!("{} at {dims:?}:\n{report}", spec.name)),
        Err(e) => Err(format!("{} at {dims:?}: {e}", spec.name)),
    }
}

/// Every random-view model with each set of its free dims bound to 0, as PyTorch allows. Where the call's shapes
/// keep the rule of empty values (no value with elements computed from an empty one: an empty batch, an empty cache
/// passed in, `seq` 0 under a mean over it with `batch` 0 too), both plans against the reference, outputs of the
/// reference's shapes, empty ones among them; a difference of dims made negative (`seq - 1` at `seq` 0) is refused
/// by both. Where they do not (a mean over `seq` with `batch` not 0, a state sized by `batch`), `Error::ZeroDim`
/// naming a dim at 0, before any kernel runs (`check_zero_dim_call`).
#[test]
fn random_views_with_a_dim_of_zero() {
    let (mut failures, mut empty_outputs, mut refused) = (Vec::new(), 0, 0);
    for (i, case) in CASES.iter().enumerate() {
        let spec = (case.spec)();
        let model = CompiledModel::random(spec, i as u64);
        let weights = model.weights().expect("f32 weights");
        let tolerance = case.tolerance(1.0);
        for call in zero_dim_calls(spec, 3, 5) {
            let seed = 11 * i as u64 + call.zeros.iter().map(|d| d.len() as u64).sum::<u64>();
            match check_zero_dim_call(&model, weights, tolerance, &call, seed) {
                Ok(Some(empty)) => empty_outputs += empty,
                Ok(None) => refused += 1,
                Err(e) => failures.push(format!("{} at {:?}: {e}", spec.name, call.dims)),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} calls with a dim of 0 failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // Both sides of the rule were reached.
    assert!(
        empty_outputs > 0 && refused > 0,
        "{empty_outputs} empty outputs, {refused} refused"
    );
    eprintln!("{empty_outputs} empty outputs matched the reference, {refused} calls refused");
}

/// The mutants of the random-view models that the compiler takes as models (a size, an axis, a start, an operand
/// or a method changed: `gen/mutants.rs`), against the reference with their parents' tolerances.
#[test]
fn mutants_match_the_reference() {
    let mut failures = Vec::new();
    let (mut matched, mut refused, mut widened) = (0, 0, Vec::new());
    let (mut empty_calls, mut zero_refused) = (0, 0);
    for (i, mutant) in MUTANTS.iter().enumerate() {
        let case = &mutant.case;
        let spec = (case.spec)();
        let model = CompiledModel::random(spec, i as u64);
        let weights = model.weights().expect("f32 weights");
        let tolerance = case.tolerance(1.0);
        for (batch, seq) in SIZES {
            let dims = dims_of(spec, batch, seq);
            match check_mutant(
                &model,
                weights,
                tolerance,
                &dims,
                7 * i as u64 + batch as u64,
            ) {
                Ok(Some(w)) => {
                    matched += 1;
                    if w > 0 {
                        widened.push(format!("{} at {dims:?}: {w}", mutant.what));
                    }
                }
                Ok(None) => refused += 1,
                Err(e) => {
                    failures.push(format!("{} ({}) at {dims:?}: {e}", mutant.what, spec.name))
                }
            }
        }
        // And with each set of free dims at 0: the rule of empty values on graphs no one wrote by hand.
        for call in zero_dim_calls(spec, 3, 5) {
            match check_zero_dim_call(&model, weights, tolerance, &call, 5 * i as u64) {
                Ok(Some(_)) => empty_calls += 1,
                Ok(None) => zero_refused += 1,
                Err(e) => failures.push(format!(
                    "{} ({}) at {:?}: {e}",
                    mutant.what, spec.name, call.dims
                )),
            }
        }
    }
    eprintln!("{matched} mutant calls matched the reference, {refused} refused by fuse and the reference alike");
    eprintln!(
        "with a dim of 0: {empty_calls} calls agreed with the reference (ran and matched, or refused by both), \
         {zero_refused} refused as ZeroDim"
    );
    if !widened.is_empty() {
        eprintln!(
            "elements within the f32 evaluation's own error only, in {} calls:\n{}",
            widened.len(),
            widened.join("\n")
        );
    }
    assert!(matched > 0, "no mutant ran");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The reference check, and the reduced precisions against f32, on pools of 1, 3, 8 and 16 threads, at dims large
/// enough that the products, attention and elementwise kernels split their work: a split that only a machine with
/// more cores than CI's takes must not move a value.
#[test]
fn random_views_on_any_number_of_threads() {
    let mut failures = Vec::new();
    for threads in [1, 3, 8, 16] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a thread pool");
        pool.install(|| {
            for (i, case) in CASES.iter().enumerate() {
                let spec = (case.spec)();
                let model = CompiledModel::random(spec, i as u64);
                for (batch, seq) in [(7, 33), (48, 40)] {
                    let dims = dims_of(spec, batch, seq);
                    if let Err(e) = check_at(&model, case, &dims, i as u64 + batch as u64) {
                        failures.push(format!("{threads} threads: {e}"));
                    }
                }
                let reduced = reduced_precision_errors(case, i, &[(48, 40)], &mut [0.0; 3]);
                failures.extend(
                    reduced
                        .into_iter()
                        .map(|e| format!("{threads} threads: {e}")),
                );
            }
        });
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The relative L2 bound of each reduced CPU precision against f32, with each element taken to be at least its
/// output's floor in size (`Case::floors`, `rel_l2_floored`). These bounds check placement, not accuracy
/// (`cpu_precisions.rs` and `minilm_precisions.rs` measure that): a misplaced read errs by about the norm itself,
/// 1 or more, while rounding errs by a few of the precision's steps, more where an op amplifies it (a layer norm
/// over two elements that nearly agree read 8e-3 in bf16 and 2.3e-3 in f16 over five seeds' models; products,
/// 1e-2 at most in int8).
const REDUCED: [(CpuPrecision, f64); 3] = [
    (CpuPrecision::Bf16, 3e-2),
    (CpuPrecision::F16, 1e-2),
    (CpuPrecision::Int8, 5e-2),
];

/// The same models with their weight products in bf16, f16 and int8 on the CPU, against their f32 outputs: the
/// packed and quantised products read A through the same views, in one row block and in several.
#[test]
fn random_views_in_reduced_cpu_precisions() {
    let mut failures = Vec::new();
    let mut worst = [0.0f64; 3];
    for (i, case) in CASES.iter().enumerate() {
        failures.extend(reduced_precision_errors(
            case,
            i,
            &[(3, 5), (7, 33)],
            &mut worst,
        ));
    }
    eprintln!(
        "worst relative L2 error: bf16 {:.2e}, f16 {:.2e}, int8 {:.2e}",
        worst[0], worst[1], worst[2]
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Model `i` (of `case`) in each reduced precision, both plans, against its f32 outputs at each `(batch, seq)`:
/// what exceeds its bound, with the worst error of each precision raised into `worst`.
fn reduced_precision_errors(
    case: &Case,
    i: usize,
    sizes: &[(usize, usize)],
    worst: &mut [f64; 3],
) -> Vec<String> {
    let mut failures = Vec::new();
    let spec = (case.spec)();
    let f32_model = CompiledModel::random(spec, i as u64);
    let weights = f32_model.weights().expect("f32 weights").to_vec();
    let reduced: Vec<CompiledModel> = REDUCED
        .iter()
        .map(|&(precision, _)| {
            CompiledModel::from_weights_in(spec, weights.clone(), precision)
                .unwrap_or_else(|e| panic!("{} in {precision:?}: {e}", spec.name))
        })
        .collect();
    for &(batch, seq) in sizes {
        let dims = dims_of(spec, batch, seq);
        let inputs = random_inputs(spec, &dims, i as u64).expect("the generated inputs fit");
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let run = |model: &CompiledModel, mode| {
            let mut session = model.session(&dims)?;
            model.run_session(mode, &mut session, &refs)
        };
        let want = run(&f32_model, PlanMode::Fused).expect("f32 run");
        for (p, ((precision, bound), model)) in REDUCED.into_iter().zip(&reduced).enumerate() {
            for mode in [PlanMode::Fused, PlanMode::Eager] {
                let what = format!("{} {precision:?} {mode:?} at {dims:?}", spec.name);
                let got = match run(model, mode) {
                    Ok(got) => got,
                    Err(e) => {
                        failures.push(format!("{what}: {e}"));
                        continue;
                    }
                };
                for (o, (g, w)) in got.iter().zip(&want).enumerate() {
                    let err = rel_l2_floored(g, w, case.floors[o]);
                    worst[p] = worst[p].max(err);
                    if err > bound {
                        failures.push(format!(
                            "{what} output {o}: relative L2 error {err:.2e} > {bound:e}"
                        ));
                    }
                }
            }
        }
    }
    failures
}

/// The mutants the compiler takes (`mutants_match_the_reference`) with their weight products in bf16, f16 and
/// int8 on the CPU, against their f32 outputs and states, at the parents' bounds: a mutant reads A through views
/// no parent has, into products no parent makes. A call must be refused in every precision or in none.
#[test]
fn mutants_in_reduced_cpu_precisions() {
    let mut failures = Vec::new();
    let (mut calls, mut refused, mut worst) = (0, 0, [0.0f64; 3]);
    for (i, mutant) in MUTANTS.iter().enumerate() {
        let spec = (mutant.case.spec)();
        let f32_model = CompiledModel::random(spec, i as u64);
        let weights = f32_model.weights().expect("f32 weights").to_vec();
        for (p, &(precision, bound)) in REDUCED.iter().enumerate() {
            let what = format!("{} ({}) in {precision:?}", mutant.what, spec.name);
            let model = match CompiledModel::from_weights_in(spec, weights.clone(), precision) {
                Ok(model) => model,
                Err(e) => {
                    failures.push(format!("{what}: {e}"));
                    continue;
                }
            };
            for (batch, seq) in [(3, 5), (7, 33)] {
                let dims = dims_of(spec, batch, seq);
                let seed = 7 * i as u64 + batch as u64;
                match reduced_mutant_error(&f32_model, &model, mutant.case.floors, &dims, seed) {
                    Ok(Some(err)) => {
                        calls += 1;
                        worst[p] = worst[p].max(err);
                        if err > bound {
                            failures.push(format!(
                                "{what} at {dims:?}: relative L2 error {err:.2e} > {bound:e}"
                            ));
                        }
                    }
                    Ok(None) => refused += 1,
                    Err(e) => failures.push(format!("{what} at {dims:?}: {e}")),
                }
            }
        }
    }
    eprintln!(
        "{calls} mutant calls in reduced precisions, {refused} refused in every one; worst relative L2 error: \
         bf16 {:.2e}, f16 {:.2e}, int8 {:.2e}",
        worst[0], worst[1], worst[2]
    );
    assert!(calls > 0, "no mutant ran");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The default set holds every kind of view, source and reader the generator can draw: a change to the generator
/// that drops one from the set CI runs fails here rather than going unnoticed (draw more models, or change the
/// seed). Another set only prints what it covers.
#[test]
fn random_views_cover_every_kind() {
    let missing: Vec<&str> = COVERAGE
        .iter()
        .filter(|(_, n)| *n == 0)
        .map(|(kind, _)| *kind)
        .collect();
    for (kind, n) in COVERAGE {
        eprintln!("{n:>3} of {} models: {kind}", CASES.len());
    }
    // Caches passed in that a call leaves empty (`past` 0 at 3 × 5), as at a decoder's first step.
    let empty_caches = CASES
        .iter()
        .filter(|case| {
            let spec = (case.spec)();
            past_sizes_an_input(spec) && dims_of(spec, 3, 5).contains(&("past", 0))
        })
        .count();
    eprintln!(
        "{empty_caches:>3} of {} models: a cache passed in, empty",
        CASES.len()
    );
    if !DEFAULT_SET {
        eprintln!("not the default set: its coverage is printed, not checked");
        return;
    }
    assert!(
        missing.is_empty() && empty_caches > 0,
        "the default random-view set lacks: {}{}",
        missing.join(", "),
        if empty_caches == 0 {
            " an empty cache passed in"
        } else {
            ""
        }
    );
}

/// Every way a caller can get one input wrong, for every input of every model: a fixed axis one longer, a
/// dynamic axis that disagrees with another input (or the `#[dim]` argument) carrying the same dim, one axis
/// more, the other dtype, ids past either end of their table, one input too few or too many. Each call must
/// return an error (never panic, never run), and leave the session's states as they were; a good call after
/// them all returns what it returned before them.
#[test]
fn random_views_refuse_bad_inputs() {
    let mut failures = Vec::new();
    let mut refused = 0;
    for (i, case) in CASES.iter().enumerate() {
        let spec = (case.spec)();
        let model = CompiledModel::random(spec, i as u64);
        let dims = dims_of(spec, 3, 5);
        let good = random_inputs(spec, &dims, i as u64).expect("the generated inputs fit");
        let mut session = model.session(&dims).expect("a session");
        let call = |session: &mut Session, inputs: &[Tensor]| {
            let refs: Vec<&Tensor> = inputs.iter().collect();
            model.run_session(PlanMode::Fused, session, &refs)
        };
        let want = call(&mut session, &good).expect("the good call runs");
        let states = session.states().expect("host states").to_vec();
        for (what, bad) in bad_inputs(spec, &good) {
            let what = format!("{} input {what}", spec.name);
            let run =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| call(&mut session, &bad)));
            match run {
                Ok(Err(_)) => refused += 1,
                Ok(Ok(_)) => failures.push(format!("{what}: ran")),
                Err(_) => failures.push(format!("{what}: panicked")),
            }
            if session.states().expect("host states") != states.as_slice() {
                failures.push(format!("{what}: changed the session's states"));
            }
        }
        // The same call on the same session: a model with state writes the same rows at the same `past` again.
        match call(&mut session, &good) {
            Ok(got) if got == want => {}
            Ok(_) => failures.push(format!("{}: a good call gave other outputs", spec.name)),
            Err(e) => failures.push(format!("{}: a good call failed: {e}", spec.name)),
        }
    }
    eprintln!("{refused} bad calls refused");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The dims and inputs of one call.
type Call = (Vec<(&'static str, usize)>, Vec<Tensor>);

/// One model called at once from four threads, each at the four dims in its own order (so calls of different
/// sizes take and give back the model's arenas at once), a fresh session a call: every output bit-identical to
/// the same call made alone.
#[test]
fn random_views_called_at_once_from_threads() {
    for (i, case) in CASES.iter().enumerate() {
        let spec = (case.spec)();
        let model = CompiledModel::random(spec, i as u64);
        let calls: Vec<Call> = SIZES
            .iter()
            .map(|&(batch, seq)| {
                let dims = dims_of(spec, batch, seq);
                let inputs =
                    random_inputs(spec, &dims, i as u64).expect("the generated inputs fit");
                (dims, inputs)
            })
            .collect();
        let run = |(dims, inputs): &Call| {
            let refs: Vec<&Tensor> = inputs.iter().collect();
            let mut session = model.session(dims).expect("a session");
            let outputs = model
                .run_session(PlanMode::Fused, &mut session, &refs)
                .unwrap_or_else(|e| panic!("{} at {dims:?}: {e}", spec.name));
            let states = session.states().expect("host states");
            outputs
                .into_iter()
                .chain(states.iter().cloned())
                .collect::<Vec<_>>()
        };
        let alone: Vec<_> = calls.iter().map(run).collect();
        std::thread::scope(|scope| {
            for t in 0..4 {
                let (run, calls, alone) = (&run, &calls, &alone);
                scope.spawn(move || {
                    for round in 0..3 {
                        for c in (0..calls.len()).map(|c| (c + t + round) % calls.len()) {
                            assert!(
                                run(&calls[c]) == alone[c],
                                "{} at {:?}, thread {t}: not what the call alone gave",
                                spec.name,
                                calls[c].0
                            );
                        }
                    }
                });
            }
        });
    }
}
