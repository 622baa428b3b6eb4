//! Example models compiled by fuse. Each lives in `models/` as a `#[fused_model]` module.

pub mod timing;

pub mod models {
    pub mod encoder;
    pub mod mlp;
}
