//! The CPU writer: a validated [`Plan`] → Rust tokens for its kernels and the static `Program` table the runtime
//! executes (buffers, arena slots, kernel list, report data).
//!
//! Each kernel function has the signature `fn(ctx: &Ctx, bufs: &[usize])`: `bufs` is the launch's table of plan
//! buffers, the output first and then one per read ([`launch_buffers`]). Kernels that differ only in those
//! buffers therefore have the same code, and one function serves them all (`dedup`); the `Program` lists one
//! `KernelCall` (function + buffer table) per plan kernel.

mod attention;
mod dedup;
mod expr;
mod kernels;

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use crate::ir::{DType, Dim};
use crate::plan::{kernel_bytes, Kernel, Mode, Plan, Storage};

fn mono(d: &Dim) -> TokenStream {
    let coeff = d.coeff;
    let syms = d.syms.iter().map(|&s| s as usize);
    quote!(::fuse_runtime::__private::Mono { coeff: #coeff, syms: &[#(#syms),*] })
}

fn dtype(d: DType) -> TokenStream {
    match d {
        DType::I64 => quote!(::fuse_runtime::DType::I64),
        DType::F32 | DType::Bool => quote!(::fuse_runtime::DType::F32),
    }
}

/// Items (kernel functions) and an expression of type `fuse_runtime::__private::Program` for `plan`.
/// `model` names the model in reports; kernel functions are prefixed with the plan mode.
pub fn write_program(plan: &Plan, model: &str) -> (TokenStream, TokenStream) {
    let g = &plan.graph;
    let rt = quote!(::fuse_runtime::__private);
    let prefix = match plan.mode {
        Mode::Fused => "fused",
        Mode::Eager => "eager",
    };
    let bodies = plan
        .kernels
        .iter()
        .map(|k| dedup::canonical(kernels::kernel_body(plan, k)))
        .collect();
    let (function_of, functions) = dedup::distinct(bodies);
    // A function is named after the first kernel that uses it.
    let names: Vec<_> = functions
        .iter()
        .map(|(first, _)| format_ident!("{}_{}", prefix, plan.kernels[*first].name))
        .collect();
    let items = functions.iter().zip(&names).map(|((_, body), name)| {
        quote! {
            #[allow(unused_variables, unused_mut, clippy::all)]
            fn #name(ctx: &#rt::Ctx<'_>, bufs: &[usize]) {
                let d = ctx.dims();
                #body
            }
        }
    });
    let mut calls = Vec::new();
    let mut infos = Vec::new();
    for (k, &f) in plan.kernels.iter().zip(&function_of) {
        let name = &names[f];
        let buffers = launch_buffers(plan, k);
        calls.push(quote!(#rt::KernelCall { run: #name, buffers: &[#(#buffers),*] }));
        let kname = &k.name;
        let kind = k.kind.name();
        // A kernel that computes nothing materialises a view: call it what it is.
        let ops: Vec<String> = if k.nodes.is_empty() {
            vec!["copy".to_string()]
        } else {
            k.nodes.iter().map(|&n| g.node(n).op.name()).collect()
        };
        let bytes = kernel_bytes(g, k).iter().map(mono).collect::<Vec<_>>();
        infos.push(quote!(#rt::KernelInfo { name: #kname, kind: #kind, ops: &[#(#ops),*], bytes: &[#(#bytes),*] }));
    }
    let buffers = (0..plan.buffers.len()).map(|b| {
        let (node, _) = plan.buffers[b];
        let ty = g.ty(node);
        let kind = match plan.storage_of(b) {
            Storage::Input(i) => {
                let i = i as usize;
                quote!(#rt::BufferKind::Input(#i))
            }
            Storage::Param(i) => {
                let i = i as usize;
                quote!(#rt::BufferKind::Param(#i))
            }
            Storage::Arena(s) => quote!(#rt::BufferKind::Arena(#s)),
            Storage::Output(i) => quote!(#rt::BufferKind::Output(#i)),
        };
        let dt = dtype(ty.dtype);
        let numel = mono(&ty.shape.numel());
        quote!(#rt::BufferSpec { kind: #kind, dtype: #dt, numel: #numel })
    });
    let slots = plan.memory.slots.iter().map(|s| mono(&s.bytes()));
    let outputs = g.outputs.iter().map(|&o| {
        let buffer = plan.buffer_of(o).unwrap_or(usize::MAX);
        let dims = g.ty(o).shape.0.iter().map(mono);
        quote!(#rt::OutputSpec { buffer: #buffer, dims: &[#(#dims),*] })
    });
    let mode = prefix;
    let hash = plan.hash;
    let dump = crate::plan::dump(plan);
    let dot = crate::plan::dot(plan);
    let refusals: Vec<String> = plan
        .refusals
        .iter()
        .map(|r| {
            format!(
                "{} {} -> {} {}: {}",
                r.producer,
                g.node(r.producer).op.name(),
                r.consumer,
                g.node(r.consumer).op.name(),
                r.why
            )
        })
        .collect();
    let program = quote! {
        #rt::Program {
            model: #model,
            mode: #mode,
            plan_hash: #hash,
            buffers: &[#(#buffers),*],
            slots: &[#(#slots),*],
            kernels: &[#(#calls),*],
            kernel_info: &[#(#infos),*],
            outputs: &[#(#outputs),*],
            refusals: &[#(#refusals),*],
            dump: #dump,
            dot: #dot,
        }
    };
    (quote!(#(#items)*), program)
}

/// The plan buffers a kernel's function reads through its `bufs` table: the output, then the base buffer of
/// each read in [`Kernel::reads`] order.
pub fn launch_buffers(plan: &Plan, k: &Kernel) -> Vec<usize> {
    let buffer = |node| plan.buffer_of(node).unwrap_or(usize::MAX);
    std::iter::once(buffer(k.output))
        .chain(k.reads.iter().map(|r| buffer(r.access.base)))
        .collect()
}
