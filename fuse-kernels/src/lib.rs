//! The fuse compiler. See `ARCHITECTURE.md` at the repository root for the pipeline and its invariants.

pub mod back;
pub mod contract;
pub mod front;
pub mod id_range;
pub mod infer;
pub mod ir;
pub mod plan;
pub mod timing;
pub mod zero_dims;
