//! The drift check: one model's fused plan, its eager plan and the f64 reference interpreter on the same inputs
//! (given, or seeded random ones at given dims), with per output the absolute, relative and ULP error of each
//! against the others and where the worst element is; and, by comparing every fused kernel's output with the
//! eager plan's value of the same node in plan order, the first kernel where the two plans part beyond the
//! tolerance.
//!
//! ```no_run
//! # use fuse_examples::models::encoder::encoder::EncoderLayer;
//! use fuse_tests::drift::{self, Tolerance};
//! let model = EncoderLayer::random(42);
//! let inputs = drift::random_inputs(EncoderLayer::spec(), &[("batch", 2), ("seq", 16)], 1)?;
//! let report = drift::check(model.compiled(), &inputs.iter().collect::<Vec<_>>(), Tolerance::default())?;
//! println!("{report}");
//! # Ok::<(), drift::DriftError>(())
//! ```
//!
//! It runs the CPU programs (`CompiledModel::run_observed`), wherever the model is placed. The reference lives in
//! this crate because it reads the compiler's IR, which the runtime does not link.

mod report;
mod stats;

pub use stats::{compare, ulp_distance, unravel, ErrorStats, Tolerance};

use fuse_kernels::ir::Graph;
use fuse_kernels::plan::{plan, Mode, Plan};
use fuse_runtime::exec::DimSpec;
use fuse_runtime::{CompiledModel, DType, ModelSpec, PlanMode, Session, Tensor};

use crate::harness::{try_graph_of, try_reference_of, try_reference_with_states, ReferenceError};

#[derive(Debug, thiserror::Error)]
pub enum DriftError {
    #[error(transparent)]
    Run(#[from] fuse_runtime::Error),
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    #[error(
        "the {mode} plan made again from the source of `{model}` has hash {planned:#018x}, the compiled one \
         {compiled:#018x}: kernels cannot be matched to graph nodes"
    )]
    StalePlan {
        model: &'static str,
        mode: &'static str,
        planned: u64,
        compiled: u64,
    },
    #[error(
        "`{model}` returned {fused} output(s) fused, {eager} eager, and the reference {reference}"
    )]
    OutputCount {
        model: &'static str,
        fused: usize,
        eager: usize,
        reference: usize,
    },
    #[error(
        "`{model}` output {output} has shape {fused:?} fused, {eager:?} eager, and {reference:?} in the reference"
    )]
    OutputShape {
        model: &'static str,
        output: usize,
        fused: Vec<usize>,
        eager: Vec<usize>,
        reference: Vec<usize>,
    },
    #[error("no size given for the dynamic dim `{dim}` (the model's dims are {known:?})")]
    MissingDim {
        dim: &'static str,
        known: &'static [&'static str],
    },
}

/// Drift of one model output.
#[derive(Clone, Debug)]
pub struct OutputDrift {
    pub shape: Vec<usize>,
    pub fused: ErrorStats,
    pub eager: ErrorStats,
    /// The fused output against the eager one (the eager plan taken as the truth).
    pub fused_vs_eager: ErrorStats,
}

/// A fused kernel's output against the eager plan's value of the same node.
#[derive(Clone, Debug)]
pub struct KernelDrift {
    /// Position in the fused plan, and the plan's kernel count.
    pub index: usize,
    pub of: usize,
    pub name: String,
    pub ops: Vec<String>,
    /// The graph node both kernels write, e.g. `%45`, and the eager kernel that writes it.
    pub node: String,
    pub eager_kernel: String,
    pub stats: ErrorStats,
}

#[derive(Clone, Debug)]
pub struct DriftReport {
    pub model: &'static str,
    pub dims: Vec<(&'static str, usize)>,
    pub tolerance: Tolerance,
    pub outputs: Vec<OutputDrift>,
    /// Fused kernels whose output node the eager plan also writes.
    pub kernels_compared: usize,
    /// The others (copies of views that the eager plan reads in place), by name.
    pub not_compared: Vec<String>,
    /// The first of them, in plan order, beyond the tolerance.
    pub first_divergence: Option<KernelDrift>,
    /// The kernel with the largest error ratio (the first divergence when there is one).
    pub worst_kernel: Option<KernelDrift>,
}

impl DriftReport {
    /// Both plans within the tolerance of the reference on every output.
    pub fn within_reference(&self) -> bool {
        self.outputs
            .iter()
            .all(|o| o.fused.within() && o.eager.within())
    }

