//! What the macro embeds for the GPU: per plan, the CUDA source (f32, bf16 and f16 storage), the launch table of
//! `fuse_kernels::back::cuda::launches`, the plan buffers behind each kernel's pointer parameters, the GEMM of
//! each matmul kernel, and the AOT fatbin when the crate's `build.rs` ran `fuse_build::compile()`.
//!
//! Everything here is plain `'static` data, compiled with or without the `cuda` feature, so generated code
//! never depends on how the runtime was built.

use std::sync::OnceLock;

pub use fuse_tables::{
    CudaAccess, CudaGemm, CudaKernel, CudaLaunch, CudaTables, GridSpec, LaunchRole,
};

use crate::error::{Error, Result};

/// The GPU side of one model: both plans.
#[derive(Debug)]
pub struct CudaSpec {
    pub fused: EmbeddedCuda,
    pub eager: EmbeddedCuda,
}

/// The GPU code of one plan as the macro embeds it: the sources and fatbin as literals, the tables
/// (`fuse_tables::CudaTables`) still encoded. [`EmbeddedCuda::decode`] makes the [`CudaProgram`], once.
#[derive(Debug)]
pub struct EmbeddedCuda {
    /// The plan the source below was written from; must equal the CPU `Program::plan_hash`.
    pub plan_hash: u64,
    /// `fuse_kernels::back::cuda::write_cuda`: f32 storage, what NVRTC compiles when there is no AOT code.
    pub source: &'static str,
    /// The same kernels with bf16 storage (always JIT-compiled: `fuse_build` builds f32 only).
    pub source_bf16: &'static str,
    /// The same kernels with f16 storage (JIT-compiled too).
    pub source_f16: &'static str,
    /// `fuse_tables::encode` of the plan's `CudaTables`.
    pub tables: &'static str,
    /// nvcc's fatbin from `fuse_build`; `None` when the crate's build script did not run it.
    pub aot: Option<AotCode>,
    decoded: OnceLock<std::result::Result<CudaProgram, String>>,
}

impl EmbeddedCuda {
    pub const fn new(
        plan_hash: u64,
        source: &'static str,
        source_bf16: &'static str,
        source_f16: &'static str,
        tables: &'static str,
        aot: Option<AotCode>,
    ) -> Self {
        EmbeddedCuda {
            plan_hash,
            source,
            source_bf16,
            source_f16,
            tables,
            aot,
            decoded: OnceLock::new(),
        }
    }

    /// The plan's GPU code with its tables decoded; [`Error::PlanTables`] (for `model`) when they do not decode.
    pub fn decode(&'static self, model: &str, plan: &'static str) -> Result<&'static CudaProgram> {
        let decoded = self.decoded.get_or_init(|| {
            let tables: CudaTables = fuse_tables::decode(self.tables)?;
            Ok(CudaProgram {
                plan_hash: self.plan_hash,
                source: self.source,
                source_bf16: self.source_bf16,
                source_f16: self.source_f16,
                launches: tables.launches,
                kernels: tables.kernels,
                f32_outputs: tables.f32_outputs,
                aot: self.aot,
            })
        });
        decoded.as_ref().map_err(|why| Error::PlanTables {
            model: model.into(),
            plan,
            why: format!("GPU tables: {why}"),
        })
    }
}

/// The GPU code of one plan (fused or eager), decoded.
#[derive(Clone, Debug)]
pub struct CudaProgram {
    /// The plan the source below was written from; must equal the CPU `Program::plan_hash`.
    pub plan_hash: u64,
    pub source: &'static str,
    pub source_bf16: &'static str,
    pub source_f16: &'static str,
    /// One entry per generated `__global__` function, in plan order.
    pub launches: Vec<CudaLaunch>,
    /// One entry per plan kernel.
    pub kernels: Vec<CudaKernel>,
    /// The output buffers that hold f32 whatever the storage type (whole numbers a half type could round).
    pub f32_outputs: Vec<usize>,
    pub aot: Option<AotCode>,
}

/// The files `fuse_build` wrote for this plan (`OUT_DIR/fuse/<Model>[.eager].{fatbin,plan_hash}`).
#[derive(Clone, Copy, Debug)]
pub struct AotCode {
    /// Empty when the build had no nvcc.
    pub fatbin: &'static [u8],
    /// 16 lowercase hex digits: the plan the build script compiled.
    pub plan_hash: &'static str,
}
