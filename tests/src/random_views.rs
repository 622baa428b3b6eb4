//! The random-view models `build.rs` writes (see `gen/random_views.rs`): views of every kind read by every kernel
//! kind, checked by `tests/random_views.rs` against the f64 reference and by `tests/gpu.rs` on the GPU.

use fuse_runtime::__private::DimSpec;
use fuse_runtime::{CompiledModel, DType, Error, ModelSpec, PlanMode, Tensor};

use crate::drift::{random_inputs, Tolerance};
use crate::harness::{rel_l2_floored, to_ref, try_graph_of, try_reference_in};
use crate::reference::Arithmetic;

/// One generated model and its tolerance against the f64 reference (`atol + rtol·|want|`).
pub struct Case {
    pub spec: fn() -> &'static ModelSpec,
    pub atol: f64,
    pub rtol: f64,
    /// Per output, the size its elements are taken to have at least in an error relative to them in a reduced
    /// precision (`rel_l2_floored`): 1, the inputs' size, or √n where it sums n such terms, as its rounding
    /// error grows. A misplaced read errs by about the output's own size, far above the bounds.
    pub floors: &'static [f64],
}

impl Case {
    /// Its tolerance against the f64 reference, widened `times` (a GPU against a CPU may err by it on both sides).
    pub fn tolerance(&self, times: f64) -> Tolerance {
        Tolerance {
            atol: times * self.atol,
            rtol: times * self.rtol,
        }
    }
}

/// A mutant of a random-view model that the compiler takes as a model (`gen/mutants.rs`), checked with its
/// parent's tolerance, and what was changed in it.
pub struct Mutant {
    pub case: Case,
    pub what: &'static str,
}

/// The dims of `spec` among `batch`, `seq` and `past` (a start that leaves `seq` rows inside the constant axes a
/// narrow at `past` reads: 48 long, for `seq` up to 40). `past` is 0 at times, but not where it sizes an input
/// that anything but a concat reads (a cache passed in may be empty; nothing else may).
pub fn dims_of(spec: &ModelSpec, batch: usize, seq: usize) -> Vec<(&'static str, usize)> {
    let must_size = past_sizes_an_input(spec)
        && !spec
            .dyn_dims
            .iter()
            .position(|&d| d == "past")
            .is_some_and(|k| {
                let program = spec.fused.decode();
                program.is_ok_and(|p| p.may_be_zero(k) && p.zero_with(k).is_none())
            });
    let past = if must_size {
        1 + (batch + seq) % 7
    } else {
        (batch + seq) % 8
    };
    [("batch", batch), ("seq", seq), ("past", past)]
        .into_iter()
        .filter(|(name, _)| spec.dyn_dims.contains(name))
        .collect()
}

