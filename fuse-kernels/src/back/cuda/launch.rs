//! Launch descriptors: for each generated kernel its symbol, block and grid (functions of the dynamic dims), and
//! which plan buffers its pointer parameters are. The runtime needs nothing else to launch a generated module.

use super::matmul::{self, GEMM_THREADS, TILE_M, TILE_N};
use super::{attention, elementwise, launch_symbol, row, shared_kernels};
use crate::ir::{Dim, Op};
use crate::plan::{Kernel, KernelKind, Plan};

pub use matmul::{GemmDesc, GemmEpilogue};

/// Grid-stride loops need no more blocks than this to fill an H100/H200 several times over; more only adds
/// scheduling overhead.
const MAX_STRIDE_BLOCKS: usize = 4096;
/// `gridDim.y` / `gridDim.z` limit. The GEMM loops over batches beyond it; its column tiles (`y`) stay below it
/// for any `n` under four million.
const MAX_GRID_YZ: usize = 65_535;

/// What a generated function does for its plan kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The whole kernel (elementwise, row, gather, concat).
    Kernel,
    /// A matmul kernel's epilogue, run in place on the GEMM result in `out`.
    GemmEpilogue,
    /// The fallback GEMM of a matmul kernel, epilogue included (for use without cuBLAS).
    GemmFallback,
}

/// How many blocks to launch, as a function of the dynamic dims.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Grid {
    /// A grid-stride loop over this many elements: any grid is correct, this is only the suggested one.
    Elements(Dim),
    /// One row per `threads` (see the block); `per_block` rows per block.
    Rows { rows: Dim, per_block: u32 },
    /// GEMM tiles: `x` over rows of `m`, `y` over columns of `n`, `z` over the batch (capped, then looped).
    Tiles { m: Dim, n: Dim, batch: Dim },
}

impl Grid {
    /// `gridDim` for the given dynamic dim values (every dim at least 1: kernels bound-check, so an empty
    /// tensor still gets a valid launch).
    pub fn dims(&self, dyn_values: &[usize]) -> [u32; 3] {
        let clamp = |n: usize, max: usize| n.clamp(1, max) as u32;
        match self {
            Grid::Elements(n) => {
                let blocks = n.eval(dyn_values).div_ceil(elementwise::THREADS as usize);
                [clamp(blocks, MAX_STRIDE_BLOCKS), 1, 1]
            }
            Grid::Rows { rows, per_block } => [
                clamp(
                    rows.eval(dyn_values).div_ceil(*per_block as usize),
                    i32::MAX as usize,
                ),
                1,
                1,
            ],
            Grid::Tiles { m, n, batch } => [
                clamp(
                    m.eval(dyn_values).div_ceil(TILE_M as usize),
                    i32::MAX as usize,
                ),
                clamp(n.eval(dyn_values).div_ceil(TILE_N as usize), MAX_GRID_YZ),
                clamp(batch.eval(dyn_values), MAX_GRID_YZ),
            ],
        }
    }
}

/// One generated `__global__` function.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Launch {
    /// Index into `plan.kernels`.
    pub kernel: usize,
    pub symbol: String,
    pub role: Role,
    pub block: [u32; 3],
    pub grid: Grid,
}

/// What to launch for each plan kernel, in plan order. A matmul kernel has a [`Role::GemmEpilogue`] entry only
/// when it has an epilogue, and always a [`Role::GemmFallback`] entry. A kernel whose code equals an earlier
/// kernel's (the same layer repeated) launches the earlier kernel's symbol: the source defines it once.
pub fn launches(plan: &Plan, model_name: &str) -> Vec<Launch> {
    launches_with(plan, model_name, &shared_kernels(plan))
}

/// [`launches`] for the kernel sharing `shared` ([`shared_kernels`]).
pub(crate) fn launches_with(
    plan: &Plan,
    model_name: &str,
    shared: &[Option<usize>],
) -> Vec<Launch> {
    let g = &plan.graph;
    let mut out = Vec::new();
    for (index, k) in plan.kernels.iter().enumerate() {
        let symbol = launch_symbol(plan, model_name, shared, index);
        let elements = || Grid::Elements(g.ty(k.output).shape.numel());
        let whole = |block: [u32; 3], grid: Grid| Launch {
            kernel: index,
            symbol: symbol.clone(),
            role: Role::Kernel,
            block,
            grid,
        };
        match &k.kind {
            KernelKind::Elementwise
            | KernelKind::Piecewise(_)
            | KernelKind::Gather { .. }
            | KernelKind::Concat { .. } => {
                out.push(whole([elementwise::THREADS, 1, 1], elements()));
            }
            KernelKind::Write { node } => {
                // The loop runs over the value written, not over the whole state (a KV cache of every position).
                let Op::Write { value, .. } = &g.node(*node).op else {
                    continue;
                };
                let grid = Grid::Elements(g.ty(*value).shape.numel());
                out.push(whole([elementwise::THREADS, 1, 1], grid));
            }
            KernelKind::Row { anchor } => {
                let Some((_, _, len, rows)) = row::geometry(g, *anchor) else {
                    continue;
                };
                let cfg = row::config(&len);
                out.push(whole(
                    [cfg.threads, cfg.rows_per_block, 1],
                    Grid::Rows {
                        rows,
                        per_block: cfg.rows_per_block,
                    },
                ));
            }
            KernelKind::RowRegion => {
                let dims = &g.ty(k.output).shape.0;
                let Some((len, outer)) = dims.split_last() else {
                    continue;
                };
                let rows = outer.iter().fold(Dim::fixed(1), |acc, d| acc.mul(d));
                let cfg = row::config(len);
                out.push(whole(
                    [cfg.threads, cfg.rows_per_block, 1],
                    Grid::Rows {
                        rows,
                        per_block: cfg.rows_per_block,
                    },
                ));
            }
            KernelKind::Attention(att) => {
                out.push(whole(
                    [32, attention::ROWS_PER_BLOCK, 1],
                    Grid::Rows {
                        rows: attention::rows(g, att),
                        per_block: attention::ROWS_PER_BLOCK,
                    },
                ));
            }
            KernelKind::MatMul { .. } => {
                let Some(desc) = matmul::describe(g, k) else {
                    continue;
                };
                if desc.epilogue != GemmEpilogue::None {
                    out.push(Launch {
                        role: Role::GemmEpilogue,
                        ..whole([elementwise::THREADS, 1, 1], elements())
                    });
                }
                let (m, batch) = desc.launch_shape();
                out.push(Launch {
                    kernel: index,
                    symbol: format!("{symbol}_gemm"),
                    role: Role::GemmFallback,
                    block: [GEMM_THREADS, 1, 1],
                    grid: Grid::Tiles {
                        m,
                        n: desc.n,
                        batch,
                    },
                });
            }
        }
    }
    out
}

/// The plan buffers behind a kernel's pointer parameters: `out` first, then one per read (the buffer of the
/// read's base). `None` would mean a plan without storage for a value it reads, which [`crate::plan::plan`]
/// never builds.
pub fn param_buffers(plan: &Plan, k: &Kernel) -> Vec<Option<usize>> {
    let mut ids = vec![plan.buffer_of(k.output)];
    ids.extend(k.reads.iter().map(|r| plan.buffer_of(r.access.base)));
    ids
}

/// The GEMM a matmul kernel needs from cuBLASLt, and whether its epilogue is one cuBLASLt applies itself.
pub fn gemm(plan: &Plan, k: &Kernel) -> Option<GemmDesc> {
    matmul::describe(&plan.graph, k)
}
