//! Test support for fuse.

pub mod reference;
pub mod harness;
pub mod check;
pub mod golden;
