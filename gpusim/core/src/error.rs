//! Typed failures of the simulator. A check that fires is an error naming where it happened, never a log line.

use std::fmt;

/// Where in a launch something happened: kernel, block, thread and the PTX source line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Site {
    pub kernel: String,
    pub block: [u32; 3],
    pub thread: [u32; 3],
    /// 1-based line of the PTX text the instruction came from.
    pub ptx_line: u32,
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [bx, by, bz] = self.block;
        let [tx, ty, tz] = self.thread;
        write!(
            f,
            "kernel `{}`, block ({bx},{by},{bz}), thread ({tx},{ty},{tz}), PTX line {}",
            self.kernel, self.ptx_line
        )
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error("PTX line {line}: {message}")]
    Parse { line: u32, message: String },
    #[error("PTX line {line}: instruction `{instruction}` is not supported by the simulator")]
    UnsupportedInstruction { line: u32, instruction: String },
    #[error("no kernel named `{0}` in the module")]
    NoSuchKernel(String),
    #[error("out-of-bounds {access} of {bytes} byte(s) at 0x{address:x} ({site}): {detail}")]
    OutOfBounds {
        access: &'static str,
        bytes: u32,
        address: u64,
        site: Site,
        detail: String,
    },
    #[error("misaligned {access} of {bytes} byte(s) at 0x{address:x} ({site})")]
    Misaligned {
        access: &'static str,
        bytes: u32,
        address: u64,
        site: Site,
    },
    #[error("shared-memory race on bytes [{offset}, {end}) ({site}): {detail}", end = offset + u64::from(*bytes))]
    SharedRace {
        offset: u64,
        bytes: u32,
        site: Site,
        detail: String,
    },
    #[error("read of never-written device memory at 0x{address:x} ({site})")]
    UninitializedRead { address: u64, site: Site },
    #[error(
        "barrier or shuffle not reached by every thread that must reach it ({site}): {detail}"
    )]
    Divergence { site: Site, detail: String },
    #[error("a thread ran {executed} instructions without reaching a barrier or exiting ({site}): an endless loop?")]
    Runaway { executed: u64, site: Site },
    #[error("invalid launch of `{kernel}`: {detail}")]
    InvalidLaunch { kernel: String, detail: String },
    #[error("device memory: {0}")]
    Memory(String),
    #[error("{0}")]
    Other(String),
}

pub type SimResult<T> = Result<T, SimError>;
