//! How much more memory this process may use, checked before large allocations.
//!
//! An allocator on Linux rarely refuses: with overcommit it hands out address space, and a process that then
//! touches more than its container allows is killed by the kernel's OOM killer — no error, no unwinding. So
//! before a large allocation (an arena, an output, a reservation, random weights) the runtime compares the request
//! with the smallest of:
//!
//! - cgroup v2: `memory.max − memory.current` of the process's cgroup and of each ancestor (from
//!   `/proc/self/cgroup` and `/proc/self/mountinfo`),
//! - cgroup v1: `memory.limit_in_bytes − memory.usage_in_bytes` (and `hierarchical_memory_limit`), limits of
//!   2^62 bytes and more meaning "unlimited",
//! - `MemAvailable` of `/proc/meminfo`,
//!
//! counting a cgroup's inactive file cache as free, since the kernel reclaims it before it kills anything. A
//! request that does not fit is [`Error::OutOfMemory`] with both numbers. Where none of the files can be read
//! (another OS, a sandbox) nothing is checked and the allocator decides, as before.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Requests below this are not checked: reading the limit files costs tens of microseconds, and a small
/// allocation that tips a process over its limit would have been killed by the next one anyway.
pub const CHECKED_FROM_BYTES: usize = 16 << 20;

/// cgroup v1 reports "no limit" as a huge page-rounded number (`9223372036854771712`); anything this large is
/// treated as unlimited.
const V1_UNLIMITED: u64 = 1 << 62;

/// What the process may still allocate, and which limit says so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Headroom {
    pub bytes: u64,
    /// e.g. `"cgroup memory.max"`, `"MemAvailable"`.
    pub limit: &'static str,
}

impl Headroom {
    fn min(a: Option<Headroom>, b: Option<Headroom>) -> Option<Headroom> {
        match (a, b) {
            (Some(a), Some(b)) => Some(if b.bytes < a.bytes { b } else { a }),
            (a, b) => a.or(b),
        }
    }
}

/// Fails with [`Error::OutOfMemory`] when `bytes` for `what` is more than the process may still use. Small
/// requests (below [`CHECKED_FROM_BYTES`]) always pass.
pub fn check_fits(what: &'static str, bytes: usize) -> Result<()> {
    if bytes < CHECKED_FROM_BYTES {
        return Ok(());
    }
    match headroom() {
        Some(room) if bytes as u64 > room.bytes => Err(Error::OutOfMemory {
            what,
            bytes: Some(bytes),
            available: Some(room),
        }),
        _ => Ok(()),
    }
}

/// The smallest headroom of every limit that applies to this process, or `None` when none can be read.
pub fn headroom() -> Option<Headroom> {
    let meminfo = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| meminfo_available(&text))
        .map(|bytes| Headroom {
            bytes,
            limit: "MemAvailable",
        });
    Headroom::min(meminfo, cgroup_headroom())
}

fn cgroup_headroom() -> Option<Headroom> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let own = OwnCgroups::parse(&own);
    let mounts = CgroupMounts::parse(&mounts);
    let v2 = match (&own.v2, &mounts.v2) {
        (Some(path), Some(mount)) => v2_headroom(&mount.dir_of(path), &mount.point),
        _ => None,
    };
    let v1 = match (&own.v1_memory, &mounts.v1_memory) {
        (Some(path), Some(mount)) => v1_headroom(&mount.dir_of(path)),
        _ => None,
    };
    Headroom::min(v2, v1)
}

/// cgroup v2: the smallest `max − current + inactive_file` from the process's cgroup up to the mount point.
fn v2_headroom(dir: &Path, root: &Path) -> Option<Headroom> {
    let mut best = None;
    for dir in dir.ancestors().take_while(|d| d.starts_with(root)) {
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
        if let (Some(max), Some(current)) = (read("memory.max"), read("memory.current")) {
            let stat = read("memory.stat").unwrap_or_default();
            let room = v2_room(&max, &current, &stat).map(|bytes| Headroom {
                bytes,
                limit: "cgroup memory.max",
            });
            best = Headroom::min(best, room);
        }
    }
    best
}

/// cgroup v1: `limit − usage + total_inactive_file`, with the hierarchical limit when it is lower.
fn v1_headroom(dir: &Path) -> Option<Headroom> {
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
    let room = v1_room(
        &read("memory.limit_in_bytes")?,
        &read("memory.usage_in_bytes")?,
        &read("memory.stat").unwrap_or_default(),
    )?;
    Some(Headroom {
        bytes: room,
        limit: "cgroup memory.limit_in_bytes",
    })
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
pub fn meminfo_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let mut words = line.split_whitespace().skip(1);
    let value: u64 = words.next()?.parse().ok()?;
    let unit = match words.next() {
        Some("kB") => 1024,
        None => 1,
        Some(_) => return None,
    };
    value.checked_mul(unit)
}

