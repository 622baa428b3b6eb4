//! The body of each planned kernel's function. Every kernel iterates rows of its output: the outer indices are
//! split from the row number, each read gets its base offset for the row, and the inner loop is straight-line f32
//! code that LLVM vectorises (the runtime runs it under AVX-512/AVX2 when the CPU has them).

use proc_macro2::{Ident, TokenStream};
use quote::quote;

use super::expr::{
    decompose_row, dim_expr, elementwise_body, inner_kind, read_setup, row_base, row_bind, var,
    Inner,
};
use crate::ir::{DType, NodeId, Op, ReduceOp};
use crate::plan::{Kernel, KernelKind, Plan, Read};

pub(super) const RT: fn() -> TokenStream = || quote!(::fuse_runtime::__private);

/// The body of `k`'s function, which runs with `ctx`, the dims `d` and the launch's buffer table `bufs` in scope
/// (see [`super::write_program`]).
pub fn kernel_body(plan: &Plan, k: &Kernel) -> TokenStream {
    match &k.kind {
        KernelKind::Elementwise => elementwise(plan, k),
        KernelKind::Row { anchor } => row(plan, k, *anchor),
        KernelKind::RowRegion => super::row_region::row_region(plan, k),
        KernelKind::MatMul { anchor } => matmul(plan, k, *anchor),
        KernelKind::Gather { node } => gather(plan, k, *node),
        KernelKind::Concat { node } => concat(plan, k, *node),
        KernelKind::Piecewise(pw) => super::piecewise::piecewise(plan, k, pw),
        KernelKind::Attention(att) => super::attention::attention(plan, k, att),
        KernelKind::Write { node } => write_state(plan, k, *node),
    }
}

