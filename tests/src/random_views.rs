//! The random-view models `build.rs` writes (see `gen/random_views.rs`): views of every kind read by every kernel
//! kind, checked by `tests/random_views.rs` against the f64 reference and by `tests/gpu.rs` on the GPU.

use fuse_runtime::__private::DimSpec;
use fuse_runtime::ModelSpec;

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

include!(concat!(env!("OUT_DIR"), "/random_views.rs"));
