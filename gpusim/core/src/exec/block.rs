//! One block: its threads' registers, shared and local memory, and the scheduler that meets warps at
//! `shfl.sync` and the block at `bar.sync`.
//!
//! Each thread runs until it exits or reaches a barrier or shuffle. When every thread waits or has exited, the
//! scheduler completes every shuffle whose member lanes all wait at that same instruction with that same mask
//! (a lane that exited, waits elsewhere, or is outside the block is a [`SimError::Divergence`]); when none is left,
//! the block barrier completes if every thread waits at a `bar.sync` (any pc: barriers count arrivals, as the
//! hardware does). A block with threads at a barrier and others exited, or any other stalemate, is a
//! `Divergence` naming one stuck thread, its PTX line, and what the others do — never a hang.

use super::access::{Access, Where};
use super::races::RaceTracker;
use super::thread::{run, Status};
use crate::error::{SimError, SimResult};
use crate::memory::DeviceMemory;
use crate::ptx::ops::{Op, ShuffleMode, SPECIAL_REGISTERS};
use crate::ptx::Kernel;

pub(crate) struct Block<'k> {
    kernel: &'k Kernel,
    grid: [u32; 3],
    block_dim: [u32; 3],
    threads: usize,
    stride: usize,
    template: Vec<u64>,
    regs: Vec<u64>,
    pcs: Vec<u32>,
    status: Vec<Status>,
    shared: Vec<u8>,
    local: Vec<u8>,
    local_bytes: usize,
    races: RaceTracker,
    pub executed: u64,
    /// Instructions a thread may run between two barriers or shuffles before it is reported as runaway.
    pub runaway_limit: u64,
}

const WARP: usize = 32;
/// A thread that runs this many instructions without exiting or meeting a barrier or shuffle is reported rather
/// than left to hang the test (minutes of simulation; fuse's kernels at test sizes run thousands).
pub(crate) const RUNAWAY_LIMIT: u64 = 1 << 32;
/// Slot of `%ctaid.x` (see `SPECIAL_REGISTERS`).
const CTAID_SLOT: usize = 6;

impl<'k> Block<'k> {
    pub fn new(
        kernel: &'k Kernel,
        grid: [u32; 3],
        block_dim: [u32; 3],
        shared_bytes: usize,
    ) -> Self {
        let body = &kernel.body;
        let first_constant = SPECIAL_REGISTERS.len() + body.register_count as usize;
        let stride = first_constant + body.constants.len();
        let threads = block_dim.iter().map(|&d| d as usize).product();
        let mut template = vec![0u64; stride];
        template[first_constant..].copy_from_slice(&body.constants);
        let local_bytes = body.local_bytes as usize;
        let mut block = Block {
            kernel,
            grid,
            block_dim,
            threads,
            stride,
            template,
            regs: vec![0; stride * threads],
            pcs: vec![0; threads],
            status: vec![Status::Ready; threads],
            shared: vec![0; shared_bytes],
            local: vec![0; local_bytes * threads],
            local_bytes,
            races: RaceTracker::new(shared_bytes),
            executed: 0,
            runaway_limit: RUNAWAY_LIMIT,
        };
        block.load_template();
        block
    }

    /// Per-launch register contents: the constants, and the special registers that do not depend on the block.
    fn load_template(&mut self) {
        let [bx, by, bz] = self.block_dim;
        let warps = self.threads.div_ceil(WARP) as u32;
        for t in 0..self.threads {
            let regs = &mut self.regs[t * self.stride..(t + 1) * self.stride];
            regs.copy_from_slice(&self.template);
            let t32 = t as u32;
            let specials = [
                t32 % bx,
                (t32 / bx) % by,
                t32 / (bx * by),
                bx,
                by,
                bz,
                0,
                0,
                0,
                self.grid[0],
                self.grid[1],
                self.grid[2],
                t32 % WARP as u32,
                t32 / WARP as u32,
                warps,
                WARP as u32,
            ];
            for (slot, value) in regs.iter_mut().zip(specials) {
                *slot = u64::from(value);
            }
        }
    }

    /// A new block: `%ctaid`, pcs, shared and local memory, and a fresh race epoch. Registers keep the previous
    /// block's values (PTX registers start undefined; no instruction may rely on them).
    fn reset(&mut self, block: [u32; 3]) {
        for t in 0..self.threads {
            let ctaid = t * self.stride + CTAID_SLOT;
            for (k, &value) in block.iter().enumerate() {
                self.regs[ctaid + k] = u64::from(value);
            }
        }
        self.pcs.fill(0);
        self.status.fill(Status::Ready);
        // Shared memory starts undefined on a GPU; zero here, and a fresh race epoch.
        self.shared.fill(0);
        self.local.fill(0);
        self.races.barrier();
    }

