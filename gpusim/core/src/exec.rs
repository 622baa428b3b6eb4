//! Runs one launch. (Interpreter: to be written.)

use crate::error::{SimError, SimResult};
use crate::memory::DeviceMemory;
use crate::ptx::Kernel;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub dynamic_shared_bytes: u32,
}

/// Runs every block of `config.grid` of `kernel`. `params` is the packed parameter buffer laid out by
/// [`Kernel::params`] (each value at its `offset`). Every check that fires is an error; memory written before the
/// failure stays written, as on a GPU.
pub fn launch(kernel: &Kernel, memory: &mut DeviceMemory, config: LaunchConfig, params: &[u8]) -> SimResult<()> {
    let _ = (memory, config, params);
    Err(SimError::Other(format!("the interpreter is not written yet (kernel `{}`)", kernel.name)))
}
