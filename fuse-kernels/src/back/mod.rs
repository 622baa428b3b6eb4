//! Code writers. Each takes only a validated [`crate::plan::Plan`].

pub mod cpu;
pub mod cuda;

use crate::ir::Dim;

/// A build-time size as the runtime's tables (`fuse_tables`) hold it.
pub fn mono(d: &Dim) -> fuse_tables::Mono {
    fuse_tables::Mono {
        coeff: d.coeff,
        syms: d.syms.iter().map(|&s| s as usize).collect(),
    }
}
