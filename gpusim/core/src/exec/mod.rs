//! Runs one launch: every block of the grid, one after another, each with `block::Block`.

mod access;
mod block;
mod float;
mod int;
mod races;
mod thread;

use crate::error::{SimError, SimResult};
use crate::memory::DeviceMemory;
use crate::ptx::Kernel;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub dynamic_shared_bytes: u32,
}

/// What a launch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LaunchStats {
    /// Instructions executed, summed over threads (guarded-off ones included).
    pub instructions: u64,
}

/// The most threads per block and shared bytes per block of the simulated sm_90 device.
pub const MAX_THREADS_PER_BLOCK: u32 = 1024;
pub const MAX_SHARED_BYTES_PER_BLOCK: u32 = 227 * 1024;

/// Runs every block of `config.grid` of `kernel`. `params` is the packed parameter buffer laid out by
/// [`Kernel::params`] (each value at its `offset`). Every check that fires is an error; memory written before the
/// failure stays written, as on a GPU.
pub fn launch(
    kernel: &Kernel,
    memory: &mut DeviceMemory,
    config: LaunchConfig,
    params: &[u8],
) -> SimResult<()> {
    launch_with_stats(kernel, memory, config, params).map(|_| ())
}

/// [`launch`], also returning how many instructions ran.
pub fn launch_with_stats(
    kernel: &Kernel,
    memory: &mut DeviceMemory,
    config: LaunchConfig,
    params: &[u8],
) -> SimResult<LaunchStats> {
    launch_limited(kernel, memory, config, params, block::RUNAWAY_LIMIT)
}

fn launch_limited(
    kernel: &Kernel,
    memory: &mut DeviceMemory,
    config: LaunchConfig,
    params: &[u8],
    runaway_limit: u64,
) -> SimResult<LaunchStats> {
    let invalid = |detail: String| SimError::InvalidLaunch {
        kernel: kernel.name.clone(),
        detail,
    };
    let threads: u64 = config.block.iter().map(|&d| u64::from(d)).product();
    if config.grid.contains(&0) || config.block.contains(&0) {
        return Err(invalid(format!(
            "empty grid {:?} or block {:?}",
            config.grid, config.block
        )));
    }
    if threads > u64::from(MAX_THREADS_PER_BLOCK) || config.block[2] > 64 {
        return Err(invalid(format!(
            "block {:?} exceeds the device's limits (1024 threads, z ≤ 64)",
            config.block
        )));
    }
    if config.grid[1] > 65535 || config.grid[2] > 65535 {
        return Err(invalid(format!(
            "grid {:?} exceeds the device's limits (y, z ≤ 65535)",
            config.grid
        )));
    }
    if (params.len() as u64) < u64::from(kernel.params_bytes()) {
        return Err(invalid(format!(
            "{} parameter bytes given, the kernel's parameters take {}",
            params.len(),
            kernel.params_bytes()
        )));
    }
    let body = &kernel.body;
    let shared_bytes = if config.dynamic_shared_bytes > 0 {
        u64::from(body.dynamic_shared_offset) + u64::from(config.dynamic_shared_bytes)
    } else {
        u64::from(body.static_shared_bytes)
    };
    if shared_bytes > u64::from(MAX_SHARED_BYTES_PER_BLOCK) {
        return Err(invalid(format!(
            "{shared_bytes} bytes of shared memory per block exceed the device's 227 KiB"
        )));
    }
    let mut block = block::Block::new(kernel, config.grid, config.block, shared_bytes as usize);
    block.runaway_limit = runaway_limit;
    for z in 0..config.grid[2] {
        for y in 0..config.grid[1] {
            for x in 0..config.grid[0] {
                block.run([x, y, z], memory, params)?;
            }
        }
    }
    Ok(LaunchStats {
        instructions: block.executed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ptx::Module;

    #[test]
    fn an_endless_loop_is_reported_not_a_hang() {
        let module =
            Module::from_ptx(include_str!("../../tests/fixtures/handwritten.ptx")).unwrap();
        let kernel = module.kernel("spin").unwrap();
        let mut memory = DeviceMemory::new();
        let out = memory.alloc(32 * 4).unwrap();
        let mut params = out.to_le_bytes().to_vec();
        params.extend_from_slice(&u32::MAX.to_le_bytes());
        let config = LaunchConfig {
            grid: [1, 1, 1],
            block: [32, 1, 1],
            dynamic_shared_bytes: 0,
        };
        match launch_limited(&kernel, &mut memory, config, &params, 100_000) {
            Err(SimError::Runaway { executed, site }) => {
                assert!(executed > 100_000);
                assert_eq!((site.kernel.as_str(), site.thread), ("spin", [0, 0, 0]));
            }
            other => panic!("expected Runaway, got {other:?}"),
        }
    }
}
