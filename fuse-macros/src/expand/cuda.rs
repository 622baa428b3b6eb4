//! The GPU half of a model's `ModelSpec`: for each plan, the CUDA source from `fuse_kernels::back::cuda` (so a
//! binary built without nvcc can still JIT it with NVRTC), its launch table, and the AOT fatbin `fuse_build`
//! wrote when the crate's `build.rs` ran it. Data only: the runtime (`fuse_runtime::cuda`) does the rest.

use std::path::Path;

use proc_macro2::TokenStream;
use quote::quote;

use fuse_kernels::back::cuda::{self, Grid, Options, Role, StorageType};
use fuse_kernels::ir::Dim;
use fuse_kernels::plan::{Access, Kernel, Plan};

fn rt() -> TokenStream {
    quote!(::fuse_runtime::__private)
}

fn mono(d: &Dim) -> TokenStream {
    let rt = rt();
    let coeff = d.coeff;
    let syms = d.syms.iter().map(|&s| s as usize);
    quote!(#rt::Mono { coeff: #coeff, syms: &[#(#syms),*] })
}

/// `CudaSpec { fused, eager }` for the model's two plans.
pub fn spec(fused: &Plan, eager: &Plan, model: &str) -> TokenStream {
    let rt = rt();
    let fused = program(fused, model, "");
    let eager = program(eager, model, ".eager");
    quote!(#rt::CudaSpec { fused: #fused, eager: #eager })
}

fn program(plan: &Plan, model: &str, suffix: &str) -> TokenStream {
    let rt = rt();
    let hash = plan.hash;
    let source = cuda::write_cuda(plan, model);
    let bf16 = Options {
        storage: StorageType::Bf16,
    };
    let source_bf16 = cuda::write_cuda_with(plan, model, &bf16);
    let launches = cuda::launches(plan, model).into_iter().map(|l| {
        let (kernel, symbol) = (l.kernel, &l.symbol);
        let role = match l.role {
            Role::Kernel => quote!(Kernel),
            Role::GemmEpilogue => quote!(GemmEpilogue),
            Role::GemmFallback => quote!(GemmFallback),
        };
        let [bx, by, bz] = l.block;
        let grid = match &l.grid {
            Grid::Elements(n) => {
                let n = mono(n);
                quote!(#rt::GridSpec::Elements(#n))
            }
            Grid::Rows { rows, per_block } => {
                let rows = mono(rows);
                quote!(#rt::GridSpec::Rows { rows: #rows, per_block: #per_block })
            }
            Grid::Tiles { m, n, batch } => {
                let (m, n, batch) = (mono(m), mono(n), mono(batch));
                quote!(#rt::GridSpec::Tiles { m: #m, n: #n, batch: #batch })
            }
        };
        quote!(#rt::CudaLaunch {
            kernel: #kernel,
            symbol: #symbol,
            role: #rt::LaunchRole::#role,
            block: [#bx, #by, #bz],
            grid: #grid,
        })
    });
    let kernels = plan.kernels.iter().map(|k| kernel(plan, k));
    let aot = aot(model, suffix);
    quote!(#rt::CudaProgram {
        plan_hash: #hash,
        source: #source,
        source_bf16: #source_bf16,
        launches: &[#(#launches),*],
        kernels: &[#(#kernels),*],
        aot: #aot,
    })
}

fn access(a: &Access) -> TokenStream {
    let rt = rt();
    let offset = a.offset.iter().map(mono);
    let strides = a.strides.iter().map(mono);
    quote!(#rt::CudaAccess { offset: &[#(#offset),*], strides: &[#(#strides),*] })
}

fn kernel(plan: &Plan, k: &Kernel) -> TokenStream {
    let rt = rt();
    // A missing buffer cannot come out of the planner; `usize::MAX` makes the runtime refuse the plan at load.
    let buffers = cuda::param_buffers(plan, k)
        .into_iter()
        .map(|b| b.unwrap_or(usize::MAX));
    let gemm = match cuda::gemm(plan, k) {
        Some(g) => {
            let (a, b, fold) = (g.a, g.b, g.fold_batch);
            let (m, n, kk) = (mono(&g.m), mono(&g.n), mono(&g.k));
            let batch = g.batch.iter().map(mono);
            let epilogue = g.epilogue != cuda::GemmEpilogue::None;
            let (a_access, b_access) = (access(&k.reads[a].access), access(&k.reads[b].access));
            quote!(Some(#rt::CudaGemm {
                a: #a, b: #b, m: #m, n: #n, k: #kk, batch: &[#(#batch),*], fold_batch: #fold,
                epilogue: #epilogue, a_access: #a_access, b_access: #b_access,
            }))
        }
        None => quote!(None),
    };
    quote!(#rt::CudaKernel { buffers: &[#(#buffers),*], gemm: #gemm })
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
