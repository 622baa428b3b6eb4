//! The arenas an executor keeps between calls, and how many.
//!
//! Each call takes an arena (the smallest idle one that fits, else a fresh one) and gives it back. Keeping them
//! makes later calls allocate nothing, but a burst of concurrent large calls would otherwise leave every one of
//! its arenas mapped for the model's lifetime. So what stays idle is bounded ([`PoolLimits`]): at most
//! `max_idle_arenas` arenas and `max_idle_bytes` bytes (the one arena that fits the recent calls is kept even
//! above the byte bound, or every call would allocate), and an arena more than `oversize_factor` times larger
//! than the largest of the last [`RECENT_CALLS`] calls needed (or than a [`reserve`](ArenaPool::reserve)d size)
//! is released. [`ArenaPool::trim`] releases everything idle. Released arenas are unmapped, so the memory goes back
//! to the system.

use std::sync::{Mutex, MutexGuard};

use crate::arena::Arena;
use crate::error::Result;

/// How many of the last calls' arena sizes decide what "much larger than needed" means.
pub const RECENT_CALLS: usize = 32;

/// Arenas up to this size are never released as oversized: they cost little to keep.
const SMALL_ARENA: usize = 8 << 20;

/// What an executor's pool keeps idle between calls; see [`crate::CompiledModel::set_pool_limits`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolLimits {
    /// Idle arenas kept at most; each concurrent call needs one. 0 keeps none (every call allocates).
    pub max_idle_arenas: usize,
    /// Idle bytes kept at most, beyond the one arena that fits the recent calls.
    pub max_idle_bytes: usize,
    /// An idle arena more than this many times larger than recent calls needed is released.
    pub oversize_factor: usize,
}

impl Default for PoolLimits {
    /// Four arenas, 1 GiB beyond the one that fits, nothing more than 4× what recent calls needed.
    fn default() -> Self {
        PoolLimits {
            max_idle_arenas: 4,
            max_idle_bytes: 1 << 30,
            oversize_factor: 4,
        }
    }
}

/// What a pool holds idle now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    pub idle_arenas: usize,
    pub idle_bytes: usize,
}

pub(crate) struct ArenaPool {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    idle: Vec<Arena>,
    limits: PoolLimits,
    /// Arena sizes of the last calls, a ring of [`RECENT_CALLS`].
    recent: Vec<usize>,
    next: usize,
    /// The largest size [`ArenaPool::reserve`] was asked for since the last trim: kept however rare such calls are.
    reserved: usize,
}

impl State {
    fn record(&mut self, bytes: usize) {
        if self.recent.len() < RECENT_CALLS {
            self.recent.push(bytes);
        } else {
            self.recent[self.next] = bytes;
        }
        self.next = (self.next + 1) % RECENT_CALLS;
    }

    fn need(&self) -> usize {
        self.recent
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
            .max(self.reserved)
    }

    /// Applies the limits; returns the arenas to release (dropped by the caller, outside the lock).
    fn prune(&mut self) -> Vec<Arena> {
        let sizes: Vec<usize> = self.idle.iter().map(Arena::len).collect();
        let keep = kept(&sizes, self.need(), &self.limits);
        let mut released = Vec::new();
        let mut kept_arenas = Vec::with_capacity(keep.len());
        for (i, arena) in std::mem::take(&mut self.idle).into_iter().enumerate() {
            if keep.contains(&i) {
                kept_arenas.push(arena);
            } else {
                released.push(arena);
            }
        }
        self.idle = kept_arenas;
        released
    }
}

/// Which of the idle arenas of `sizes` (oldest first) to keep, given the largest size recent calls `need`.
///
/// First the smallest one that fits `need`, then the most recently returned others, while the count and byte
/// limits allow; never one that is oversized.
pub fn kept(sizes: &[usize], need: usize, limits: &PoolLimits) -> Vec<usize> {
    // Against the length an arena for `need` has (rounded up to whole huge pages): with a factor of 1 the arena
    // that fits is then not oversized, and stays.
    let made = Arena::len_for(need).unwrap_or(need);
    let oversized =
        |len: usize| len > SMALL_ARENA && len > made.saturating_mul(limits.oversize_factor);
    let mut keep = Vec::new();
    if limits.max_idle_arenas == 0 {
        return keep;
    }
    let fitting = (0..sizes.len())
        .filter(|&i| sizes[i] >= need && !oversized(sizes[i]))
        .min_by_key(|&i| sizes[i]);
    let mut bytes = 0usize;
    if let Some(i) = fitting {
        keep.push(i);
    }
    for i in (0..sizes.len()).rev() {
        if keep.len() >= limits.max_idle_arenas {
            break;
        }
        if Some(i) == fitting || oversized(sizes[i]) {
            continue;
        }
        match bytes.checked_add(sizes[i]) {
            Some(total) if total <= limits.max_idle_bytes => {
                bytes = total;
                keep.push(i);
            }
            _ => {}
        }
    }
    keep
}

impl Default for ArenaPool {
    fn default() -> Self {
        ArenaPool {
            state: Mutex::new(State::default()),
        }
    }
}

impl ArenaPool {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock (none is possible in the short sections below) leaves a valid state.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// An arena of at least `bytes`: the smallest idle one that fits, else a fresh one.
    pub fn take(&self, bytes: usize) -> Result<Arena> {
        let pooled = {
            let mut state = self.state();
            state.record(bytes);
            let best = (0..state.idle.len())
                .filter(|&i| state.idle[i].len() >= bytes)
                .min_by_key(|&i| state.idle[i].len());
            best.map(|i| state.idle.remove(i))
        };
        match pooled {
            Some(arena) => Ok(arena),
            None => Arena::new(bytes).or_else(|e| {
                // Idle arenas too small for this call may be what stands in the way: release them and retry.
                let idle = std::mem::take(&mut self.state().idle);
                if idle.is_empty() {
                    return Err(e);
                }
                drop(idle);
                Arena::new(bytes)
            }),
        }
    }

    pub fn give_back(&self, arena: Arena) {
        let released = {
            let mut state = self.state();
            state.idle.push(arena);
            state.prune()
        };
        drop(released);
    }

    /// Makes sure a call needing `bytes` finds an arena here, allocating it and paying its page faults now, and
    /// keeps one that size from being released as oversized until [`ArenaPool::trim`].
    pub fn reserve(&self, bytes: usize) -> Result<()> {
        {
            let mut state = self.state();
            state.reserved = state.reserved.max(bytes);
        }
        let mut arena = self.take(bytes)?;
        arena.touch();
        self.give_back(arena);
        Ok(())
    }

    /// Releases every idle arena and forgets the recent sizes and reservations; returns the bytes released.
    pub fn trim(&self) -> usize {
        let released = {
            let mut state = self.state();
            state.recent.clear();
            state.next = 0;
            state.reserved = 0;
            std::mem::take(&mut state.idle)
        };
        released.iter().map(Arena::len).sum()
    }

    pub fn set_limits(&self, limits: PoolLimits) {
        let released = {
            let mut state = self.state();
            state.limits = limits;
            state.prune()
        };
        drop(released);
    }

    pub fn limits(&self) -> PoolLimits {
        self.state().limits
    }

    pub fn stats(&self) -> PoolStats {
        let state = self.state();
        PoolStats {
            idle_arenas: state.idle.len(),
            idle_bytes: state.idle.iter().map(Arena::len).sum(),
        }
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
