//! gpusim: runs the PTX that nvcc and NVRTC emit for fuse's kernels on the CPU, for correctness only.
//!
//! - [`ptx`]: PTX text → a decoded module (parsed once; no string work per executed instruction);
//! - [`exec`]: one launch = every block of the grid, each thread with its own registers; warps meet at
//!   `shfl.sync`, blocks at `bar.sync`; every global access checked against [`memory::DeviceMemory`];
//! - [`memory`]: the device allocation table (addresses, bytes, which bytes were ever written);
//! - [`error`]: every failure as a typed [`SimError`] naming kernel, block, thread, PTX line and address.
//!
//! The C ABI (`libcuda.so`/`libcublas.so` stand-ins) lives in the `gpusim-driver` crate on top of this one.

pub mod error;
pub mod exec;
pub mod memory;
pub mod ptx;

pub use error::{SimError, SimResult};
pub use exec::{launch, LaunchConfig};
pub use memory::DeviceMemory;
pub use ptx::{Kernel, Module, ParamInfo};
