//! Test support for fuse.

pub mod check;
pub mod golden;
pub mod harness;
pub mod op_models;
pub mod reference;
