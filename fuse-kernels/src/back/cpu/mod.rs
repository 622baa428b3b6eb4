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
mod piecewise;
mod row_region;

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

use fuse_tables::{
    BufferKind, BufferSpec, KernelCall, KernelInfo, Mono, OutputSpec, ProgramTables, SliceBound,
    StateSpec, SumDim, ZeroWith,
};

use super::mono;
use crate::ir::{DType, NodeId, Op};
use crate::plan::{kernel_bytes, Kernel, Mode, Plan, Storage};
use crate::zero_dims::ZeroRule;

fn dtype(d: DType) -> fuse_tables::DType {
    match d {
        DType::I64 => fuse_tables::DType::I64,
        DType::F32 | DType::Bool => fuse_tables::DType::F32,
    }
}

/// What the CPU writer makes of one plan.
pub struct CpuProgram {
    /// One kernel function per distinct kernel.
    pub items: TokenStream,
    /// An expression of type `fuse_runtime::__private::EmbeddedProgram` naming `items`, with `tables` in it as one
    /// encoded string.
    pub program: TokenStream,
    /// The plan's data for the runtime: buffers, arena slots, kernel calls, report data.
    pub tables: ProgramTables,
}

/// Writes `plan`. `model` names the model in reports; kernel functions are prefixed with the plan mode.
pub fn write_program(plan: &Plan, model: &str) -> CpuProgram {
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
    let tables = tables(plan, &function_of);
    let encoded = fuse_tables::encode(&tables);
    let mode = prefix;
    let hash = plan.hash;
    let dump = crate::plan::dump(plan);
    let dot = crate::plan::dot(plan);
    let program = quote! {
        #rt::EmbeddedProgram::new(#model, #mode, #hash, &[#(#names),*], #encoded, #dump, #dot)
    };
    CpuProgram {
        items: quote!(#(#items)*),
        program,
        tables,
    }
}

/// The plan's data for the runtime; `function_of[k]` is the distinct function kernel `k` runs.
fn tables(plan: &Plan, function_of: &[usize]) -> ProgramTables {
    let g = &plan.graph;
    let mut kernels = Vec::new();
    let mut kernel_info = Vec::new();
    for (k, &function) in plan.kernels.iter().zip(function_of) {
        kernels.push(KernelCall {
            function,
            buffers: launch_buffers(plan, k),
        });
        // A kernel that computes nothing materialises a view: call it what it is.
        let ops: Vec<String> = if k.nodes.is_empty() {
            vec!["copy".to_string()]
        } else {
            k.nodes.iter().map(|&n| g.node(n).op.name()).collect()
        };
        kernel_info.push(KernelInfo {
            name: k.name.clone(),
            kind: k.kind.name().to_string(),
            ops,
            bytes: kernel_bytes(g, k).iter().map(mono).collect(),
        });
    }
    // Each arange buffer's node and start, in buffer order.
    let aranges: Vec<(NodeId, Mono)> = plan
        .buffers
        .iter()
        .filter_map(|&(n, _)| match &g.node(n).op {
            Op::Arange { start, .. } => Some((n, mono(start))),
            _ => None,
        })
        .collect();
    let buffers = (0..plan.buffers.len())
        .map(|b| {
            let (node, _) = plan.buffers[b];
            let ty = g.ty(node);
            let kind = match plan.storage_of(b) {
                Storage::Input(i) => BufferKind::Input(i as usize),
                Storage::Param(i) => BufferKind::Param(i as usize),
                Storage::State(i) => BufferKind::State(i as usize),
                Storage::Arange => BufferKind::Arange(
                    aranges
                        .iter()
                        .position(|&(n, _)| n == node)
                        .unwrap_or(usize::MAX),
                ),
                Storage::Arena(s) => BufferKind::Arena(s),
                Storage::Output(i) => BufferKind::Output(i),
            };
            BufferSpec {
                kind,
                dtype: dtype(ty.dtype),
                numel: mono(&ty.shape.numel()),
            }
        })
        .collect();
    let outputs = g
        .outputs
        .iter()
        .map(|&o| OutputSpec {
            buffer: plan.buffer_of(o).unwrap_or(usize::MAX),
            dims: g.ty(o).shape.0.iter().map(mono).collect(),
        })
        .collect();
    let refusals = plan
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
    let packed_b = plan
        .kernels
        .iter()
        .enumerate()
        .filter_map(|(index, k)| kernels::packed_b(plan, k, index))
        .collect();
    let slice_bounds = crate::plan::bounds::unproved(g)
        .into_iter()
        .map(|b| SliceBound {
            // A parameter by its checkpoint name (the table an id or a position is past); else the shape and node.
            what: match g.node(b.input).op {
                Op::Param(i) if b.ids => g.params[i as usize].name.clone(),
                Op::Param(i) => format!(
                    "{} {}",
                    g.params[i as usize].name,
                    g.fmt_shape(&g.ty(b.input).shape)
                ),
                _ => format!("{} ({})", g.fmt_shape(&g.ty(b.input).shape), b.node),
            },
            text: b.text(g),
            axis: b.axis,
            start: mono(&b.start),
            len: mono(&b.len),
            size: mono(&b.size),
            write: b.write,
            ids: b.ids,
        })
        .collect();
    let sum_dims = g
        .derived
        .iter()
        .map(|d| SumDim {
            sym: d.sym as usize,
            terms: d.terms.iter().map(mono).collect(),
            less: d.less,
            may_be_zero: g.may_be_zero(d.sym),
        })
        .collect();
    let states = g
        .states
        .iter()
        .map(|s| StateSpec {
            name: s.name.clone(),
            dims: s.ty.shape.0.iter().map(mono).collect(),
        })
        .collect();
    // The free dims (bound by an input's axis or a `#[dim]`) that may be 0 in some call: the runtime's binding
    // allows 0 for them, then checks the conditions of those that may be 0 only where other dims are.
    let zero_dims = (0..g.dyn_dims.len() as u16)
        .filter(|&sym| g.derived_of(sym).is_none() && g.may_be_zero(sym))
        .map(usize::from)
        .collect();
    let zero_with = (0..g.dyn_dims.len() as u16)
        .filter_map(|sym| match g.zero_rule(sym) {
            ZeroRule::EmptyWith(sets) => Some(ZeroWith {
                sym: usize::from(sym),
                any_of: sets
                    .into_iter()
                    .map(|set| set.into_iter().map(usize::from).collect())
                    .collect(),
            }),
            _ => None,
        })
        .collect();
    ProgramTables {
        states,
        aranges: aranges.into_iter().map(|(_, start)| start).collect(),
        zero_dims,
        zero_with,
        sum_dims,
        slice_bounds,
        buffers,
        slots: plan.memory.slots.iter().map(|s| mono(&s.bytes())).collect(),
        kernels,
        kernel_info,
        outputs,
        refusals,
        packed_b,
    }
}

/// The plan buffers a kernel's function reads through its `bufs` table: the output, then the base buffer of
/// each read in [`Kernel::reads`] order.
pub fn launch_buffers(plan: &Plan, k: &Kernel) -> Vec<usize> {
    let buffer = |node| plan.buffer_of(node).unwrap_or(usize::MAX);
    std::iter::once(buffer(k.output))
        .chain(k.reads.iter().map(|r| buffer(r.access.base)))
        .collect()
}
