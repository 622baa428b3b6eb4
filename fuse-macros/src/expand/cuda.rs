//! The GPU half of a model's `ModelSpec`: for each plan, the CUDA source from `fuse_kernels::back::cuda` (so a
//! binary built without nvcc can still JIT it with NVRTC), its launch table (encoded, see `fuse_tables`), and the
//! AOT fatbin `fuse_build` wrote when the crate's `build.rs` ran it. Data only: the runtime (`fuse_runtime::cuda`)
//! does the rest.

use std::path::Path;

use proc_macro2::TokenStream;
use quote::quote;

use fuse_kernels::back::cuda::{self, Grid, Role};
use fuse_kernels::back::mono;
use fuse_kernels::plan::{Access, Kernel, Plan};
use fuse_tables::{CudaAccess, CudaGemm, CudaKernel, CudaLaunch, CudaTables, GridSpec, LaunchRole};

fn rt() -> TokenStream {
    quote!(::fuse_runtime::__private)
}

/// `CudaSpec { fused, eager }` for the model's two plans.
pub fn spec(fused: &Plan, eager: &Plan, model: &str) -> TokenStream {
    let rt = rt();
    let fused = program(fused, model, "");
    let eager = program(eager, model, ".eager");
    quote!(#rt::CudaSpec { fused: #fused, eager: #eager })
}

/// `EmbeddedCuda::new(..)`: the sources and the AOT fatbin as literals, the launch and kernel tables encoded.
fn program(plan: &Plan, model: &str, suffix: &str) -> TokenStream {
    let rt = rt();
    let hash = plan.hash;
    let code = cuda::write_all(plan, model);
    let (source, source_bf16, source_f16) = (&code.f32, &code.bf16, &code.f16);
    let tables = fuse_tables::encode(&tables(plan, code.launches));
    let aot = aot(model, suffix);
    quote!(#rt::EmbeddedCuda::new(#hash, #source, #source_bf16, #source_f16, #tables, #aot))
}

fn tables(plan: &Plan, launches: Vec<cuda::Launch>) -> CudaTables {
    let launches = launches
        .into_iter()
        .map(|l| CudaLaunch {
            kernel: l.kernel,
            symbol: l.symbol,
            role: match l.role {
                Role::Kernel => LaunchRole::Kernel,
                Role::GemmEpilogue => LaunchRole::GemmEpilogue,
                Role::GemmFallback => LaunchRole::GemmFallback,
            },
            block: l.block,
            grid: match &l.grid {
                Grid::Elements(n) => GridSpec::Elements(mono(n)),
                Grid::Rows { rows, per_block } => GridSpec::Rows {
                    rows: mono(rows),
                    per_block: *per_block,
                },
                Grid::Tiles { m, n, batch } => GridSpec::Tiles {
                    m: mono(m),
                    n: mono(n),
                    batch: mono(batch),
                },
            },
        })
        .collect();
    let kernels = plan.kernels.iter().map(|k| kernel(plan, k)).collect();
    CudaTables {
        launches,
        kernels,
        f32_outputs: cuda::f32_outputs(plan),
    }
}

fn access(a: &Access) -> CudaAccess {
    CudaAccess {
        offset: a.offset.iter().map(mono).collect(),
        strides: a.strides.iter().map(mono).collect(),
    }
}

fn kernel(plan: &Plan, k: &Kernel) -> CudaKernel {
    // A missing buffer cannot come out of the planner; `usize::MAX` makes the runtime refuse the plan at load.
    let buffers = cuda::param_buffers(plan, k)
        .into_iter()
        .map(|b| b.unwrap_or(usize::MAX))
        .collect();
    let gemm = cuda::gemm(plan, k).map(|g| CudaGemm {
        a: g.a,
        b: g.b,
        m: mono(&g.m),
        n: mono(&g.n),
        k: mono(&g.k),
        batch: g.batch.iter().map(mono).collect(),
        fold_batch: g.fold_batch,
        epilogue: g.epilogue != cuda::GemmEpilogue::None,
        a_access: access(&k.reads[g.a].access),
        b_access: access(&k.reads[g.b].access),
    });
    CudaKernel { buffers, gemm }
}

/// The fatbin `fuse_build::compile()` wrote for this plan, when the crate's build script ran it.
///
/// Cargo gives the compiler (and so this macro) `OUT_DIR` only for a crate with a build script, and
/// `fuse_build` always writes `<Model>[.eager].fatbin` (empty without nvcc) and `.plan_hash` there before the
/// crate compiles. Looking for the files here, rather than behind a cfg set by the build script, keeps crates
/// without a build script free of `unexpected_cfgs` warnings and lets the runtime say which case it is in.
/// `include_bytes!` makes rustc track the files, so a rebuilt fatbin recompiles the crate.
fn aot(model: &str, suffix: &str) -> TokenStream {
    let rt = rt();
    let Some(out_dir) = std::env::var_os("OUT_DIR") else {
        return quote!(None);
    };
    let dir = Path::new(&out_dir).join("fuse");
    let fatbin = dir.join(format!("{model}{suffix}.fatbin"));
    let hash = dir.join(format!("{model}{suffix}.plan_hash"));
    match (fatbin.to_str(), hash.to_str()) {
        (Some(f), Some(h)) if fatbin.is_file() && hash.is_file() => quote!(Some(#rt::AotCode {
            fatbin: include_bytes!(#f),
            plan_hash: include_str!(#h),
        })),
        _ => quote!(None),
    }
}