/// A value of a cgroup `memory.stat` file (`name value` lines).
fn stat_value(stat: &str, name: &str) -> Option<u64> {
    stat.lines().find_map(|l| {
        let (key, value) = l.split_once(' ')?;
        (key == name).then(|| value.trim().parse().ok()).flatten()
    })
}

/// cgroup v2 room from `memory.max`, `memory.current` and `memory.stat`; `None` when unlimited (`max`) or
/// unreadable.
pub fn v2_room(max: &str, current: &str, stat: &str) -> Option<u64> {
    let max = max.trim();
    if max == "max" {
        return None;
    }
    let max: u64 = max.parse().ok()?;
    let current: u64 = current.trim().parse().ok()?;
    let reclaimable = stat_value(stat, "inactive_file").unwrap_or(0);
    Some(max.saturating_sub(current.saturating_sub(reclaimable)))
}

/// cgroup v1 room from `memory.limit_in_bytes`, `memory.usage_in_bytes` and `memory.stat`; `None` when unlimited
/// (v1 writes "no limit" as a number near 2^63) or unreadable.
pub fn v1_room(limit: &str, usage: &str, stat: &str) -> Option<u64> {
    let mut limit: u64 = limit.trim().parse().ok()?;
    if let Some(hierarchical) = stat_value(stat, "hierarchical_memory_limit") {
        limit = limit.min(hierarchical);
    }
    if limit >= V1_UNLIMITED {
        return None;
    }
    let usage: u64 = usage.trim().parse().ok()?;
    let reclaimable = stat_value(stat, "total_inactive_file").unwrap_or(0);
    Some(limit.saturating_sub(usage.saturating_sub(reclaimable)))
}

/// The process's cgroup paths, from `/proc/self/cgroup`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct OwnCgroups {
    /// The `0::/path` line (cgroup v2).
    pub v2: Option<String>,
    /// The line whose controllers include `memory` (cgroup v1).
    pub v1_memory: Option<String>,
}

impl OwnCgroups {
    pub fn parse(text: &str) -> OwnCgroups {
        let mut own = OwnCgroups::default();
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(id), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            if id == "0" && controllers.is_empty() {
                own.v2 = Some(path.to_string());
            } else if controllers.split(',').any(|c| c == "memory") {
                own.v1_memory = Some(path.to_string());
            }
        }
        own
    }
}

/// Where a cgroup hierarchy is mounted, and which of its cgroups the mount shows as its root (a container sees
/// its own cgroup as `/`).
#[derive(Debug, PartialEq, Eq)]
pub struct CgroupMount {
    pub root: String,
    pub point: PathBuf,
}

impl CgroupMount {
    /// The directory of the cgroup at `path` (as `/proc/self/cgroup` writes it) under this mount.
    pub fn dir_of(&self, path: &str) -> PathBuf {
        let inside = match path.strip_prefix(self.root.as_str()) {
            Some(rest) if self.root != "/" => rest,
            _ => path,
        };
        self.point.join(inside.trim_start_matches('/'))
    }
}

/// The cgroup mounts of `/proc/self/mountinfo`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct CgroupMounts {
    pub v2: Option<CgroupMount>,
    pub v1_memory: Option<CgroupMount>,
}

impl CgroupMounts {
    pub fn parse(text: &str) -> CgroupMounts {
        let mut mounts = CgroupMounts::default();
        for line in text.lines() {
            // `id parent major:minor root mount-point options [optional fields] - fstype source super-options`
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let left: Vec<&str> = left.split(' ').collect();
            let right: Vec<&str> = right.split(' ').collect();
            let (Some(root), Some(point), Some(fstype)) = (left.get(3), left.get(4), right.first())
            else {
                continue;
            };
            let mount = CgroupMount {
                root: unescape(root),
                point: PathBuf::from(unescape(point)),
            };
            let options = right.get(2).copied().unwrap_or("");
            match *fstype {
                "cgroup2" if mounts.v2.is_none() => mounts.v2 = Some(mount),
                "cgroup"
                    if mounts.v1_memory.is_none() && options.split(',').any(|o| o == "memory") =>
                {
                    mounts.v1_memory = Some(mount)
                }
                _ => {}
            }
        }
        mounts
    }
}

/// mountinfo writes spaces, tabs, newlines and backslashes in paths as octal escapes (`\040`).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let text = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(text, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;
