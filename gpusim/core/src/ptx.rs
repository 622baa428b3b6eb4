//! PTX text → decoded kernels. (Parser and decoder: to be written.)

use crate::error::{SimError, SimResult};

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
}

/// A loaded PTX module: every `.entry` decoded once.
#[derive(Debug)]
pub struct Module {
    pub kernels: Vec<std::sync::Arc<Kernel>>,
}

impl Module {
    /// Parses and decodes PTX text (as nvcc 13.0 and NVRTC emit it for compute_80/90).
    pub fn from_ptx(text: &str) -> SimResult<Module> {
        let _ = text;
        Err(SimError::Other("the PTX parser is not written yet".into()))
    }

    pub fn kernel(&self, name: &str) -> SimResult<std::sync::Arc<Kernel>> {
        self.kernels
            .iter()
            .find(|k| k.name == name)
            .cloned()
            .ok_or_else(|| SimError::NoSuchKernel(name.to_string()))
    }
}
