//! The GPU side of a plan's tables: the launch table of `fuse_kernels::back::cuda::launches`, the plan buffers
//! behind each kernel's pointer parameters and the GEMM of each matmul kernel.

use serde::{Deserialize, Serialize};

use crate::Mono;

/// The launch table and kernel descriptions of one plan's GPU code.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CudaTables {
    /// One entry per generated `__global__` function, in plan order.
    pub launches: Vec<CudaLaunch>,
    /// One entry per plan kernel.
    pub kernels: Vec<CudaKernel>,
    /// The output buffers that hold f32 in every storage type: whole numbers a half type could round
    /// (`fuse_kernels::back::cuda::f32_outputs`).
    pub f32_outputs: Vec<usize>,
}

/// What a generated function does for its plan kernel (mirrors `fuse_kernels::back::cuda::Role`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LaunchRole {
    Kernel,
    /// Runs in place on the GEMM result in `out`, after cuBLAS.
    GemmEpilogue,
    /// GEMM and epilogue in one kernel, for when cuBLAS cannot be used.
    GemmFallback,
}

/// One generated `__global__` function and how to launch it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CudaLaunch {
    /// Index into the plan's kernels.
    pub kernel: usize,
    pub symbol: String,
    pub role: LaunchRole,
    pub block: [u32; 3],
    pub grid: GridSpec,
}

/// `gridDim` as a function of the dynamic dims (mirrors `fuse_kernels::back::cuda::Grid`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CudaKernel {
    /// Plan buffers behind the pointer parameters: `out`, then one per read (`ProgramTables::buffers` indices).
    pub buffers: Vec<usize>,
    /// The GEMM, for a matmul kernel.
    pub gemm: Option<CudaGemm>,
}

/// `out[batch.., m, n] = Σ_k A[batch.., m, k] · B[batch.., k, n]` (mirrors `fuse_kernels::back::cuda::GemmDesc`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CudaGemm {
    /// The reads (parameter `in<a>`, `in<b>`) holding A and B.
    pub a: usize,
    pub b: usize,
    pub m: Mono,
    pub n: Mono,
    pub k: Mono,
    /// The output's batch dims, outermost first.
    pub batch: Vec<Mono>,
    /// A's batch nests its rows and B is shared: one GEMM of `Πbatch·m` rows.
    pub fold_batch: bool,
    /// Whether the generated epilogue kernel must run after the GEMM.
    pub epilogue: bool,
    pub a_access: CudaAccess,
    pub b_access: CudaAccess,
}

/// `element(i..) = base[Σ offset + Σ i_k · strides[k]]`, in elements (mirrors `fuse_kernels::plan::Access`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CudaAccess {
    pub offset: Vec<Mono>,
    /// One per dim of `[batch.., rows, cols]`.
    pub strides: Vec<Mono>,
}

impl CudaAccess {
    pub fn offset(&self, dims: &[usize]) -> usize {
        self.offset.iter().map(|m| m.eval(dims)).sum()
    }

    pub fn strides(&self, dims: &[usize]) -> Vec<usize> {
        self.strides.iter().map(|m| m.eval(dims)).collect()
    }
}
