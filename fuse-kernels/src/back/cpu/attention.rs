//! The attention kernel on the CPU: the runtime's `attention` driver computes a block of scores with one GEMM,
//! runs the generated task on it (the elementwise chain on the scores, then the softmax of each row), and
//! multiplies the block by `V` with a second GEMM. The task is the only generated part, with, when the kernel
//! computes Q (RoPE of a projection), a second task that writes a block's rows of Q.

use proc_macro2::TokenStream;
use quote::quote;

use super::expr::{dim_expr, var};
use super::kernels::{computed_rows, in_place_task, out_index, setups, shape_decl, RT};
use crate::ir::{NodeId, Op};
use crate::plan::{Attention, Kernel, Plan, Read};

pub fn attention(plan: &Plan, k: &Kernel, att: &Attention) -> TokenStream {
    let rt = RT();
    let g = &plan.graph;
    let (Op::MatMul(q, kt), Op::MatMul(_, v)) = (&g.node(att.scores).op, &g.node(att.output).op)
    else {
        return quote!();
    };
    if k.read(*kt).is_none() || k.read(*v).is_none() {
        return quote!();
    }
    // Iterated as the scores: `[batch.., m, n]`.
    let (shape, rank) = shape_decl(&g.ty(att.scores).shape.0);
    let batch = rank - 2;
    let inner = dim_expr(&g.ty(*q).shape.0[rank - 1]);
    let head = dim_expr(&g.ty(att.output).shape.0[rank - 1]);
    let chain = att.chain(g, k);
    let all: Vec<&Read> = k.reads.iter().collect();
    let setup = setups(plan, k, &all);
    let out = out_index();
    let operand = |n: NodeId| (var("buf", n), var("off", n), var("st", n));
    let ((bq, oq, sq), (bk, ok, sk), (bv, ov, sv)) = (operand(*q), operand(*kt), operand(*v));
    let batch_dims = (0..batch).map(|i| quote!(shape[#i]));
    let strides = |st: &proc_macro2::Ident| {
        let s = (0..batch).map(move |i| quote!(#st[#i]));
        quote!(&[#(#s),*])
    };
    let (rows, cols) = (batch, batch + 1);
    let (k_batch, v_batch) = (strides(&sk), strides(&sv));
    let (query, q_batch, q_at) = match att.query {
        Some(root) => (
            query_task(plan, k, att, root),
            quote!(&[]),
            quote!(#rt::Operand { offset: 0, rs: 0, cs: 0 }),
        ),
        None => (
            quote!(let query = #rt::Query::Memory(#bq);),
            strides(&sq),
            quote!(#rt::Operand { offset: #oq, rs: #sq[#rows], cs: #sq[#cols] }),
        ),
    };
    // Where the output's rows go: contiguous, or where the kernel's write places them (its heads straight into
    // the layout its reader wants).
    let placed = match &k.write {
        Some(w) => w.strides.clone(),
        None => crate::plan::access::contiguous_strides(&g.ty(att.output).shape.0),
    };
    let out_batch = placed[..batch].iter().map(dim_expr);
    let out_rs = dim_expr(&placed[rows]);
    let Op::Softmax { input, .. } = g.node(att.softmax).op else {
        return quote!();
    };
    // After the chain on every row of the block: the softmax takes a few rows at a time, pass by pass.
    let softmax = quote!(#rt::rows::softmax_rows(chunk, len););
    let scores_task = in_place_task(plan, k, att.scores, &chain, input, rank, softmax);
    quote! {
        #shape
        #setup
        let out = ctx.out_f32(#out);
        let spec = #rt::AttentionSpec {
            batch: &[#(#batch_dims),*],
            q_batch: #q_batch,
            k_batch: #k_batch,
            v_batch: #v_batch,
            m: shape[#rows],
            n: shape[#cols],
            d: #inner,
            dv: #head,
            q: #q_at,
            k: #rt::Operand { offset: #ok, rs: #sk[#rows], cs: #sk[#cols] },
            v: #rt::Operand { offset: #ov, rs: #sv[#rows], cs: #sv[#cols] },
            out: #rt::Placement { batch: &[#(#out_batch),*], rs: #out_rs },
            products: ctx.attention_products(),
        };
        #scores_task
        #query
        #rt::attention(&spec, query, #bk, #bv, out, &task);
    }
}

/// Binds `query`, Q computed by the kernel: a task writing rows of `root`, of which Q is a contiguous view, so
/// its rows are Q's.
fn query_task(plan: &Plan, k: &Kernel, att: &Attention, root: NodeId) -> TokenStream {
    let rt = RT();
    let rows = computed_rows(plan, k, &att.query_nodes(&plan.graph, k), root);
    quote! {
        let query_rows = #rows;
        let query = #rt::Query::Computed(&query_rows);
    }
}