/// The output buffer, from the launch's table.
pub(super) fn out_index() -> TokenStream {
    let slot = super::expr::OUT_SLOT;
    quote!(bufs[#slot])
}

/// Iteration shape as an array named `shape`; a scalar iterates as `[1]`.
pub(super) fn shape_decl(dims: &[crate::ir::Dim]) -> (TokenStream, usize) {
    if dims.is_empty() {
        return (quote!(let shape: [usize; 1] = [1usize];), 1);
    }
    let n = dims.len();
    let dims = dims.iter().map(dim_expr);
    (quote!(let shape: [usize; #n] = [#(#dims),*];), n)
}

/// Per-row set-up of a group of reads: bases and inner bindings.
pub(super) fn bind_reads(reads: &[&Read], rank: usize) -> TokenStream {
    let stmts = reads.iter().map(|r| {
        let base = row_base(r, rank.saturating_sub(1));
        let bind = row_bind(r, rank);
        quote!(#base #bind)
    });
    quote!(#(#stmts)*)
}

/// The fields a task captures for each read: its buffer, offset and strides.
pub(super) fn read_fields(plan: &Plan, reads: &[&Read]) -> Vec<(Ident, TokenStream)> {
    let mut fields = Vec::new();
    for r in reads {
        let elem = match plan.graph.ty(r.access.base).dtype {
            DType::I64 => quote!(i64),
            DType::F32 | DType::Bool => quote!(f32),
        };
        let n = r.access.strides.len();
        fields.push((var("buf", r.node), quote!(&'a [#elem])));
        fields.push((var("off", r.node), quote!(usize)));
        fields.push((var("st", r.node), quote!([usize; #n])));
    }
    fields
}

/// A `RowTask` capturing `fields` (locals of the same names) whose `run(row0, chunk)` is `body`; binds `task`.
/// The runtime calls `run` inside `#[target_feature]` copies, so `body`'s loops vectorise for the CPU at hand.
pub(super) fn task(fields: &[(Ident, TokenStream)], body: TokenStream) -> TokenStream {
    let rt = RT();
    let names: Vec<&Ident> = fields.iter().map(|(n, _)| n).collect();
    let types = fields.iter().map(|(_, t)| t);
    quote! {
        #[derive(Clone, Copy)]
        struct Task<'a> {
            #(#names: #types,)*
            _borrow: ::std::marker::PhantomData<&'a ()>,
        }
        impl #rt::RowTask for Task<'_> {
            #[inline(always)]
            fn run<A: #rt::math::Arith>(&self, row0: usize, chunk: &mut [f32]) {
                let Task { #(#names,)* .. } = *self;
                #body
            }
        }
        let task = Task { #(#names,)* _borrow: ::std::marker::PhantomData };
    }
}

/// The reads of `k` that some node of `nodes` uses.
pub(super) fn reads_of<'k>(plan: &Plan, k: &'k Kernel, nodes: &[NodeId]) -> Vec<&'k Read> {
    k.reads
        .iter()
        .filter(|r| {
            nodes
                .iter()
                .any(|&n| plan.graph.node(n).op.operands().contains(&r.node))
        })
        .collect()
}

pub(super) fn setups(plan: &Plan, k: &Kernel, reads: &[&Read]) -> TokenStream {
    let s = reads.iter().map(|r| read_setup(plan, k, r));
    quote!(#(#s)*)
}

fn elementwise(plan: &Plan, k: &Kernel) -> TokenStream {
    let g = &plan.graph;
    let (shape, rank) = shape_decl(&g.ty(k.output).shape.0);
    let reads: Vec<&Read> = k.reads.iter().collect();
    let setup = setups(plan, k, &reads);
    let task = elementwise_task(plan, k, &k.nodes, k.output, &reads);
    for_output_rows((shape, rank), setup, task)
}

/// The body of a kernel whose `task` writes rows of its output: the output's `shape` (of `rank` dims) and its
/// rows' length `len`, the reads' `setup`, then the task run over the output's rows.
pub(super) fn for_output_rows(
    (shape, rank): (TokenStream, usize),
    setup: TokenStream,
    task: TokenStream,
) -> TokenStream {
    let rt = RT();
    let out = out_index();
    quote! {
        #shape
        let len = shape[#rank - 1];
        #setup
        let out = ctx.out_f32(#out);
        #task
        #rt::for_rows(out, len, &task);
    }
}

/// Binds `task`, a `RowTask` writing rows of `root`, which the elementwise `nodes` compute from `reads` (a copy
/// of its one read when `nodes` is empty), with `shape` (the root's), `len` (its rows' length) and the reads'
/// set-up in scope.
pub(super) fn elementwise_task(
    plan: &Plan,
    k: &Kernel,
    nodes: &[NodeId],
    root: NodeId,
    reads: &[&Read],
) -> TokenStream {
    let g = &plan.graph;
    let rank = g.ty(root).shape.rank().max(1);
    let binds = bind_reads(reads, rank);
    let decompose = decompose_row(rank - 1);
    // A copy kernel computes nothing: its value is its single read.
    let (body, result) = if nodes.is_empty() {
        let value = match reads.first() {
            Some(r) => super::expr::row_load(r, rank, g.ty(r.access.base).dtype),
            None => quote!(0.0f32),
        };
        (quote!(), value)
    } else {
        let v = var("v", root);
        (elementwise_body(plan, k, nodes, rank, None), quote!(#v))
    };
    let mut fields = read_fields(plan, reads);
    fields.push((quote::format_ident!("shape"), quote!([usize; #rank])));
    fields.push((quote::format_ident!("len"), quote!(usize)));
    task(
        &fields,
        quote! {
            for (r, o) in chunk.chunks_exact_mut(len).enumerate() {
                let row = row0 + r;
                #decompose
                #binds
                for j in 0..len {
                    #body
                    o[j] = #result;
                }
            }
        },
    )
}

/// A block evaluating to a `RowTask` that writes rows of `root`, computed by the elementwise `nodes` of `k`
/// (through one concat, or none) from the reads they use, whose set-up must be in scope. The block keeps the
/// task's names from meeting another task's in the same kernel.
pub(super) fn computed_rows(
    plan: &Plan,
    k: &Kernel,
    nodes: &[NodeId],
    root: NodeId,
) -> TokenStream {
    let g = &plan.graph;
    let reads = reads_of(plan, k, nodes);
    let (shape, rank) = shape_decl(&g.ty(root).shape.0);
    let task = match crate::plan::concat::recognise(g, nodes) {
        Some(pw) => super::piecewise::rows_task(plan, k, &pw, root, &reads),
        None => elementwise_task(plan, k, nodes, root, &reads),
    };
    quote! {{
        #shape
        let len = shape[#rank - 1];
        #task
        task
    }}
}

/// The prologue feeds the anchor's row input; the epilogue is everything after the anchor.
fn split_row_nodes(plan: &Plan, k: &Kernel, anchor: NodeId) -> (Vec<NodeId>, Vec<NodeId>) {
    let g = &plan.graph;
    let mut feeds = vec![false; g.nodes.len()];
    if let Some(&input) = g.node(anchor).op.operands().first() {
        feeds[input.index()] = true;
    }
    for &id in k.nodes.iter().rev() {
        if feeds[id.index()] {
            for o in g.node(id).op.operands() {
                feeds[o.index()] = true;
            }
        }
    }
    let prologue = k
        .nodes
        .iter()
        .copied()
        .filter(|n| feeds[n.index()] && *n != anchor)
        .collect();
    let epilogue = k
        .nodes
        .iter()
        .copied()
        .filter(|n| !feeds[n.index()] && *n != anchor)
        .collect();
    (prologue, epilogue)
}

/// Elements per block of a row kernel's fill loop: 64 f32 are four cache lines, each prefetched for the next row.
const PREFETCH_BLOCK: usize = 64;

/// Prefetches, for the block `j0..j0 + PREFETCH_BLOCK` being filled, the same block of the next row of every
/// row-contiguous input and of the output. A row kernel alternates between reading a row and computing on it in
/// L1 (reductions, normalisation), so the hardware prefetcher sits idle during the compute and the next row
/// starts with a cache miss; asking for it one row ahead overlaps the two (W1: 8.0 → 4.1 ms). Prefetches never
/// fault, so the last row's "next row" is harmless.
fn prefetch_next_row(reads: &[&Read], rank: usize) -> TokenStream {
    let rt = RT();
    const F32_PER_LINE: usize = 16;
    let count = PREFETCH_BLOCK / F32_PER_LINE;
    let lines = |ptr: TokenStream| quote!(for l in 0..#count { #rt::rows::prefetch(#ptr.wrapping_add(j0 + #F32_PER_LINE * l)); });
    let inputs = reads.iter().filter(|r| {
        rank >= 2
            && matches!(inner_kind(r, rank), Inner::Contiguous)
            && r.access.strides[rank - 2].coeff != 0
    });
    let inputs = inputs.map(|r| {
        let (buf, base, st) = (var("buf", r.node), var("base", r.node), var("st", r.node));
        let outer = rank - 2;
        lines(quote!(#buf.as_ptr().wrapping_add(#base + #st[#outer])))
    });
    let output = lines(quote!(o.as_ptr().wrapping_add(out_len)));
    quote! {
        #(#inputs)*
        if j0 < out_len { #output }
    }
}

fn row(plan: &Plan, k: &Kernel, anchor: NodeId) -> TokenStream {
    let rt = RT();
    let g = &plan.graph;
    let op = &g.node(anchor).op;
    let operands = op.operands();
    let input = operands[0];
    let (shape, rank) = shape_decl(&g.ty(input).shape.0);
    let (prologue, epilogue) = split_row_nodes(plan, k, anchor);
    let is_reduce = matches!(op, Op::Reduce { .. });
    let out_rank = g.ty(k.output).shape.rank();
    // Reads by phase: the prologue's over the input shape, the epilogue's over the output shape.
    let in_reads: Vec<&Read> = k
        .reads
        .iter()
        .filter(|r| {
            prologue
                .iter()
                .any(|&n| g.node(n).op.operands().contains(&r.node))
                || r.node == input
        })
        .collect();
    // Each side operand bound once: a norm may take one tensor as both its gain and its bias.
    let mut side_reads: Vec<&Read> = operands[1..].iter().filter_map(|&n| k.read(n)).collect();
    side_reads.dedup_by_key(|r| r.node);
    let out_reads = reads_of(plan, k, &epilogue);
    let all: Vec<&Read> = k.reads.iter().collect();
    let setup = setups(plan, k, &all);
    let in_binds = bind_reads(&in_reads, rank);
    // Epilogue reads of a reduction without keepdim have one dim fewer: every dim is an outer dim.
    let out_binds = if is_reduce && out_rank + 1 == rank {
        let stmts = out_reads.iter().map(|r| {
            let base = row_base(r, rank - 1);
            let x = var("x", r.node);
            let buf = var("buf", r.node);
            let b = var("base", r.node);
            quote!(#base let #x = #buf[#b];)
        });
        quote!(#(#stmts)*)
    } else {
        bind_reads(&out_reads, rank)
    };
    let side = side_reads.iter().map(|r| {
        let x = var("side", r.node);
        let buf = var("buf", r.node);
        let off = var("off", r.node);
        quote!(let #x = &#buf[#off..#off + len];)
    });
    let decompose = decompose_row(rank - 1);
    let out = out_index();
    // The row input, gathered into `row_buf` (prologue evaluated per element).
    let fill = {
        let body = elementwise_body(plan, k, &prologue, rank, None);
        let value = if prologue.contains(&input) {
            let v = var("v", input);
            quote!(#v)
        } else {
            match k.read(input) {
                Some(r) => super::expr::row_load(r, rank, g.ty(r.access.base).dtype),
                None => quote!(0.0f32),
            }
        };
        let prefetch = prefetch_next_row(&in_reads, rank);
        quote!({
            let fill = &mut row_buf[..len];
            let mut j0 = 0;
            while j0 < len {
                let end = (j0 + #PREFETCH_BLOCK).min(len);
                #prefetch
                for j in j0..end { #body fill[j] = #value; }
                j0 = end;
            }
        })
    };
    let side_names: Vec<_> = operands[1..].iter().map(|&n| var("side", n)).collect();
    // The anchor writes into `dst` (the output row, or `tmp` when an epilogue follows).
    let anchor_into = |dst: TokenStream| -> TokenStream {
        match op {
            Op::Softmax { .. } => quote! {
                #rt::rows::softmax_in_place(&mut row_buf);
                (#dst).copy_from_slice(&row_buf);
            },
            Op::Cumsum { .. } => quote!(#rt::rows::cumsum(&row_buf, #dst);),
            Op::LayerNorm { eps, .. } => {
                let eps = *eps as f32;
                let (gm, bt) = (&side_names[0], &side_names[1]);
                quote!(#rt::rows::layer_norm(&row_buf, #gm, #bt, #eps, #dst);)
            }
            Op::RmsNorm { eps, .. } => {
                let eps = *eps as f32;
                let gm = &side_names[0];
                quote!(#rt::rows::rms_norm(&row_buf, #gm, #eps, #dst);)
            }
            Op::Reduce { op: r, .. } => {
                let value = match r {
                    ReduceOp::Sum => quote!(#rt::rows::sum(&row_buf)),
                    ReduceOp::Mean => quote!(#rt::rows::sum(&row_buf) / len as f32),
                    ReduceOp::Max => quote!(#rt::rows::max(&row_buf)),
                };
                quote!((#dst)[0] = #value;)
            }
            _ => quote!(),
        }
    };
    let out_len = if is_reduce {
        quote!(1usize)
    } else {
        quote!(len)
    };
    let finish = if epilogue.is_empty() {
        anchor_into(quote!(o))
    } else {
        let run = anchor_into(quote!(&mut tmp[..]));
        let av = var("a", anchor);
        let body = elementwise_body(plan, k, &epilogue, rank, Some((anchor, quote!(#av))));
        let result = var("v", k.output);
        let out_binds = out_binds.clone();
        quote! {
            #run
            #out_binds
            for j in 0..o.len() {
                let #av = tmp[j];
                #body
                o[j] = #result;
            }
        }
    };
    let mut fields = read_fields(plan, &all);
    fields.push((quote::format_ident!("shape"), quote!([usize; #rank])));
    fields.push((quote::format_ident!("len"), quote!(usize)));
    fields.push((quote::format_ident!("out_len"), quote!(usize)));
    for r in &side_reads {
        fields.push((var("side", r.node), quote!(&'a [f32])));
    }
    let task = task(
        &fields,
        quote! {
            // Two rows of scratch per chunk of rows. Kept as fresh locals on purpose: reusing a thread-local buffer
            // was measured 2.5x slower on a layer norm (the optimiser can no longer prove the rows alias nothing).
            let mut row_buf = vec![0.0f32; len];
            let mut tmp = vec![0.0f32; len];
            for (r, o) in chunk.chunks_exact_mut(out_len).enumerate() {
                let row = row0 + r;
                #decompose
                #in_binds
                #fill
                #finish
            }
        },
    );
    quote! {
        #shape
        let len = shape[#rank - 1];
        #setup
        #(#side)*
        let out = ctx.out_f32(#out);
        let out_len = #out_len;
        #task
        #rt::for_rows(out, out_len, &task);
    }
}

fn matmul(plan: &Plan, k: &Kernel, anchor: NodeId) -> TokenStream {
    let rt = RT();
    let g = &plan.graph;
    let Op::MatMul(a, b) = g.node(anchor).op else {
        return quote!();
    };
    let (Some(ra), Some(_)) = (k.read(a), k.read(b)) else {
        return quote!();
    };
    let out_shape = &g.ty(k.output).shape.0;
    let (shape, rank) = shape_decl(out_shape);
    let batch = rank - 2;
    let kdim = dim_expr(&ra.access.shape[rank - 1]);
    let (sa, sb) = (var("st", a), var("st", b));
    let (oa, ob) = (var("off", a), var("off", b));
    let (ba, bb) = (var("buf", a), var("buf", b));
    let epilogue: Vec<NodeId> = k.nodes.iter().copied().filter(|&n| n != anchor).collect();
    let all: Vec<&Read> = k.reads.iter().collect();
    let setup = setups(plan, k, &all);
    let out = out_index();
    let batch_dims = (0..batch).map(|i| quote!(shape[#i]));
    let a_batch = (0..batch).map(|i| quote!(#sa[#i]));
    let b_batch = (0..batch).map(|i| quote!(#sb[#i]));
    let (am, ak) = (batch, batch + 1);
    let (epilogue_task, epilogue_arg) = if epilogue.is_empty() {
        (quote!(), quote!(None))
    } else {
        let task = in_place_task(plan, k, anchor, &epilogue, k.output, rank, quote!());
        (task, quote!(Some(&task)))
    };
    quote! {
        #shape
        #setup
        let out = ctx.out_f32(#out);
        let spec = #rt::GemmSpec {
            batch: &[#(#batch_dims),*],
            a_batch: &[#(#a_batch),*],
            b_batch: &[#(#b_batch),*],
            m: shape[#rank - 2],
            k: #kdim,
            n: shape[#rank - 1],
            a_offset: #oa,
            a_rs: #sa[#am],
            a_cs: #sa[#ak],
            b_offset: #ob,
            b_rs: #sb[#am],
            b_cs: #sb[#ak],
        };
        #epilogue_task
        #rt::gemm_with(&spec, #ba, #bb, ctx.packed_b(), out, #epilogue_arg);
    }
}

/// The B operand of `k`'s GEMM when the runtime can pack it once at load (the kernel at `index` in plan order):
/// a parameter read through a view whose offset, strides, k and n are static and which every batch shares (a
/// Linear layer's `w.t()`). The generated call receives the pack through `ctx.packed_b()`. For a gather, the
/// table read as such a B transposed (`gather_b`).
pub(super) fn packed_b(plan: &Plan, k: &Kernel, index: usize) -> Option<fuse_tables::PackedB> {
    let g = &plan.graph;
    if let KernelKind::Gather { node } = k.kind {
        return gather_b(plan, k, index, node);
    }
    let KernelKind::MatMul { anchor } = k.kind else {
        return None;
    };
    let Op::MatMul(a, b) = g.node(anchor).op else {
        return None;
    };
    let access = &k.read(b)?.access;
    let buffer = plan.buffer_of(access.base)?;
    if !matches!(plan.storage_of(buffer), crate::plan::Storage::Param(_)) {
        return None;
    }
    let reads_of_buffer = k
        .reads
        .iter()
        .filter(|r| plan.buffer_of(r.access.base) == Some(buffer))
        .count();
    let exclusive = a != b && reads_of_buffer == 1;
    let rank = access.strides.len();
    if rank < 2 || access.shape.len() != rank {
        return None;
    }
    let batch_shared = access.strides[..rank - 2]
        .iter()
        .all(|s| s.as_static() == Some(0));
    let offset = access
        .offset
        .iter()
        .try_fold(0usize, |sum, term| sum.checked_add(term.as_static()?))?;
    let [rs, cs] = [rank - 2, rank - 1].map(|d| access.strides[d].as_static());
    let [kd, n] = [rank - 2, rank - 1].map(|d| access.shape[d].as_static());
    Some(fuse_tables::PackedB {
        kernel: index,
        buffer,
        offset,
        rs: rs?,
        cs: cs?,
        k: kd?,
        n: n?,
        exclusive,
        gather: false,
    })
    .filter(|_| batch_shared)
}

/// A gather's table as the B of a product with it transposed (`x · tableᵀ`, a tied output layer): a parameter
/// read whole from a static offset, rows contiguous. The runtime hands the gather that product's reduced pack, if
/// the model made one (in bf16, a pack of its own otherwise), and reads rows from it (`gather_rows`).
fn gather_b(plan: &Plan, k: &Kernel, index: usize, node: NodeId) -> Option<fuse_tables::PackedB> {
    let g = &plan.graph;
    let Op::Embedding { table, .. } = g.node(node).op else {
        return None;
    };
    let access = &k.read(table)?.access;
    let buffer = plan.buffer_of(access.base)?;
    if !matches!(plan.storage_of(buffer), crate::plan::Storage::Param(_)) {
        return None;
    }
    let [vocab, dim] = [0, 1].map(|d| access.shape.get(d).and_then(|s| s.as_static()));
    let [row_stride, col_stride] =
        [0, 1].map(|d| access.strides.get(d).and_then(|s| s.as_static()));
    let (vocab, dim) = (vocab?, dim?);
    if access.shape.len() != 2 || row_stride? != dim || col_stride? != 1 {
        return None;
    }
    let offset = access
        .offset
        .iter()
        .try_fold(0usize, |sum, term| sum.checked_add(term.as_static()?))?;
    Some(fuse_tables::PackedB {
        kernel: index,
        buffer,
        offset,
        rs: 1,
        cs: dim,
        k: dim,
        n: vocab,
        exclusive: true,
        gather: true,
    })
}

/// A task that rewrites each row of its chunk in place: element `j` holds the anchor's value, and becomes
/// `result` computed by the elementwise `nodes` (reads indexed at the rows of `shape`); `after_rows` then runs
/// once on the finished rows, as `chunk` (rows of `len`). Binds `task`.
pub(super) fn in_place_task(
    plan: &Plan,
    k: &Kernel,
    anchor: NodeId,
    nodes: &[NodeId],
    result: NodeId,
    rank: usize,
    after_rows: TokenStream,
) -> TokenStream {
    let reads = reads_of(plan, k, nodes);
    let decompose = decompose_row(rank - 1);
    let binds = bind_reads(&reads, rank);
    let av = var("a", anchor);
    let body = elementwise_body(plan, k, nodes, rank, Some((anchor, quote!(#av))));
    let result = if result == anchor {
        quote!(#av)
    } else {
        let v = var("v", result);
        quote!(#v)
    };
    let mut fields = read_fields(plan, &reads);
    fields.push((quote::format_ident!("shape"), quote!([usize; #rank])));
    task(
        &fields,
        quote! {
            let len = shape[#rank - 1];
            for (r, o) in chunk.chunks_exact_mut(len).enumerate() {
                let row = row0 + r;
                #decompose
                #binds
                for j in 0..len {
                    let #av = o[j];
                    #body
                    o[j] = #result;
                }
            }
            #after_rows
        },
    )
}

fn gather(plan: &Plan, k: &Kernel, node: NodeId) -> TokenStream {
    let rt = RT();
    let g = &plan.graph;
    let Op::Embedding { table, ids } = g.node(node).op else {
        return quote!();
    };
    let (Some(rt_read), Some(ri)) = (k.read(table), k.read(ids)) else {
        return quote!();
    };
    let (shape, rank) = shape_decl(&g.ty(ids).shape.0);
    let setup = setups(plan, k, &[rt_read, ri]);
    let (bt, ot) = (var("buf", table), var("off", table));
    let (bi, oi, si) = (var("buf", ids), var("off", ids), var("st", ids));
    let vocab = dim_expr(&g.ty(table).shape.0[0]);
    let dim = dim_expr(&g.ty(table).shape.0[1]);
    let out = out_index();
    let idx = (0..rank).map(|i| {
        let ii = quote::format_ident!("i{}", i);
        quote!(+ #ii * #si[#i])
    });
    let decompose = decompose_row(rank);
    // Ids the model computed are f32 whole numbers, bounded inside the table (`crate::id_range`).
    let id = if g.ty(ri.access.base).dtype == crate::ir::DType::F32 {
        quote!(#bi[#oi #(#idx)*] as i64)
    } else {
        quote!(#bi[#oi #(#idx)*])
    };
    quote! {
        #shape
        #setup
        let out = ctx.out_f32(#out);
        #rt::gather_rows(#bt, #ot, ctx.packed_b(), #vocab, #dim, out, &|row: usize| {
            #decompose
            #id
        });
    }
}

fn concat(plan: &Plan, k: &Kernel, node: NodeId) -> TokenStream {
    let rt = RT();
    let g = &plan.graph;
    let Op::Concat { inputs, axis } = &g.node(node).op else {
        return quote!();
    };
    let out_shape = &g.ty(node).shape.0;
    let out_strides = crate::plan::access::contiguous_strides(out_shape);
    let out = out_index();
    // Where each input starts along the axis: a constant, or the sum of the lengths before it when the axis is
    // dynamic (`past + seq`).
    let (mut start, mut dynamic) = (Some(0usize), vec![quote!(0usize)]);
    let mut copies = Vec::new();
    for &input in inputs {
        let Some(read) = k.read(input) else { continue };
        let setup = read_setup(plan, k, read);
        let (buf, off, st) = (var("buf", input), var("off", input), var("st", input));
        let shape = read.access.shape.iter().map(dim_expr);
        let dst_strides = out_strides.iter().map(dim_expr);
        let dst_off = match start {
            Some(s) => dim_expr(&out_strides[*axis].mul(&crate::ir::Dim::fixed(s))),
            None => {
                let stride = dim_expr(&out_strides[*axis]);
                quote!(#stride * (#(#dynamic)+*))
            }
        };
        copies.push(quote! {{
            #setup
            #rt::strided_copy(#buf, #off, &#st, &[#(#shape),*], out, #dst_off, &[#(#dst_strides),*]);
        }});
        let len = &g.ty(input).shape.0[*axis];
        start = start.zip(len.as_static()).map(|(s, l)| s + l);
        dynamic.push(dim_expr(len));
    }
    quote! {
        let out = ctx.out_f32(#out);
        #(#copies)*
    }
}

/// `state.write(axis, start, value)`: the value copied by its longest contiguous runs into its span of the state's
/// buffer (the kernel's output), which it updates in place; the rest of the state is left as it was.
fn write_state(plan: &Plan, k: &Kernel, node: NodeId) -> TokenStream {
    let rt = RT();
    let g = &plan.graph;
    let Op::Write {
        state,
        axis,
        start,
        value,
    } = &g.node(node).op
    else {
        return quote!();
    };
    let strides = crate::plan::access::contiguous_strides(&g.ty(*state).shape.0);
    let dst_strides = strides.iter().map(dim_expr);
    let dst_off = dim_expr(&strides[*axis].mul(start));
    let out = out_index();
    let Some(read) = k.read(*value) else {
        // The kernel computes the value (RoPE of the new keys): its rows go straight to their places.
        let nodes: Vec<NodeId> = k.nodes.iter().copied().filter(|&n| n != node).collect();
        let reads = reads_of(plan, k, &nodes);
        let setup = setups(plan, k, &reads);
        let root = crate::plan::access::view_root(g, *value);
        let rows = computed_rows(plan, k, &nodes, root);
        let shape = g.ty(*value).shape.0.iter().map(dim_expr);
        return quote! {
            let out = ctx.out_f32(#out);
            #setup
            let value_rows = #rows;
            #rt::write_rows(&value_rows, &[#(#shape),*], out, #dst_off, &[#(#dst_strides),*]);
        };
    };
    let setup = read_setup(plan, k, read);
    let (buf, off, st) = (var("buf", *value), var("off", *value), var("st", *value));
    let shape = read.access.shape.iter().map(dim_expr);
    quote! {
        let out = ctx.out_f32(#out);
        #setup
        #rt::strided_copy(#buf, #off, &#st, &[#(#shape),*], out, #dst_off, &[#(#dst_strides),*]);
    }
}
