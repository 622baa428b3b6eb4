//! Piecewise kernels on the CPU: elementwise ops that read through a concat, the concat's input chains computed
//! in the same loop (see [`crate::plan::concat`]).
//!
//! The kernel iterates rows of its output like an elementwise kernel. A concat along the innermost axis splits
//! the row loop into one loop per input over that input's columns, so no element branches and each loop
//! vectorises like a plain elementwise row; a concat along an outer axis picks the input once per row (the row's
//! index along the axis says which) and runs the whole row with it. Inside a piece, the input's branch reads at
//! the piece's own indices (the row index shifted back by the piece's start, or the column index within the piece).

use proc_macro2::{Ident, TokenStream};
use quote::{format_ident, quote};

use super::expr::{decompose_row, inner_kind, op_expr, row_base, var, Inner};
use super::kernels::{for_output_rows, read_fields, setups, shape_decl, task};
use crate::ir::{DType, NodeId, Op};
use crate::plan::{Kernel, Piece, Piecewise, Plan, Read};

pub fn piecewise(plan: &Plan, k: &Kernel, pw: &Piecewise) -> TokenStream {
    let all: Vec<&Read> = k.reads.iter().collect();
    let setup = setups(plan, k, &all);
    let task = rows_task(plan, k, pw, k.output, &all);
    for_output_rows(shape_decl(&plan.graph.ty(k.output).shape.0), setup, task)
}

