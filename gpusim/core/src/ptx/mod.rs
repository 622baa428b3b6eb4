//! PTX text → decoded kernels: `lex` (tokens) → `parse` (statements per `.entry`) → `decode` (instructions
//! over register slots, see `ops`). A module is decoded once; launches only execute.

pub(crate) mod decode;
mod lex;
pub(crate) mod ops;
mod parse;

use crate::error::{SimError, SimResult};
use std::sync::Arc;

/// One `.param` of a kernel entry, as cuLaunchKernel's `kernelParams` must supply it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamInfo {
    pub name: String,
    pub size: u32,
    pub align: u32,
    /// Offset in the packed parameter buffer that [`crate::launch`] takes.
    pub offset: u32,
}

/// A decoded `.entry`.
#[derive(Debug)]
pub struct Kernel {
    pub name: String,
    pub params: Vec<ParamInfo>,
    /// Bytes of statically declared `.shared` memory.
    pub static_shared_bytes: u32,
    pub(crate) body: decode::DecodedBody,
}

impl Kernel {
    /// Bytes of the packed parameter buffer (end of the last parameter).
    pub fn params_bytes(&self) -> u32 {
        self.params.last().map_or(0, |p| p.offset + p.size)
    }

    /// Bytes of `.local` memory each thread gets.
    pub fn local_bytes(&self) -> u32 {
        self.body.local_bytes
    }

    /// Number of decoded instructions.
    pub fn instruction_count(&self) -> usize {
        self.body.code.len()
    }
}

/// A loaded PTX module: every `.entry` decoded once.
#[derive(Debug)]
pub struct Module {
    pub kernels: Vec<Arc<Kernel>>,
}

impl Module {
    /// Parses and decodes PTX text (as nvcc 13.0 and NVRTC emit it for compute_80/90).
    pub fn from_ptx(text: &str) -> SimResult<Module> {
        let tokens = lex::tokenize(text)?;
        let raw = parse::parse(&tokens)?;
        let mut kernels = Vec::with_capacity(raw.entries.len());
        for entry in &raw.entries {
            let mut params = Vec::with_capacity(entry.params.len());
            let mut end = 0u32;
            for p in &entry.params {
                let offset = end.div_ceil(p.align.max(1)) * p.align.max(1);
                let size = p.element_bytes * p.count.unwrap_or(1);
                params.push(ParamInfo {
                    name: p.name.clone(),
                    size,
                    align: p.align,
                    offset,
                });
                end = offset + size;
            }
            let offsets: Vec<(String, u32)> =
                params.iter().map(|p| (p.name.clone(), p.offset)).collect();
            let body = decode::decode_entry(&raw, entry, &offsets)?;
            kernels.push(Arc::new(Kernel {
                name: entry.name.clone(),
                params,
                static_shared_bytes: body.static_shared_bytes,
                body,
            }));
        }
        Ok(Module { kernels })
    }

    pub fn kernel(&self, name: &str) -> SimResult<Arc<Kernel>> {
        self.kernels
            .iter()
            .find(|k| k.name == name)
            .cloned()
            .ok_or_else(|| SimError::NoSuchKernel(name.to_string()))
    }
}
