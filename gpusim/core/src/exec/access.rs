//! Loads and stores of one thread in every state space, with the launch's checks: bounds (against the
//! allocation table, the block's shared memory, the thread's local memory, the parameter buffer), alignment,
//! never-written global bytes, and shared-memory races.

use super::races::{Conflict, RaceTracker};
use crate::error::{SimError, SimResult, Site};
use crate::memory::{copy_small, DeviceMemory, Fault};
use crate::ptx::decode::{LOCAL_WINDOW, SHARED_WINDOW, WINDOW_BYTES};
use crate::ptx::ops::Space;

/// Enough to name a thread in an error.
#[derive(Clone, Copy)]
pub(crate) struct Where<'k> {
    pub kernel: &'k str,
    pub block: [u32; 3],
    pub block_dim: [u32; 3],
}

impl Where<'_> {
    pub fn site(&self, thread: usize, line: u32) -> Site {
        let [bx, by, _] = self.block_dim;
        let t = thread as u32;
        Site {
            kernel: self.kernel.to_string(),
            block: self.block,
            thread: [t % bx, (t / bx) % by, t / (bx * by)],
            ptx_line: line,
        }
    }
}

pub(crate) struct Access<'a> {
    pub memory: &'a mut DeviceMemory,
    pub shared: &'a mut [u8],
    pub races: &'a mut RaceTracker,
    pub local: &'a mut [u8],
    pub params: &'a [u8],
    pub thread: usize,
    pub at: Where<'a>,
}

/// Generic addresses: the shared and local windows, else global.
fn resolve(space: Space, address: u64) -> (Space, u64) {
    if space != Space::Generic {
        return (space, address);
    }
    if address.wrapping_sub(SHARED_WINDOW) < WINDOW_BYTES {
        (Space::Shared, address - SHARED_WINDOW)
    } else if address.wrapping_sub(LOCAL_WINDOW) < WINDOW_BYTES {
        (Space::Local, address - LOCAL_WINDOW)
    } else {
        (Space::Global, address)
    }
}

fn space_name(space: Space, write: bool) -> &'static str {
    match (space, write) {
        (Space::Global | Space::Generic, false) => "global read",
        (Space::Global | Space::Generic, true) => "global write",
        (Space::Shared, false) => "shared read",
        (Space::Shared, true) => "shared write",
        (Space::Local, false) => "local read",
        (Space::Local, true) => "local write",
        (Space::Param, _) => "parameter read",
    }
}

