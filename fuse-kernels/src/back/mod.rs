//! Code writers. Each takes only a validated [`crate::plan::Plan`].

pub mod cpu;
pub mod cuda;
