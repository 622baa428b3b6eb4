//! The GPU executor (cargo feature `cuda`, on by default), on cudarc's safe layer with every library opened at run
//! time: the crate builds and runs where no CUDA is installed, and only a [`crate::Device::cuda`] probe finds out.
//!
//! A model placed on a GPU ([`crate::CompiledModel::to_device`]):
//! - loads its kernels once per plan: the AOT fatbin `fuse_build` made when it has code for this GPU, else the
//!   embedded source JIT-compiled by NVRTC (`load.rs`); a plan hash that differs from the model's is
//!   [`crate::Error::StaleKernels`];
//! - uploads the weights once;
//! - per shape (the dynamic dims of a call), allocates the arena with the CPU plan's slot layout
//!   ([`crate::exec::Program::layout`]), the inputs and the outputs, and builds the launch list: each kernel of
//!   `launches()` with the dynamic dims as `long long` parameters, each matmul as cuBLAS calls (`blas.rs`) plus the
//!   generated epilogue, or the generated fallback GEMM when cuBLAS is missing or cannot read a layout;
//! - runs that list on the first calls of a shape and, on the second, captures it as a CUDA graph, which later
//!   calls replay between the input upload and the output download (a shape called once, such as a decode step
//!   at a new `past`, never pays for a graph);
//! - keeps a session's `#[state]` buffers on the device from its first call there (`states.rs`): the write
//!   kernels update them in place, and the session's host copy is refreshed only when asked for.
//!
//! [`spec`] and `blas.rs` are plain data and arithmetic, built with or without the feature.

// Only the GPU executor plans cuBLAS calls; without the `cuda` feature the planner is built for its tests alone.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
mod blas;
pub mod spec;

#[cfg(feature = "cuda")]
mod buffers;
#[cfg(feature = "cuda")]
mod gpu;
#[cfg(feature = "cuda")]
mod load;
#[cfg(feature = "cuda")]
mod shape;
#[cfg(feature = "cuda")]
mod states;
#[cfg(feature = "cuda")]
mod sys;

pub use spec::CudaSpec;

#[cfg(feature = "cuda")]
pub(crate) use gpu::{copy_bandwidth, GpuModel};
#[cfg(feature = "cuda")]
pub(crate) use states::DeviceStates;
#[cfg(feature = "cuda")]
pub(crate) use sys::{library_present, Library};

/// Without the `cuda` feature no GPU model can exist: this uninhabited stand-in keeps the callers free of cfgs.
#[cfg(not(feature = "cuda"))]
pub(crate) enum GpuModel {}

#[cfg(not(feature = "cuda"))]
impl GpuModel {
    pub(crate) fn run(
        &self,
        _: crate::PlanMode,
        _: &[usize],
        _: &[&crate::Tensor],
        _: &mut Vec<crate::Tensor>,
    ) -> crate::Result<()> {
        match *self {}
    }

    pub(crate) fn run_session(
        &self,
        _: crate::PlanMode,
        _: &[usize],
        _: &[&crate::Tensor],
        _: &mut Vec<crate::Tensor>,
        _: &mut crate::Session,
    ) -> crate::Result<()> {
        match *self {}
    }

    pub(crate) fn device(&self) -> crate::device::CudaDevice {
        match *self {}
    }

    pub(crate) fn report(&self) -> Vec<String> {
        match *self {}
    }

    pub(crate) fn time(
        &self,
        _: crate::PlanMode,
        _: &[usize],
        _: &[&crate::Tensor],
        _: usize,
    ) -> crate::Result<crate::device::GpuTiming> {
        match *self {}
    }

    pub(crate) fn shapes(&self, _: crate::PlanMode) -> crate::Result<crate::device::GpuShapes> {
        match *self {}
    }
}
