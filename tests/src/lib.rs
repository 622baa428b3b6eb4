//! Test support for fuse.

pub mod reference;
