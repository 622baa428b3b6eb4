//! Row-region kernels (written-out norms, see `plan::row_region`): per row, each reduction is a pass that computes
//! its input into a row buffer (recomputing the row nodes it needs from the reads) and reduces it with the same
//! vectorised `rows::sum`/`rows::max` as the built-in row ops; per-row values follow once; a last pass computes
//! the output row.

use proc_macro2::TokenStream;
use quote::quote;

use super::expr::{decompose_row, op_expr, row_load, var};
use super::kernels::{bind_reads, for_output_rows, read_fields, setups, shape_decl, task, RT};
use crate::ir::{NodeId, Op, ReduceOp};
use crate::plan::row_region::{place, Place};
use crate::plan::{Kernel, Plan, Read};

/// The row nodes of `k` that `value` depends on, in graph order, stopping at per-row values and reads.
fn row_chain(plan: &Plan, k: &Kernel, value: NodeId) -> Vec<NodeId> {
    let g = &plan.graph;
    let rows = &g.ty(k.output).shape;
    let mut needed = vec![false; g.nodes.len()];
    let mut stack = vec![value];
    while let Some(n) = stack.pop() {
        if !k.computes(n) || needed[n.index()] || place(g, rows, n) != Some(Place::Row) {
            continue;
        }
        needed[n.index()] = true;
        stack.extend(g.node(n).op.operands());
    }
    k.nodes
        .iter()
        .copied()
        .filter(|n| needed[n.index()])
        .collect()
}

/// `let v: f32 = ..;` for each of `nodes`, every computed value named by [`var`], reads loaded at element `j`.
fn node_stmts(plan: &Plan, k: &Kernel, nodes: &[NodeId], rank: usize) -> TokenStream {
    let g = &plan.graph;
    let value = |id: NodeId| -> TokenStream {
        if let Op::Scalar(v) = g.node(id).op {
            let v = v as f32;
            return quote!(#v);
        }
        if k.computes(id) {
            let v = var("v", id);
            return quote!(#v);
        }
        match k.read(id) {
            Some(read) => row_load(read, rank, g.ty(read.access.base).dtype),
            None => quote!(0.0f32),
        }
    };
    let stmts = nodes.iter().map(|&id| {
        let v = var("v", id);
        let e = op_expr(g, id, &value);
        quote!(let #v: f32 = #e;)
    });
    quote!(#(#stmts)*)
}

/// The value of `id` at element `j` once its chain has run (a computed value, or a read).
fn value_at(plan: &Plan, k: &Kernel, id: NodeId, rank: usize) -> TokenStream {
    let g = &plan.graph;
    if k.computes(id) {
        let v = var("v", id);
        return quote!(#v);
    }
    match k.read(id) {
        Some(read) => row_load(read, rank, g.ty(read.access.base).dtype),
        None => quote!(0.0f32),
    }
}

pub fn row_region(plan: &Plan, k: &Kernel) -> TokenStream {
    let rt = RT();
    let g = &plan.graph;
    let rows = &g.ty(k.output).shape;
    let (shape, rank) = shape_decl(&rows.0);
    let reads: Vec<&Read> = k.reads.iter().collect();
    let setup = setups(plan, k, &reads);
    let binds = bind_reads(&reads, rank);
    let decompose = decompose_row(rank - 1);
    // Per-row work in graph order: a reduction's pass over the row, or a per-row value.
    let per_row = k.nodes.iter().filter_map(|&id| {
        if place(g, rows, id) != Some(Place::PerRow) {
            return None;
        }
        let v = var("v", id);
        match &g.node(id).op {
            Op::Reduce { op, input, .. } => {
                let chain = node_stmts(plan, k, &row_chain(plan, k, *input), rank);
                let x = value_at(plan, k, *input, rank);
                let reduced = match op {
                    ReduceOp::Sum => quote!(#rt::rows::sum(red_buf)),
                    ReduceOp::Mean => quote!(#rt::rows::sum(red_buf) / len as f32),
                    ReduceOp::Max => quote!(#rt::rows::max(red_buf)),
                };
                Some(quote! {
                    let #v: f32 = {
                        let red_buf = &mut red_buf[..len];
                        for j in 0..len {
                            #chain
                            red_buf[j] = #x;
                        }
                        #reduced
                    };
                })
            }
            _ => Some(node_stmts(plan, k, &[id], rank)),
        }
    });
    let per_row: Vec<TokenStream> = per_row.collect();
    let chain = node_stmts(plan, k, &row_chain(plan, k, k.output), rank);
    let result = value_at(plan, k, k.output, rank);
    let mut fields = read_fields(plan, &reads);
    fields.push((quote::format_ident!("shape"), quote!([usize; #rank])));
    fields.push((quote::format_ident!("len"), quote!(usize)));
    let task = task(
        &fields,
        quote! {
            // One row of scratch per chunk of rows, a fresh local like the built-in row kernels'.
            let mut red_buf = vec![0.0f32; len];
            for (r, o) in chunk.chunks_exact_mut(len).enumerate() {
                let row = row0 + r;
                #decompose
                #binds
                // Per-row reads are hoisted scalars; element `j` is not in scope here.
                #(#per_row)*
                for j in 0..len {
                    #chain
                    o[j] = #result;
                }
            }
        },
    );
    for_output_rows((shape, rank), setup, task)
}