/// Binds `task`, a `RowTask` writing rows of `root` (the value `pw` computes from `reads`), with `shape` (the
/// root's), `len` (its rows' length) and the reads' set-up in scope.
pub fn rows_task(
    plan: &Plan,
    k: &Kernel,
    pw: &Piecewise,
    root: NodeId,
    reads: &[&Read],
) -> TokenStream {
    let rank = plan.graph.ty(root).shape.rank().max(1);
    let decompose = decompose_row(rank - 1);
    let rest_binds = binds(&reads_by(plan, k, &pw.rest), rank, &quote!(len));
    let innermost = pw.axis + 1 == rank;
    let pieces: Vec<TokenStream> = pw
        .pieces
        .iter()
        .filter(|p| p.len > 0)
        .map(|p| piece(plan, k, pw, p, root, innermost))
        .collect();
    let per_row = if innermost {
        quote!(#(#pieces)*)
    } else {
        // One input per row: the first piece whose end is past the row's index along the axis.
        let axis_index = format_ident!("i{}", pw.axis);
        let ends = pw
            .pieces
            .iter()
            .filter(|p| p.len > 0)
            .map(|p| p.start + p.len);
        quote!(#(if #axis_index < #ends #pieces else)* {})
    };
    let mut fields = read_fields(plan, reads);
    fields.push((format_ident!("shape"), quote!([usize; #rank])));
    fields.push((format_ident!("len"), quote!(usize)));
    task(
        &fields,
        quote! {
            for (r, o) in chunk.chunks_exact_mut(len).enumerate() {
                let row = row0 + r;
                #decompose
                #rest_binds
                #per_row
            }
        },
    )
}

/// The block that writes `p`'s span of the current row.
fn piece(
    plan: &Plan,
    k: &Kernel,
    pw: &Piecewise,
    p: &Piece,
    root: NodeId,
    innermost: bool,
) -> TokenStream {
    let g = &plan.graph;
    let rank = g.ty(root).shape.rank().max(1);
    let mut reads = reads_by(plan, k, &p.branch);
    // An input read from memory is read by the concat itself.
    if let Some(read) = k.read(p.input) {
        if p.branch.is_empty() && !reads.iter().any(|r| r.node == read.node) {
            reads.push(read);
        }
    }
    let (start, len) = (p.start, p.len);
    let (jp, j) = (format_ident!("jp"), format_ident!("j"));
    // A branch reads at the piece's own indices: `jp` is the column within the piece (innermost axis) or the
    // column itself (outer axis, where `jp == j`).
    let branch_value = |id: NodeId| value(plan, k, &p.branch, id, (&jp, &jp), rank);
    let branch = p.branch.iter().map(|&id| {
        let v = var("v", id);
        let e = op_expr(g, id, &branch_value);
        quote!(let #v: f32 = #e;)
    });
    let concat = var("v", pw.concat);
    let input = branch_value(p.input);
    let mut computed = pw.rest.clone();
    computed.push(pw.concat);
    // The rest reads at the output's column `j`; along the innermost axis its contiguous rows are cut to the
    // piece's columns first, so they are indexed by `jp` like the output.
    let rest_index = if innermost { (&jp, &j) } else { (&j, &j) };
    let rest_value = |id: NodeId| value(plan, k, &computed, id, rest_index, rank);
    let rest = pw.rest.iter().map(|&id| {
        let v = var("v", id);
        let e = op_expr(g, id, &rest_value);
        quote!(let #v: f32 = #e;)
    });
    let result = var("v", root);
    let element = quote! {
        #(#branch)*
        let #concat: f32 = #input;
        #(#rest)*
    };
    if innermost {
        let branch_binds = binds(&reads, rank, &quote!(#len));
        let cuts = reads_by(plan, k, &pw.rest).into_iter().filter(|r| {
            inner_kind(r, rank) == Inner::Contiguous && !reads.iter().any(|b| b.node == r.node)
        });
        let cuts = cuts.map(|r| {
            let x = var("x", r.node);
            quote!(let #x = &#x[#start..#start + #len];)
        });
        quote! {{
            #branch_binds
            #(#cuts)*
            let o = &mut o[#start..#start + #len];
            for jp in 0..#len {
                let j = #start + jp;
                #element
                o[jp] = #result;
            }
        }}
    } else {
        // The branch's rows are the output's rows shifted back by the piece's start along the axis.
        let axis_index = format_ident!("i{}", pw.axis);
        let branch_binds = binds(&reads, rank, &quote!(len));
        quote! {{
            let #axis_index = #axis_index - #start;
            #branch_binds
            for j in 0..len {
                let jp = j;
                #element
                o[j] = #result;
            }
        }}
    }
}

/// The reads that some node of `nodes` uses, in the kernel's read order.
fn reads_by<'k>(plan: &Plan, k: &'k Kernel, nodes: &[NodeId]) -> Vec<&'k Read> {
    k.reads
        .iter()
        .filter(|r| {
            nodes
                .iter()
                .any(|&n| plan.graph.node(n).op.operands().contains(&r.node))
        })
        .collect()
}

/// Per-row bindings of `reads`: each read's base for the row's outer indices, then its row (`len` elements when
/// contiguous, one value when broadcast along the row, the rest of the buffer when strided).
fn binds(reads: &[&Read], rank: usize, len: &TokenStream) -> TokenStream {
    let stmts = reads.iter().map(|r| {
        let base_stmt = row_base(r, rank - 1);
        let (buf, base, x) = (var("buf", r.node), var("base", r.node), var("x", r.node));
        let bind = match inner_kind(r, rank) {
            Inner::Contiguous => quote!(let #x = &#buf[#base..#base + #len];),
            Inner::Broadcast => quote!(let #x = #buf[#base];),
            Inner::Strided => quote!(let #x = &#buf[#base..];),
        };
        quote!(#base_stmt #bind)
    });
    quote!(#(#stmts)*)
}

/// The f32 value of `id`: a constant, a value computed in `computed`, or a read at inner index `contiguous` (a
/// contiguous row) or `strided` (a strided one, from the row's base).
fn value(
    plan: &Plan,
    k: &Kernel,
    computed: &[NodeId],
    id: NodeId,
    (contiguous, strided): (&Ident, &Ident),
    rank: usize,
) -> TokenStream {
    let g = &plan.graph;
    if let Op::Scalar(v) = g.node(id).op {
        let v = v as f32;
        return quote!(#v);
    }
    if computed.contains(&id) {
        let v = var("v", id);
        return quote!(#v);
    }
    let Some(read) = k.read(id) else {
        return quote!(0.0f32);
    };
    let x = var("x", read.node);
    let load = match inner_kind(read, rank) {
        Inner::Contiguous => quote!(#x[#contiguous]),
        Inner::Broadcast => quote!(#x),
        Inner::Strided => {
            let st = var("st", read.node);
            let last = rank - 1;
            quote!(#x[#strided * #st[#last]])
        }
    };
    match g.ty(read.access.base).dtype {
        DType::I64 => quote!((#load as f32)),
        DType::F32 | DType::Bool => load,
    }
}
