//! A stand-in for `libcuda.so` (the CUDA driver API) and `libcublas.so`, over the gpusim interpreter.
//!
//! cudarc (`dynamic-loading`) opens `libcuda.so`, `libcublas.so` and `libcublasLt.so` by name and resolves each
//! symbol on first use; `scripts/gpu-sim.sh` puts this one library under all three names first on
//! `LD_LIBRARY_PATH`, so the runtime, its tests and the examples run unchanged on a simulated sm_90 device. The
//! dynamic loader maps one file once, so the driver and the BLAS stand-in share one [`state::State`].
//!
//! - [`state`]: the one global simulator state (contexts, allocations, modules, streams, events, graphs) and the
//!   error messages `cuGetErrorString` returns;
//! - [`ops`]: the stream operations (copies, memsets, launches, GEMMs), run at enqueue or recorded by capture;
//! - [`fatbin`]: the PTX out of an nvcc fatbin (zstd-compressed entries included);
//! - [`gemm`]: the host GEMM behind the cuBLAS entry points, bounds-checked against the allocation table;
//! - [`driver`], [`blas`]: the exported C functions; [`unsupported`]: every other function cudarc may resolve on
//!   fuse's paths, each a clear `CUDA_ERROR_NOT_SUPPORTED`.
//!
//! Nothing works unless `GPUSIM=1` is set: `cuInit` answers `CUDA_ERROR_NO_DEVICE` otherwise, so a stray copy of
//! this library is never taken for a GPU.

// The exports keep the C API's names and parameter names, and their safety contract is the CUDA documentation's
// for each function; the argument lists are the API's.
#![allow(non_snake_case, clippy::missing_safety_doc, clippy::too_many_arguments)]

pub mod blas;
pub mod driver;
pub mod fatbin;
pub mod gemm;
pub mod ops;
pub mod state;
pub mod unsupported;
