//! The random-view models `build.rs` writes (see `gen/random_views.rs`): views of every kind read by every kernel
//! kind, checked by `tests/random_views.rs` against the f64 reference and by `tests/gpu.rs` on the GPU.

use fuse_runtime::ModelSpec;

/// One generated model and its tolerance against the f64 reference (`atol + rtol·|want|`).
pub struct Case {
    pub spec: fn() -> &'static ModelSpec,
    pub atol: f64,
    pub rtol: f64,
}

/// The dims of `spec` among `batch`, `seq` and `past` (a start that leaves `seq` rows inside the constant axes a
/// narrow at `past` reads: 48 long, for `seq` up to 40).
pub fn dims_of(spec: &ModelSpec, batch: usize, seq: usize) -> Vec<(&'static str, usize)> {
    let past = (batch + seq) % 8;
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
