//! Run-time support for models compiled by fuse: host [`Tensor`]s, weight loading, the CPU executor and the plan
//! report. Users depend on this crate only; it re-exports the [`fused_model`] macro.
//!
//! The README shows a whole model; it runs as a doc test of this crate.

mod arena;
pub mod cpu;
pub mod cuda;
pub mod device;
pub mod error;
pub mod exec;
pub mod generate;
mod iota;
pub mod memory;
pub mod model;
pub mod pool;
pub mod report;
pub mod session;
mod strides;
pub mod tensor;
pub mod tensor_file;
pub mod weights;

pub use cpu::CpuPrecision;
pub use device::{Device, GpuOptions, GpuShapes, Precision};
pub use error::{Error, Result};
#[doc(hidden)]
pub use fuse_macros::__fused_model_with;
pub use fuse_macros::fused_model;
pub use model::{CompiledModel, KernelTime, ModelSpec, PlanMode, Profile};
pub use pool::{PoolLimits, PoolStats};
pub use report::PlanReport;
pub use session::Session;
pub use tensor::{DType, Element, Tensor, TensorData};
pub use tensor_file::{read_tensors, save_tensors, TensorFile};

/// Items the generated code refers to. Not a stable API.
#[doc(hidden)]
pub mod __private {
    pub use crate::cpu::attention::{
        attention, AttentionSpec, Operand, Placement, Products, Query,
    };
    pub use crate::cpu::math;
    pub use crate::cpu::par::{
        for_rows, gather_rows, gemm, gemm_with, strided_copy, GemmSpec, RowTask,
    };
    pub use crate::cpu::rows;
    pub use crate::cpu::write_rows::write_rows;
    pub use crate::cuda::spec::{
        AotCode, CudaAccess, CudaGemm, CudaKernel, CudaLaunch, CudaProgram, CudaSpec, EmbeddedCuda,
        GridSpec, LaunchRole,
    };
    pub use crate::exec::{
        dim_arg, BufferKind, BufferSpec, Ctx, DimArg, DimSpec, EmbeddedProgram, IdBound, InputSpec,
        KernelCall, KernelFn, KernelInfo, Mono, OutputSpec, Program,
    };
    pub use crate::weights::{Init, ParamSpec};
}

/// The README's example, compiled and run as a doc test so it cannot go stale.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctest;