impl Access<'_> {
    fn out_of_bounds(
        &self,
        space: Space,
        write: bool,
        address: u64,
        bytes: usize,
        line: u32,
        detail: String,
    ) -> SimError {
        SimError::OutOfBounds {
            access: space_name(space, write),
            bytes: bytes as u32,
            address,
            site: self.at.site(self.thread, line),
            detail,
        }
    }

    fn race(&self, conflict: Conflict, write: bool, bytes: usize, line: u32) -> SimError {
        let other = match conflict.other_thread {
            Some(t) => {
                let site = self.at.site(t as usize, conflict.other_line);
                let [x, y, z] = site.thread;
                format!("thread ({x},{y},{z}) at PTX line {}", conflict.other_line)
            }
            None => "several threads".to_string(),
        };
        SimError::SharedRace {
            offset: conflict.offset,
            bytes: bytes as u32,
            site: self.at.site(self.thread, line),
            detail: format!(
                "this thread {} the byte that {other} {} since the last barrier",
                if write { "writes" } else { "reads" },
                if conflict.other_wrote {
                    "wrote"
                } else {
                    "read"
                }
            ),
        }
    }

    fn check_alignment(
        &self,
        space: Space,
        write: bool,
        address: u64,
        bytes: usize,
        line: u32,
    ) -> SimResult<()> {
        if !address.is_multiple_of(bytes as u64) {
            return Err(SimError::Misaligned {
                access: space_name(space, write),
                bytes: bytes as u32,
                address,
                site: self.at.site(self.thread, line),
            });
        }
        Ok(())
    }

    /// Reads `out.len()` bytes (a power of two, at most 32) at `address` in `space`.
    pub fn load(&mut self, space: Space, address: u64, out: &mut [u8], line: u32) -> SimResult<()> {
        let bytes = out.len();
        let (space, address) = resolve(space, address);
        self.check_alignment(space, false, address, bytes, line)?;
        match space {
            Space::Global | Space::Generic => {
                self.memory
                    .read(address, out, true)
                    .map_err(|fault| match fault {
                        Fault::OutOfBounds(detail) => {
                            self.out_of_bounds(space, false, address, bytes, line, detail)
                        }
                        Fault::Uninitialized => SimError::UninitializedRead {
                            address,
                            site: self.at.site(self.thread, line),
                        },
                    })
            }
            Space::Shared => {
                let offset = self.bounded(space, false, address, bytes, self.shared.len(), line)?;
                self.races
                    .read(offset, bytes, self.thread as u32, line)
                    .map_err(|c| self.race(c, false, bytes, line))?;
                copy_small(out, &self.shared[offset..offset + bytes]);
                Ok(())
            }
            Space::Local => {
                let offset = self.bounded(space, false, address, bytes, self.local.len(), line)?;
                out.copy_from_slice(&self.local[offset..offset + bytes]);
                Ok(())
            }
            Space::Param => {
                let offset = self.bounded(space, false, address, bytes, self.params.len(), line)?;
                copy_small(out, &self.params[offset..offset + bytes]);
                Ok(())
            }
        }
    }

    /// A 4-byte `ld.shared` (the inner loop of tiled kernels), with the same checks as [`Access::load`].
    pub fn load_shared32(&mut self, address: u64, line: u32) -> SimResult<u32> {
        if !address.is_multiple_of(4) {
            return Err(SimError::Misaligned {
                access: "shared read",
                bytes: 4,
                address,
                site: self.at.site(self.thread, line),
            });
        }
        let offset = self.bounded(Space::Shared, false, address, 4, self.shared.len(), line)?;
        self.races
            .read(offset, 4, self.thread as u32, line)
            .map_err(|c| self.race(c, false, 4, line))?;
        let b = &self.shared[offset..offset + 4];
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn store(&mut self, space: Space, address: u64, data: &[u8], line: u32) -> SimResult<()> {
        let bytes = data.len();
        let (space, address) = resolve(space, address);
        self.check_alignment(space, true, address, bytes, line)?;
        match space {
            Space::Global | Space::Generic => {
                self.memory
                    .write(address, data)
                    .map_err(|fault| match fault {
                        Fault::OutOfBounds(detail) => {
                            self.out_of_bounds(space, true, address, bytes, line, detail)
                        }
                        Fault::Uninitialized => {
                            self.out_of_bounds(space, true, address, bytes, line, String::new())
                        }
                    })
            }
            Space::Shared => {
                let offset = self.bounded(space, true, address, bytes, self.shared.len(), line)?;
                self.races
                    .write(offset, bytes, self.thread as u32, line)
                    .map_err(|c| self.race(c, true, bytes, line))?;
                copy_small(&mut self.shared[offset..offset + bytes], data);
                Ok(())
            }
            Space::Local => {
                let offset = self.bounded(space, true, address, bytes, self.local.len(), line)?;
                self.local[offset..offset + bytes].copy_from_slice(data);
                Ok(())
            }
            Space::Param => Err(self.out_of_bounds(
                space,
                true,
                address,
                bytes,
                line,
                "parameters are read-only".into(),
            )),
        }
    }

    /// Atomic read-modify-write: reads the old value, stores `update(old)`. Shared atomics are not race-tracked.
    pub fn atomic(
        &mut self,
        space: Space,
        address: u64,
        bytes: usize,
        line: u32,
        update: impl FnOnce(u64) -> u64,
    ) -> SimResult<u64> {
        let (space, address) = resolve(space, address);
        self.check_alignment(space, true, address, bytes, line)?;
        let mut buf = [0u8; 8];
        match space {
            Space::Shared => {
                let offset = self.bounded(space, true, address, bytes, self.shared.len(), line)?;
                buf[..bytes].copy_from_slice(&self.shared[offset..offset + bytes]);
                let old = u64::from_le_bytes(buf);
                let new = update(old).to_le_bytes();
                self.shared[offset..offset + bytes].copy_from_slice(&new[..bytes]);
                Ok(old)
            }
            Space::Global | Space::Generic => {
                self.load(Space::Global, address, &mut buf[..bytes], line)?;
                let old = u64::from_le_bytes(buf);
                let new = update(old).to_le_bytes();
                self.store(Space::Global, address, &new[..bytes], line)?;
                Ok(old)
            }
            _ => Err(self.out_of_bounds(
                space,
                true,
                address,
                bytes,
                line,
                "atomics need global or shared memory".into(),
            )),
        }
    }

    fn bounded(
        &self,
        space: Space,
        write: bool,
        address: u64,
        bytes: usize,
        size: usize,
        line: u32,
    ) -> SimResult<usize> {
        match address.checked_add(bytes as u64) {
            Some(end) if end <= size as u64 => Ok(address as usize),
            _ => Err(self.out_of_bounds(
                space,
                write,
                address,
                bytes,
                line,
                format!(
                    "the {} is {size} bytes",
                    match space {
                        Space::Shared => "block's shared memory",
                        Space::Local => "thread's local memory",
                        _ => "parameter buffer",
                    }
                ),
            )),
        }
    }
}