/// A call with some free dims bound to 0: see [`zero_dim_calls`].
pub struct ZeroDimCall {
    /// The dims bound to 0.
    pub zeros: Vec<&'static str>,
    pub dims: Vec<(&'static str, usize)>,
}

/// A call of `spec` for each non-empty set of its free dims among `batch`, `seq` and `past`: those bound to 0, the
/// others as [`dims_of`] gives them at `(batch, seq)` but `past` at least 1 (so `past + seq` sizes what `seq`
/// alone sized). A dim a mean runs over may be 0 only where the mean is empty too (`seq` 0 with `batch` 0).
pub fn zero_dim_calls(spec: &ModelSpec, batch: usize, seq: usize) -> Vec<ZeroDimCall> {
    let dims = dims_of(spec, batch, seq);
    (1..1usize << dims.len())
        .map(|subset| {
            let zero = |k: usize| subset & (1 << k) != 0;
            ZeroDimCall {
                zeros: (0..dims.len())
                    .filter(|&k| zero(k))
                    .map(|k| dims[k].0)
                    .collect(),
                dims: dims
                    .iter()
                    .enumerate()
                    .map(|(k, &(n, size))| match n {
                        _ if zero(k) => (n, 0),
                        "past" => (n, size.max(1)),
                        _ => (n, size),
                    })
                    .collect(),
            }
        })
        .collect()
}

/// `model` at one of its [`zero_dim_calls`], on inputs from `seed`. Where the shapes of the call keep the rule of
/// empty values (`reference::empty_read`: no value with elements computed from one without), against the
/// reference of `weights` as [`check_mutant`] checks it (both plans, outputs and states of the reference's shapes,
/// or refused by both), returning how many outputs of the fused plan are empty; where they do not, the call must
/// be `Error::ZeroDim` naming a dim that is 0 (`None`).
pub fn check_zero_dim_call(
    model: &CompiledModel,
    weights: &[Tensor],
    tolerance: Tolerance,
    call: &ZeroDimCall,
    seed: u64,
) -> Result<Option<usize>, String> {
    let spec = model.spec();
    let inputs = random_inputs(spec, &call.dims, seed).map_err(|e| e.to_string())?;
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let graph = try_graph_of(spec).map_err(|e| e.to_string())?;
    let ref_inputs: Vec<_> = inputs.iter().map(to_ref).collect();
    // `Err`: the reference cannot bind these dims (`seq - 1` at `seq` 0), a call fuse must refuse too.
    let breaks_rule = crate::reference::empty_read(&graph, &ref_inputs).map(|n| n.is_some());
    // A dim that is 0 in this call: one of `zeros`, or a sum of dims (`past + seq`), which no call binds.
    let is_zero =
        |dim: &str| call.zeros.contains(&dim) || !call.dims.iter().any(|(n, _)| *n == dim);
    let run = model
        .session(&call.dims)
        .and_then(|mut s| model.run_session(PlanMode::Fused, &mut s, &refs));
    match (breaks_rule, run) {
        (Ok(false), Ok(outputs)) => {
            check_mutant(model, weights, tolerance, &call.dims, seed)?;
            Ok(Some(outputs.iter().filter(|t| t.numel() == 0).count()))
        }
        // Refused for another reason (a difference of dims made negative, a narrow of a mutant out of range):
        // the reference must refuse it too.
        (Ok(false) | Err(_), Err(_)) => {
            check_mutant(model, weights, tolerance, &call.dims, seed).map(|_| Some(0))
        }
        (Ok(true), Err(Error::ZeroDim { dim, .. })) if is_zero(&dim) => Ok(None),
        (rule, other) => Err(format!(
            "{:?} at 0 ({}): {other:?}",
            call.zeros,
            match rule {
                Ok(true) => "a value with elements reads an empty one".to_string(),
                Ok(false) => "every value is computed or empty".to_string(),
                Err(e) => format!("the reference refuses: {e}"),
            }
        )),
    }
}

/// Whether `past` sizes an axis of one of `spec`'s inputs (a cache passed in).
pub fn past_sizes_an_input(spec: &ModelSpec) -> bool {
    let past = spec.dyn_dims.iter().position(|&d| d == "past");
    spec.inputs.iter().any(|i| {
        i.dims
            .iter()
            .any(|d| matches!(d, DimSpec::Dyn(k) if Some(*k) == past))
    })
}

/// Whether `spec`'s model has `#[state]` (a cache it writes): it runs with a session.
pub fn has_state(spec: &ModelSpec) -> bool {
    spec.fused.decode().is_ok_and(|p| !p.states.is_empty())
}

/// The bad variants of `good` (the inputs of one good call), each with what is wrong in it.
pub fn bad_inputs(spec: &ModelSpec, good: &[Tensor]) -> Vec<(String, Vec<Tensor>)> {
    let mut bad = Vec::new();
    let with = |k: usize, t: Tensor| {
        let mut inputs = good.to_vec();
        inputs[k] = t;
        inputs
    };
    let like = |dtype: DType, shape: &[usize]| match dtype {
        DType::I64 => Tensor::uniform_ids(shape, 1, 5),
        DType::F32 => Tensor::randn(shape, 5),
    };
    // How many axes (and `#[dim]` arguments) carry each dynamic dim: one that disagrees with another is an error.
    let mut carriers = vec![0; spec.dyn_dims.len()];
    for input in spec.inputs {
        if let Some(arg) = input.binds {
            carriers[arg.dim] += 1;
        }
        for d in input.dims {
            if let DimSpec::Dyn(s) = d {
                carriers[*s] += 1;
            }
        }
    }
    for (k, input) in spec.inputs.iter().enumerate() {
        if input.binds.is_some() {
            continue;
        }
        let shape = good[k].shape().to_vec();
        for (axis, d) in input.dims.iter().enumerate() {
            let wrong = match d {
                DimSpec::Fixed(_) => true,
                DimSpec::Dyn(s) => carriers[*s] >= 2,
            };
            if wrong {
                let mut longer = shape.clone();
                longer[axis] += 1;
                bad.push((
                    format!("{} axis {axis} one longer", input.name),
                    with(k, like(input.dtype, &longer)),
                ));
            }
        }
        let mut ranked = shape.clone();
        ranked.push(1);
        bad.push((
            format!("{} with one axis more", input.name),
            with(k, like(input.dtype, &ranked)),
        ));
        let other = match input.dtype {
            DType::I64 => DType::F32,
            DType::F32 => DType::I64,
        };
        bad.push((
            format!("{} as {other:?}", input.name),
            with(k, like(other, &shape)),
        ));
        if let (Some(bound), Some(ids)) = (input.id_bound, good[k].as_i64()) {
            for id in [bound.rows as i64, -1] {
                let mut ids = ids.to_vec();
                let last = ids.len() - 1;
                ids[last] = id;
                let t = Tensor::from_i64(&shape, ids).expect("the shape holds the ids");
                bad.push((format!("{} holding id {id}", input.name), with(k, t)));
            }
        }
    }
    bad.push(("one too few".into(), good[..good.len() - 1].to_vec()));
    let mut more = good.to_vec();
    more.push(Tensor::randn(&[1], 5));
    bad.push(("one too many".into(), more));
    bad
}

/// `model`'s call at `dims` on inputs from `seed`, both plans, outputs and the states it leaves, against the
/// reference of `weights`: each element within `tolerance` of the f64 value, widened by four times how far an f32
/// evaluation of the same graph lands from it (`Arithmetic::F32Nodes`). A mutant can make a graph that f32 cannot
/// evaluate to its f64 value (a mask of -1e9 over a whole row absorbs the scores, and f32's softmax is then
/// uniform): `Some` of how many elements needed the widening. Where fuse refuses the call, the reference must
/// refuse it too (`None`): fuse may neither refuse a valid call nor run one the reference cannot make sense of.
pub fn check_mutant(
    model: &CompiledModel,
    weights: &[Tensor],
    tolerance: Tolerance,
    dims: &[(&str, usize)],
    seed: u64,
) -> Result<Option<usize>, String> {
    let spec = model.spec();
    let inputs = random_inputs(spec, dims, seed).map_err(|e| e.to_string())?;
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let graph = try_graph_of(spec).map_err(|e| e.to_string())?;
    let reference = |states: &[Tensor], arithmetic| {
        try_reference_in(&graph, spec, weights, &refs, states, arithmetic)
    };
    let (before, [fused, eager]) = match run_both_plans(model, dims, &refs) {
        Ok(runs) => runs,
        // No session at these dims (a sum of dims out of range): a call both plans refuse, from no states.
        Err(e) => (Vec::new(), [Err(e.clone()), Err(e)]),
    };
    let runs = match (fused, eager) {
        (Ok(fused), Ok(eager)) => [fused, eager],
        (Err(e), Err(_)) => {
            return match reference(&before, Arithmetic::F64) {
                Err(_) => Ok(None),
                Ok(_) => Err(format!("refused a call the reference computes: {e}")),
            }
        }
        (Ok(_), Err(e)) => return Err(format!("the fused plan ran, the eager refused: {e}")),
        (Err(e), Ok(_)) => return Err(format!("the eager plan ran, the fused refused: {e}")),
    };
    let exact = reference(&before, Arithmetic::F64)
        .map_err(|e| format!("ran a call the reference refuses: {e}"))?;
    let f32_nodes = reference(&before, Arithmetic::F32Nodes).map_err(|e| e.to_string())?;
    let mut widened = 0;
    for (mode, outputs) in [PlanMode::Fused, PlanMode::Eager].iter().zip(&runs) {
        if outputs.len() != exact.len() {
            return Err(format!(
                "{mode:?}: {} outputs and states, the reference {}",
                outputs.len(),
                exact.len()
            ));
        }
        for (o, (got, (want, f32_want))) in
            outputs.iter().zip(exact.iter().zip(&f32_nodes)).enumerate()
        {
            if got.shape() != want.shape.as_slice() {
                return Err(format!(
                    "{mode:?} output {o}: shape {:?}, the reference {:?}",
                    got.shape(),
                    want.shape
                ));
            }
            let values = got.to_f32_vec().into_iter().map(f64::from);
            for (k, (g, (&w, &r))) in values.zip(want.data.iter().zip(&f32_want.data)).enumerate() {
                let bound = tolerance.atol + tolerance.rtol * w.abs();
                let error = (g - w).abs();
                // The same NaN or infinity on both sides matches (NaN passes on as in PyTorch).
                if g == w || (g.is_nan() && w.is_nan()) || error <= bound {
                    continue;
                }
                if error <= bound + 4.0 * (r - w).abs() {
                    widened += 1;
                    continue;
                }
                return Err(format!(
                    "{mode:?} output {o} {:?}, element {k}: {g} against {w} (f32 nodes {r}), beyond {bound:.1e}",
                    want.shape
                ));
            }
        }
    }
    Ok(Some(widened))
}

/// A mutant's weights in a reduced CPU precision (`reduced`) against the same weights in f32 (`f32`), both plans
/// against the f32 fused plan, from a fresh session at `dims`, outputs and the states a call leaves: the worst
/// relative L2 error (`rel_l2_floored`, each output at its parent's floor, states at 1); `None` where both
/// refuse the call. A call one refuses and the other runs is an error.
pub fn reduced_mutant_error(
    f32: &CompiledModel,
    reduced: &CompiledModel,
    floors: &[f64],
    dims: &[(&str, usize)],
    seed: u64,
) -> Result<Option<f64>, String> {
    let inputs = random_inputs(f32.spec(), dims, seed).map_err(|e| e.to_string())?;
    let refs: Vec<&Tensor> = inputs.iter().collect();
    // No session at these dims: a call every plan refuses.
    let runs = |model| match run_both_plans(model, dims, &refs) {
        Ok((_, runs)) => runs,
        Err(e) => [Err(e.clone()), Err(e)],
    };
    let (want, fused, eager) = match (runs(f32), runs(reduced)) {
        ([Err(_), _], [Err(_), Err(_)]) => return Ok(None),
        ([Ok(want), _], [Ok(fused), Ok(eager)]) => (want, fused, eager),
        ([want, _], [fused, eager]) => {
            let said = |run: &Run| run.as_ref().err().cloned().unwrap_or("ran".into());
            return Err(format!(
                "in f32: {}; reduced, fused: {}; reduced, eager: {}",
                said(&want),
                said(&fused),
                said(&eager)
            ));
        }
    };
    let mut worst = 0.0f64;
    for (mode, got) in [(PlanMode::Fused, fused), (PlanMode::Eager, eager)] {
        for (o, (g, w)) in got.iter().zip(&want).enumerate() {
            if g.shape() != w.shape() {
                return Err(format!(
                    "{mode:?} output {o}: shape {:?}, in f32 {:?}",
                    g.shape(),
                    w.shape()
                ));
            }
            worst = worst.max(rel_l2_floored(g, w, floors.get(o).copied().unwrap_or(1.0)));
        }
    }
    Ok(Some(worst))
}

/// Outputs and states after the call, or why it was refused.
type Run = Result<Vec<Tensor>, String>;

/// The states a fresh session at `dims` starts from, and what the fused and eager plans each return from them:
/// their outputs followed by the states the call leaves.
fn run_both_plans(
    model: &CompiledModel,
    dims: &[(&str, usize)],
    inputs: &[&Tensor],
) -> Result<(Vec<Tensor>, [Run; 2]), String> {
    let mut session = model
        .session(dims)
        .map_err(|e| format!("no session: {e}"))?;
    let before = session.states().map_err(|e| e.to_string())?.to_vec();
    let mut run = |mode| -> Run {
        let mut session = session.try_clone().map_err(|e| e.to_string())?;
        let mut outputs = model
            .run_session(mode, &mut session, inputs)
            .map_err(|e| e.to_string())?;
        outputs.extend(session.states().map_err(|e| e.to_string())?.iter().cloned());
        Ok(outputs)
    };
    Ok((before, [run(PlanMode::Fused), run(PlanMode::Eager)]))
}

include!(concat!(env!("OUT_DIR"), "/random_views.rs"));
