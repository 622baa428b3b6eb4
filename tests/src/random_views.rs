//! The random-view models `build.rs` writes (see `gen/random_views.rs`): views of every kind read by every kernel
//! kind, checked by `tests/random_views.rs` against the f64 reference and by `tests/gpu.rs` on the GPU.

use fuse_runtime::ModelSpec;

/// One generated model and its tolerance against the f64 reference (`atol + rtol·|want|`).
pub struct Case {
    pub spec: fn() -> &'static ModelSpec,
    pub atol: f64,
    pub rtol: f64,
}

include!(concat!(env!("OUT_DIR"), "/random_views.rs"));
