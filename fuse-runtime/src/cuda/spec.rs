//! What the macro embeds for the GPU: per plan, the CUDA source (f32 and bf16 storage), the launch table of
//! `fuse_kernels::back::cuda::launches`, the plan buffers behind each kernel's pointer parameters, the GEMM of
//! each matmul kernel, and the AOT fatbin when the crate's `build.rs` ran `fuse_build::compile()`.
//!
//! Everything here is plain `'static` data, compiled with or without the `cuda` feature, so generated code
//! never depends on how the runtime was built.

use crate::exec::Mono;

/// The GPU side of one model: both plans.
#[derive(Debug)]
pub struct CudaSpec {
    pub fused: CudaProgram,
    pub eager: CudaProgram,
}

/// The GPU code of one plan (fused or eager).
#[derive(Debug)]
pub struct CudaProgram {
    /// The plan the source below was written from; must equal the CPU `Program::plan_hash`.
    pub plan_hash: u64,
    /// `fuse_kernels::back::cuda::write_cuda`: f32 storage, what NVRTC compiles when there is no AOT code.
    pub source: &'static str,
    /// The same kernels with bf16 storage (always JIT-compiled: `fuse_build` builds f32 only).
    pub source_bf16: &'static str,
    /// One entry per generated `__global__` function, in plan order.
    pub launches: &'static [CudaLaunch],
    /// One entry per plan kernel.
    pub kernels: &'static [CudaKernel],
    /// nvcc's fatbin from `fuse_build`; `None` when the crate's build script did not run it.
    pub aot: Option<AotCode>,
}

/// The files `fuse_build` wrote for this plan (`OUT_DIR/fuse/<Model>[.eager].{fatbin,plan_hash}`).
#[derive(Debug)]
pub struct AotCode {
    /// Empty when the build had no nvcc.
    pub fatbin: &'static [u8],
    /// 16 lowercase hex digits: the plan the build script compiled.
    pub plan_hash: &'static str,
}

/// What a generated function does for its plan kernel (mirrors `fuse_kernels::back::cuda::Role`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchRole {
    Kernel,
    /// Runs in place on the GEMM result in `out`, after cuBLAS.
    GemmEpilogue,
    /// GEMM and epilogue in one kernel, for when cuBLAS cannot be used.
    GemmFallback,
}

/// One generated `__global__` function and how to launch it.
#[derive(Debug)]
pub struct CudaLaunch {
    /// Index into the plan's kernels.
    pub kernel: usize,
    pub symbol: &'static str,
    pub role: LaunchRole,
    pub block: [u32; 3],
    pub grid: GridSpec,
}

/// `gridDim` as a function of the dynamic dims (mirrors `fuse_kernels::back::cuda::Grid`).
#[derive(Clone, Copy, Debug)]
pub enum GridSpec {
    /// A grid-stride loop over this many elements.
    Elements(Mono),
    /// `per_block` rows per block.
    Rows { rows: Mono, per_block: u32 },
    /// GEMM tiles over `m` × `n`, and the batch on `z`.
    Tiles { m: Mono, n: Mono, batch: Mono },
}

/// Threads per block of elementwise kernels, the grid-stride cap, the fallback GEMM's tile and the
/// `gridDim.y/z` limit: the writer's constants (`fuse_kernels::back::cuda`), which `tests/tests/gpu.rs` checks
/// against `Grid::dims` for every example model.
const ELEMENT_THREADS: usize = 256;
const MAX_STRIDE_BLOCKS: usize = 4096;
const TILE: usize = 64;
const MAX_GRID_YZ: usize = 65_535;

impl GridSpec {
    /// `gridDim` at these dynamic dims; every axis at least 1 (kernels bound-check).
    pub fn dims(&self, dims: &[usize]) -> [u32; 3] {
        let clamp = |n: usize, max: usize| n.clamp(1, max) as u32;
        let blocks = |m: &Mono, per: usize| m.eval(dims).div_ceil(per.max(1));
        match self {
            GridSpec::Elements(n) => [clamp(blocks(n, ELEMENT_THREADS), MAX_STRIDE_BLOCKS), 1, 1],
            GridSpec::Rows { rows, per_block } => [
                clamp(blocks(rows, *per_block as usize), i32::MAX as usize),
                1,
                1,
            ],
            GridSpec::Tiles { m, n, batch } => [
                clamp(blocks(m, TILE), i32::MAX as usize),
                clamp(blocks(n, TILE), MAX_GRID_YZ),
                clamp(batch.eval(dims), MAX_GRID_YZ),
            ],
        }
    }
}

/// One plan kernel on the GPU.
#[derive(Debug)]
pub struct CudaKernel {
    /// Plan buffers behind the pointer parameters: `out`, then one per read (`Program::buffers` indices).
    pub buffers: &'static [usize],
    /// The GEMM, for a matmul kernel.
    pub gemm: Option<CudaGemm>,
}

/// `out[batch.., m, n] = Σ_k A[batch.., m, k] · B[batch.., k, n]` (mirrors `fuse_kernels::back::cuda::GemmDesc`).
#[derive(Debug)]
pub struct CudaGemm {
    /// The reads (parameter `in<a>`, `in<b>`) holding A and B.
    pub a: usize,
    pub b: usize,
    pub m: Mono,
    pub n: Mono,
    pub k: Mono,
    /// The output's batch dims, outermost first.
    pub batch: &'static [Mono],
    /// A's batch nests its rows and B is shared: one GEMM of `Πbatch·m` rows.
    pub fold_batch: bool,
    /// Whether the generated epilogue kernel must run after the GEMM.
    pub epilogue: bool,
    pub a_access: CudaAccess,
    pub b_access: CudaAccess,
}

/// `element(i..) = base[Σ offset + Σ i_k · strides[k]]`, in elements (mirrors `fuse_kernels::plan::Access`).
#[derive(Debug)]
pub struct CudaAccess {
    pub offset: &'static [Mono],
    /// One per dim of `[batch.., rows, cols]`.
    pub strides: &'static [Mono],
}

impl CudaAccess {
    pub fn offset(&self, dims: &[usize]) -> usize {
        self.offset.iter().map(|m| m.eval(dims)).sum()
    }

    pub fn strides(&self, dims: &[usize]) -> Vec<usize> {
        self.strides.iter().map(|m| m.eval(dims)).collect()
    }
}