    pub fn run(
        &mut self,
        block: [u32; 3],
        memory: &mut DeviceMemory,
        params: &[u8],
    ) -> SimResult<()> {
        self.reset(block);
        let kernel: &'k Kernel = self.kernel;
        let at = Where {
            kernel: &kernel.name,
            block,
            block_dim: self.block_dim,
        };
        let code = &kernel.body.code;
        loop {
            for t in 0..self.threads {
                if self.status[t] != Status::Ready {
                    continue;
                }
                let mut access = Access {
                    memory,
                    shared: &mut self.shared,
                    races: &mut self.races,
                    local: &mut self.local[t * self.local_bytes..(t + 1) * self.local_bytes],
                    params,
                    thread: t,
                    at,
                };
                let regs = &mut self.regs[t * self.stride..(t + 1) * self.stride];
                self.status[t] = run(
                    code,
                    regs,
                    &mut self.pcs[t],
                    &mut access,
                    &mut self.executed,
                    self.runaway_limit,
                )?;
            }
            if self.status.iter().all(|&s| s == Status::Exited) {
                return Ok(());
            }
            if self.resolve_shuffles(at)? {
                continue;
            }
            self.resolve_barrier(at)?;
        }
    }

    fn op_at(&self, t: usize) -> &Op {
        &self.kernel.body.code[self.pcs[t] as usize].op
    }

    fn line_at(&self, t: usize) -> u32 {
        self.kernel
            .body
            .code
            .get(self.pcs[t] as usize)
            .map_or(0, |i| i.line)
    }

    fn reg(&self, t: usize, slot: u32) -> u64 {
        self.regs[t * self.stride + slot as usize]
    }

    fn describe(&self, t: usize) -> String {
        match self.status[t] {
            Status::Exited => "has exited".into(),
            Status::AtBarrier => format!("waits at bar.sync (PTX line {})", self.line_at(t)),
            Status::AtShuffle => format!("waits at shfl.sync (PTX line {})", self.line_at(t)),
            Status::Ready => "is running".into(),
        }
    }

    /// Completes every shuffle whose lanes are all there; true if any completed.
    fn resolve_shuffles(&mut self, at: Where<'_>) -> SimResult<bool> {
        let mut progressed = false;
        for warp_start in (0..self.threads).step_by(WARP) {
            let warp_end = (warp_start + WARP).min(self.threads);
            let mut done = [false; WARP];
            for t in warp_start..warp_end {
                if self.status[t] != Status::AtShuffle || done[t - warp_start] {
                    continue;
                }
                let Op::Shfl { mask, .. } = *self.op_at(t) else {
                    continue;
                };
                let member_mask = self.reg(t, mask) as u32;
                let lane = t - warp_start;
                if member_mask & (1 << lane) == 0 {
                    return Err(SimError::Divergence {
                        site: at.site(t, self.line_at(t)),
                        detail: format!("shfl.sync with member mask 0x{member_mask:08x}, which does not name this lane {lane}"),
                    });
                }
                let pc = self.pcs[t];
                let complete = (0..WARP).filter(|l| member_mask & (1 << l) != 0).all(|l| {
                    let u = warp_start + l;
                    u < warp_end
                        && self.status[u] == Status::AtShuffle
                        && self.pcs[u] == pc
                        && self.reg(u, mask) as u32 == member_mask
                });
                if !complete {
                    continue;
                }
                self.shuffle(at, warp_start, member_mask)?;
                for (l, done) in done.iter_mut().enumerate() {
                    *done |= member_mask & (1 << l) != 0;
                }
                progressed = true;
            }
        }
        Ok(progressed)
    }

