//! The random-view models `build.rs` writes (see `gen/random_views.rs`): views of every kind read by every kernel
//! kind, checked by `tests/random_views.rs` against the f64 reference and by `tests/gpu.rs` on the GPU.

use fuse_runtime::__private::DimSpec;
use fuse_runtime::{DType, ModelSpec, Tensor};

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

/// The dims of `spec` among `batch`, `seq` and `past` (a start that leaves `seq` rows inside the constant axes a
/// narrow at `past` reads: 48 long, for `seq` up to 40). `past` is 0 at times, but not where it sizes an input
/// (a cache passed in): a tensor is never empty.
pub fn dims_of(spec: &ModelSpec, batch: usize, seq: usize) -> Vec<(&'static str, usize)> {
    let sizes_an_input = spec
        .dyn_dims
        .iter()
        .position(|&d| d == "past")
        .is_some_and(|k| {
            spec.inputs.iter().any(|i| {
                i.dims
                    .iter()
                    .any(|d| matches!(d, DimSpec::Dyn(j) if *j == k))
            })
        });
    let past = if sizes_an_input {
        1 + (batch + seq) % 7
    } else {
        (batch + seq) % 8
    };
    [("batch", batch), ("seq", seq), ("past", past)]
        .into_iter()
        .filter(|(name, _)| spec.dyn_dims.contains(name))
        .collect()
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

include!(concat!(env!("OUT_DIR"), "/random_views.rs"));
