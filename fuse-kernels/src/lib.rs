//! The fuse compiler. See `ARCHITECTURE.md` at the repository root for the pipeline and its invariants.

pub mod infer;
pub mod ir;
