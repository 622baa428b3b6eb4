//! gpusim: runs the PTX that nvcc and NVRTC emit for fuse's kernels on the CPU, for correctness only.
//!
//! - [`ptx`]: PTX text → a decoded module (parsed once; no string work per executed instruction);
//! - [`exec`]: one launch = every block of the grid, each thread with its own registers; warps meet at
//!   `shfl.sync`, blocks at `bar.sync`; every global access checked against [`memory::DeviceMemory`];
//! - [`memory`]: the device allocation table (addresses, bytes, which bytes were ever written);
//! - [`error`]: every failure as a typed [`SimError`] naming kernel, block, thread, PTX line and address.
//!
//! What a launch checks: out-of-bounds and misaligned global, shared, local and parameter accesses; reads of
//! never-written global bytes; shared-memory races between barriers (only `bar.sync` orders threads, see
//! `exec::races`); barriers and shuffles that not every required thread reaches (an error, never a hang). An
//! instruction the decoder does not know is [`SimError::UnsupportedInstruction`], never skipped.
//!
//! What it cannot tell: timing and performance, caches and memory-ordering effects (threads run one after
//! another, so a missing fence between blocks goes unnoticed, and global memory is not race-checked), races
//! through atomics, and how the GPU's approximate instructions round (they are computed exactly here; see
//! `exec::float` for the documented GPU error bounds a comparison must allow).
//!
//! The C ABI (`libcuda.so`/`libcublas.so` stand-ins) lives in the `gpusim-driver` crate on top of this one.

pub mod error;
pub mod exec;
pub mod memory;
pub mod ptx;

pub use error::{SimError, SimResult};
pub use exec::{launch, launch_with_stats, LaunchConfig, LaunchStats};
pub use memory::DeviceMemory;
pub use ptx::{Kernel, Module, ParamInfo};