    /// The fused plan within the tolerance of the eager one, at every output and every kernel compared.
    pub fn plans_agree(&self) -> bool {
        self.first_divergence.is_none() && self.outputs.iter().all(|o| o.fused_vs_eager.within())
    }
}

/// Runs `model`'s fused and eager plans and the f64 reference on `inputs` and measures their drift.
pub fn check(
    model: &CompiledModel,
    inputs: &[&Tensor],
    tolerance: Tolerance,
) -> Result<DriftReport, DriftError> {
    check_with_session(model, None, inputs, tolerance)
}

/// [`check`] for a model with `#[state]` fields: each plan runs on its own copy of `session`, and the states as
/// each leaves them are compared like outputs (after the model's outputs, in declaration order).
pub fn check_with_session(
    model: &CompiledModel,
    session: Option<&mut Session>,
    inputs: &[&Tensor],
    tolerance: Tolerance,
) -> Result<DriftReport, DriftError> {
    let spec = model.spec();
    let stateful = session.is_some();
    // One copy of the session per plan, so both start from the same state.
    let (mut sessions, states_before) = match session {
        Some(s) => (Some((s.try_clone()?, s.try_clone()?)), s.states()?.to_vec()),
        None => (None, Vec::new()),
    };
    let dims = spec.bind(inputs)?;
    let graph = try_graph_of(spec)?;
    let fused_plan = planned(&graph, spec, Mode::Fused)?;
    let eager_plan = planned(&graph, spec, Mode::Eager)?;

    // The eager value of every node a fused kernel writes, kept as the eager plan computes it.
    let eager_of: Vec<Option<usize>> = fused_plan
        .kernels
        .iter()
        .map(|k| eager_plan.kernels.iter().position(|e| e.output == k.output))
        .collect();
    let mut kept: Vec<Option<Vec<f32>>> = vec![None; eager_plan.kernels.len()];
    let mut keep = |i: usize, out: &[f32]| {
        if eager_of.contains(&Some(i)) {
            kept[i] = Some(out.to_vec());
        }
    };
    let eager = match sessions.as_mut() {
        Some((_, s)) => {
            let mut outs = model.run_observed_session(PlanMode::Eager, s, inputs, &mut keep)?;
            outs.extend(s.states()?.iter().cloned());
            outs
        }
        None => model.run_observed(PlanMode::Eager, inputs, &mut keep)?,
    };

    let mut kernels: Vec<KernelDrift> = Vec::new();
    let mut compare_kernel = |i: usize, out: &[f32]| {
        let (Some(k), Some(Some(j))) = (fused_plan.kernels.get(i), eager_of.get(i)) else {
            return;
        };
        let Some(want) = kept[*j].as_deref() else {
            return;
        };
        let shape = graph_shape(&fused_plan, k.output, &dims);
        let want: Vec<f64> = want.iter().copied().map(f64::from).collect();
        let stats = compare(out.iter().copied().map(f64::from), &want, &shape, tolerance);
        let g = &fused_plan.graph;
        kernels.push(KernelDrift {
            index: i,
            of: fused_plan.kernels.len(),
            name: k.name.clone(),
            ops: k.nodes.iter().map(|&n| g.node(n).op.name()).collect(),
            node: k.output.to_string(),
            eager_kernel: eager_plan.kernels[*j].name.clone(),
            stats,
        });
    };
    let fused = match sessions.as_mut() {
        Some((s, _)) => {
            let mut outs =
                model.run_observed_session(PlanMode::Fused, s, inputs, &mut compare_kernel)?;
            outs.extend(s.states()?.iter().cloned());
            outs
        }
        None => model.run_observed(PlanMode::Fused, inputs, &mut compare_kernel)?,
    };

    let want = if stateful {
        try_reference_with_states(&graph, spec, model.weights()?, inputs, &states_before)?
    } else {
        try_reference_of(&graph, spec, model.weights()?, inputs)?
    };
    if fused.len() != want.len() || eager.len() != want.len() {
        return Err(DriftError::OutputCount {
            model: spec.name,
            fused: fused.len(),
            eager: eager.len(),
            reference: want.len(),
        });
    }
    // Values alone would not tell an empty output (a dim bound to 0) of the wrong shape from the right one.
    let shapes = fused.iter().zip(&eager).zip(&want).enumerate();
    if let Some((output, ((f, e), w))) = shapes
        .into_iter()
        .find(|(_, ((f, e), w))| f.shape() != w.shape || e.shape() != w.shape)
    {
        return Err(DriftError::OutputShape {
            model: spec.name,
            output,
            fused: f.shape().to_vec(),
            eager: e.shape().to_vec(),
            reference: w.shape.clone(),
        });
    }
    let outputs = fused
        .iter()
        .zip(&eager)
        .zip(&want)
        .map(|((f, e), w)| {
            let f64s = |t: &Tensor| t.to_f32_vec().into_iter().map(f64::from);
            let eager_values: Vec<f64> = f64s(e).collect();
            OutputDrift {
                shape: w.shape.clone(),
                fused: compare(f64s(f), &w.data, &w.shape, tolerance),
                eager: compare(f64s(e), &w.data, &w.shape, tolerance),
                fused_vs_eager: compare(f64s(f), &eager_values, &w.shape, tolerance),
            }
        })
        .collect();
    let first_divergence = kernels.iter().find(|k| !k.stats.within()).cloned();
    let worst_kernel = kernels
        .iter()
        .max_by(|a, b| a.stats.ratio.total_cmp(&b.stats.ratio))
        .cloned();
    Ok(DriftReport {
        model: spec.name,
        dims: spec.dyn_dims.iter().copied().zip(dims).collect(),
        tolerance,
        outputs,
        kernels_compared: kernels.len(),
        not_compared: fused_plan
            .kernels
            .iter()
            .zip(&eager_of)
            .filter(|(_, e)| e.is_none())
            .map(|(k, _)| k.name.clone())
            .collect(),
        first_divergence,
        worst_kernel,
    })
}

/// [`check`] on seeded random inputs at `dims`: see [`random_inputs`].
pub fn check_random(
    model: &CompiledModel,
    dims: &[(&str, usize)],
    seed: u64,
    tolerance: Tolerance,
) -> Result<DriftReport, DriftError> {
    let inputs = random_inputs(model.spec(), dims, seed)?;
    let refs: Vec<&Tensor> = inputs.iter().collect();
    check(model, &refs, tolerance)
}

/// Seeded random inputs for `spec` at `dims` (a size for each dynamic dim): normal f32 values, and ids drawn
/// uniformly from the rows of the smallest table each ids input indexes.
pub fn random_inputs(
    spec: &ModelSpec,
    dims: &[(&str, usize)],
    seed: u64,
) -> Result<Vec<Tensor>, DriftError> {
    spec.inputs
        .iter()
        .enumerate()
        .map(|(i, input)| {
            let size_of = |s: usize| {
                let name = spec.dyn_dims[s];
                dims.iter()
                    .find(|(n, _)| *n == name)
                    .map(|&(_, size)| size)
                    .ok_or(DriftError::MissingDim {
                        dim: name,
                        known: spec.dyn_dims,
                    })
            };
            if let Some(arg) = input.binds {
                return Ok(fuse_runtime::exec::dim_arg(size_of(arg.dim)?)?);
            }
            let shape = input
                .dims
                .iter()
                .map(|d| match *d {
                    DimSpec::Fixed(n) => Ok(n),
                    DimSpec::Dyn(s) => size_of(s),
                })
                .collect::<Result<Vec<usize>, DriftError>>()?;
            let seed = seed.wrapping_add(i as u64);
            Ok(match input.dtype {
                DType::I64 => {
                    let rows = input.id_bound.map_or(1, |b| b.rows);
                    Tensor::try_uniform_ids(&shape, rows as i64, seed)?
                }
                DType::F32 => Tensor::try_randn(&shape, seed)?,
            })
        })
        .collect()
}

/// `mode`'s plan of `graph`, checked to be the plan `spec` was compiled with, so kernel i is kernel i.
fn planned(graph: &Graph, spec: &ModelSpec, mode: Mode) -> Result<Plan, DriftError> {
    let (program, name) = match mode {
        Mode::Fused => (spec.fused, "fused"),
        Mode::Eager => (spec.eager, "eager"),
    };
    let p = plan(graph, mode);
    if p.hash != program.plan_hash {
        return Err(DriftError::StalePlan {
            model: spec.name,
            mode: name,
            planned: p.hash,
            compiled: program.plan_hash,
        });
    }
    Ok(p)
}

fn graph_shape(p: &Plan, node: fuse_kernels::ir::NodeId, dims: &[usize]) -> Vec<usize> {
    p.graph.ty(node).shape.eval(dims)
}