    /// Executes the `shfl.sync` that the lanes of `member_mask` of the warp at `warp_start` all wait at.
    fn shuffle(&mut self, at: Where<'_>, warp_start: usize, member_mask: u32) -> SimResult<()> {
        let Op::Shfl {
            mode,
            d,
            p,
            a,
            b,
            c,
            ..
        } = *self.op_at(warp_start + member_mask.trailing_zeros() as usize)
        else {
            return Ok(());
        };
        let mut values = [0u64; WARP];
        for (l, value) in values.iter_mut().enumerate() {
            if member_mask & (1 << l) != 0 {
                *value = self.reg(warp_start + l, a) & 0xffff_ffff;
            }
        }
        let mut results = [(0u64, false); WARP];
        for (l, result) in results.iter_mut().enumerate() {
            if member_mask & (1 << l) == 0 {
                continue;
            }
            let t = warp_start + l;
            let lane = l as i32;
            let offset = (self.reg(t, b) & 0x1f) as i32;
            let cval = (self.reg(t, c) & 0x1f) as i32;
            let segmask = ((self.reg(t, c) >> 8) & 0x1f) as i32;
            let max_lane = (lane & segmask) | (cval & !segmask);
            let min_lane = lane & segmask;
            let (j, in_range) = match mode {
                ShuffleMode::Up => (lane - offset, lane - offset >= max_lane),
                ShuffleMode::Down => (lane + offset, lane + offset <= max_lane),
                ShuffleMode::Bfly => (lane ^ offset, (lane ^ offset) <= max_lane),
                ShuffleMode::Idx => {
                    let j = min_lane | (offset & !segmask);
                    (j, j <= max_lane)
                }
            };
            let source = if in_range { j as usize } else { l };
            if member_mask & (1 << source) == 0 {
                return Err(SimError::Divergence {
                    site: at.site(t, self.line_at(t)),
                    detail: format!(
                        "shfl.sync reads lane {source}, which is not in the member mask 0x{member_mask:08x}"
                    ),
                });
            }
            *result = (values[source], in_range);
        }
        for (l, &(value, in_range)) in results.iter().enumerate() {
            if member_mask & (1 << l) == 0 {
                continue;
            }
            let t = warp_start + l;
            self.regs[t * self.stride + d as usize] = value;
            if p != crate::ptx::ops::NONE {
                self.regs[t * self.stride + p as usize] = u64::from(in_range);
            }
            self.pcs[t] += 1;
            self.status[t] = Status::Ready;
        }
        Ok(())
    }

    fn resolve_barrier(&mut self, at: Where<'_>) -> SimResult<()> {
        let waiting: Vec<usize> = (0..self.threads)
            .filter(|&t| self.status[t] == Status::AtBarrier)
            .collect();
        let others: Vec<usize> = (0..self.threads)
            .filter(|&t| self.status[t] != Status::AtBarrier)
            .collect();
        let Some(&first_other) = others.first() else {
            let expected = self.threads.div_ceil(WARP) * WARP;
            for &t in &waiting {
                if let Op::Bar { id, count } = *self.op_at(t) {
                    if self.reg(t, id) != 0 {
                        return Err(SimError::UnsupportedInstruction {
                            line: self.line_at(t),
                            instruction: format!(
                                "bar.sync on barrier {} (only barrier 0 is simulated)",
                                self.reg(t, id)
                            ),
                        });
                    }
                    if count != crate::ptx::ops::NONE && self.reg(t, count) as usize != expected {
                        return Err(SimError::UnsupportedInstruction {
                            line: self.line_at(t),
                            instruction: format!(
                                "bar.sync with a thread count ({}) below the block's",
                                self.reg(t, count)
                            ),
                        });
                    }
                }
            }
            for t in waiting {
                self.pcs[t] += 1;
                self.status[t] = Status::Ready;
            }
            self.races.barrier();
            return Ok(());
        };
        // A stalemate: name a waiting thread and what the others do.
        let stuck = waiting
            .first()
            .copied()
            .or_else(|| (0..self.threads).find(|&t| self.status[t] == Status::AtShuffle))
            .unwrap_or(first_other);
        let mut detail = format!("this thread {}", self.describe(stuck));
        let blocker = if stuck == first_other {
            others.get(1).copied()
        } else {
            Some(first_other)
        };
        if let Some(other) = blocker {
            let [x, y, z] = at.site(other, 0).thread;
            detail += &format!(", but thread ({x},{y},{z}) {}", self.describe(other));
        }
        let counts = |s: Status| self.status.iter().filter(|&&x| x == s).count();
        detail += &format!(
            " ({} at a barrier, {} at a shuffle, {} exited, of {})",
            counts(Status::AtBarrier),
            counts(Status::AtShuffle),
            counts(Status::Exited),
            self.threads
        );
        Err(SimError::Divergence {
            site: at.site(stuck, self.line_at(stuck)),
            detail,
        })
    }
}
