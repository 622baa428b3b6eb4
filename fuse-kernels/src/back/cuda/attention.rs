//! The attention kernel on the GPU: one warp per query row, streaming the keys with an online softmax, so neither
//! the scores nor the probabilities are ever stored. The warp's lanes share the query row and the output row
//! (element `c` on lane `c % 32`, in registers); for each key they reduce `q·k` with shuffles, apply the
//! elementwise chain, rescale the running sum and the output, and add the key's `V` row — every load of `K` and
//! `V` coalesced when the head dim is the contiguous one.

use std::collections::BTreeSet;
use std::fmt::{self, Write};

use super::expr::{self, Section};
use super::{signature, Ctx};
use crate::ir::{Dim, Graph, NodeId, Op};
use crate::plan::Attention;

/// Query rows per block: one per warp.
pub const ROWS_PER_BLOCK: u32 = 4;

/// The number of query rows (`Π batch · m`) the grid covers.
pub fn rows(g: &Graph, att: &Attention) -> Dim {
    let shape = &g.ty(att.scores).shape.0;
    shape[..shape.len() - 1]
        .iter()
        .fold(Dim::fixed(1), |acc, d| acc.mul(d))
}

pub fn write(w: &mut String, cx: &Ctx, symbol: &str, att: &Attention) -> fmt::Result {
    let (g, k) = (cx.g, cx.k);
    let (Op::MatMul(q, kt), Op::MatMul(_, v), Op::Softmax { input, .. }) = (
        &g.node(att.scores).op,
        &g.node(att.output).op,
        &g.node(att.softmax).op,
    ) else {
        return writeln!(w, "#error \"fuse: not an attention kernel\"");
    };
    let position = |n: NodeId| k.reads.iter().position(|r| r.node == n);
    let (Some(ik), Some(iv)) = (position(*kt), position(*v)) else {
        return writeln!(w, "#error \"fuse: attention operands are not reads\"");
    };
    // Q is read, or computed from the query nodes (then `iq` is `None`).
    let iq = position(*q);
    let query_nodes = att.query_nodes(g, k);
    if iq.is_none() && att.query.is_none() {
        return writeln!(w, "#error \"fuse: attention reads no Q\"");
    }
    let shape = &g.ty(att.scores).shape.0;
    let rank = shape.len();
    let head = |d: &Dim| d.as_static().unwrap_or(0);
    let (d, dv) = (
        head(&g.ty(*q).shape.0[rank - 1]),
        head(&g.ty(att.output).shape.0[rank - 1]),
    );
    let chain = att.chain(g, k);
    // The reads only the query nodes use: at the query value's own indices, not the scores'.
    let query_only: BTreeSet<usize> = (0..k.reads.len())
        .filter(|&i| {
            let uses = |n: &NodeId| g.node(*n).op.operands().contains(&k.reads[i].node);
            query_nodes.iter().any(uses)
                && !k
                    .nodes
                    .iter()
                    .filter(|n| !query_nodes.contains(n))
                    .any(uses)
        })
        .collect();

    let threads = 32 * ROWS_PER_BLOCK;
    signature(w, cx, symbol, threads)?;
    writeln!(
        w,
        "    const long long rows = {};",
        expr::dim(&rows(g, att))
    )?;
    writeln!(
        w,
        "    const long long n = {};",
        expr::dim(&shape[rank - 1])
    )?;
    writeln!(
        w,
        "    const long long row = (long long)blockIdx.x * {ROWS_PER_BLOCK} + threadIdx.y;"
    )?;
    writeln!(
        w,
        "    if (row >= rows) return;  // whole warps leave together: one row each"
    )?;
    writeln!(w, "    const int lane = threadIdx.x;")?;
    // The row's indices over `[batch.., m]`, as far as some read moves along them.
    let outer = &shape[..rank - 1];
    let mut needed = BTreeSet::new();
    for r in k
        .reads
        .iter()
        .enumerate()
        .filter(|(i, _)| !query_only.contains(i))
        .map(|(_, r)| r)
    {
        needed.extend(
            (0..rank - 1).filter(|&p| p < r.access.shape.len() && expr::moves(&r.access, p)),
        );
    }
    // A placed output (heads written into the layout the reader wants) needs every outer index.
    if let Some(placed) = &k.write {
        needed.extend((0..rank - 1).filter(|&p| expr::moves(placed, p)));
    }
    let idx = expr::unravel(w, "    ", "row", outer, &needed, "o")?;
    // Base offsets: Q and the chain's reads at this row (`b{i}`); K and V at this row's batch only (`bk`, `bv`).
    // One tensor may be read in several roles (V = Q, say), so each role has its own base.
    let batch_only: Vec<Option<String>> = idx
        .iter()
        .enumerate()
        .map(|(p, name)| (p + 2 < rank).then(|| name.clone()).flatten())
        .collect();
    let chain_reads = |i: usize| {
        chain
            .iter()
            .any(|n| g.node(*n).op.operands().contains(&k.reads[i].node))
    };
    for (i, r) in k.reads.iter().enumerate() {
        let only_k_or_v = (i == ik || i == iv) && iq != Some(i) && !chain_reads(i);
        if query_only.contains(&i) || only_k_or_v {
            continue;
        }
        writeln!(
            w,
            "    const long long b{i} = {};",
            expr::offset(&r.access, &idx)
        )?;
    }
    for (base, i) in [("bk", ik), ("bv", iv)] {
        writeln!(
            w,
            "    const long long {base} = {};",
            expr::offset(&k.reads[i].access, &batch_only)
        )?;
    }
    // Read `i`'s element at `index` along its matrix row axis and `col` along its last axis, from `base`.
    let element_from = |base: &str, i: usize, row: Option<&str>, col: &str| -> String {
        let a = &k.reads[i].access;
        let mut parts = vec![base.to_string()];
        for (axis, index) in [(rank - 2, row), (rank - 1, Some(col))] {
            if let Some(index) = index.filter(|_| expr::moves(a, axis)) {
                parts.push(expr::scaled(index, &a.strides[axis]));
            }
        }
        parts.join(" + ")
    };
    let element =
        |i: usize, row: Option<&str>, col: &str| element_from(&format!("b{i}"), i, row, col);
    let (qi, vi) = (d.div_ceil(32).max(1), dv.div_ceil(32).max(1));
    writeln!(w, "    float qr[{qi}], acc[{vi}];")?;
    writeln!(w, "#pragma unroll")?;
    writeln!(w, "    for (int t = 0; t < {qi}; ++t) {{")?;
    writeln!(w, "        const long long c = lane + 32 * t;")?;
    match (iq, att.query) {
        (Some(iq), _) => writeln!(
            w,
            "        qr[t] = c < {d} ? fuse_to_f32(in{iq}[{}]) : 0.0f;",
            element(iq, None, "c")
        )?,
        (None, Some(root)) => {
            // Q's rows are the query value's rows: element `c` of row `row` is its element `row · d + c`.
            writeln!(w, "        qr[t] = 0.0f;")?;
            writeln!(w, "        if (c < {d}) {{")?;
            writeln!(w, "            const long long qi = row * {d} + c;")?;
            let value = super::piecewise::emit_value(
                w,
                "            ",
                cx,
                &query_nodes,
                (root, "qi"),
                "qv",
            )?;
            writeln!(w, "            qr[t] = {value};")?;
            writeln!(w, "        }}")?;
        }
        (None, None) => {}
    }
    writeln!(w, "    }}")?;
    writeln!(w, "#pragma unroll")?;
    writeln!(w, "    for (int t = 0; t < {vi}; ++t) acc[t] = 0.0f;")?;
    writeln!(
        w,
        "    float running_max = FUSE_NEG_INF, running_sum = 0.0f;"
    )?;
    writeln!(w, "    for (long long j = 0; j < n; ++j) {{")?;
    writeln!(w, "        float part = 0.0f;")?;
    writeln!(w, "#pragma unroll")?;
    writeln!(w, "        for (int t = 0; t < {qi}; ++t) {{")?;
    writeln!(w, "            const long long c = lane + 32 * t;")?;
    let k_at = element_from("bk", ik, Some("c"), "j");
    writeln!(
        w,
        "            if (c < {d}) part += qr[t] * fuse_to_f32(in{ik}[{k_at}]);"
    )?;
    writeln!(w, "        }}")?;
    writeln!(w, "        const float score = fuse_warp_sum(part);")?;
    let chain_offset = |i: usize| element(i, None, "j");
    let scores = att.scores;
    let known = move |n: NodeId| (n == scores).then(|| "score".to_string());
    let section = Section {
        tag: "c",
        offset: &chain_offset,
        known: &known,
    };
    let s = expr::emit_nodes(w, "        ", cx, &chain, *input, &section)?;
    writeln!(w, "        const float s = {s};")?;
    // `fuse_max`, not `fmaxf`: a NaN score makes the row NaN, as it does on the CPU; `fmaxf` skipped it, and as
    // the first score it then weighed nothing.
    writeln!(w, "        const float top = fuse_max(running_max, s);")?;
    writeln!(
        w,
        "        // Nothing but -inf so far: no rescaling, and a -inf score weighs nothing."
    )?;
    writeln!(
        w,
        "        const float rescale = top == FUSE_NEG_INF ? 1.0f : expf(running_max - top);"
    )?;
    writeln!(
        w,
        "        const float p = top == FUSE_NEG_INF ? 0.0f : expf(s - top);"
    )?;
    writeln!(w, "        running_sum = running_sum * rescale + p;")?;
    writeln!(w, "        running_max = top;")?;
    let v_at = element_from("bv", iv, Some("j"), "c");
    writeln!(w, "#pragma unroll")?;
    writeln!(w, "        for (int t = 0; t < {vi}; ++t) {{")?;
    writeln!(w, "            const long long c = lane + 32 * t;")?;
    writeln!(
        w,
        "            if (c < {dv}) acc[t] = acc[t] * rescale + p * fuse_to_f32(in{iv}[{v_at}]);"
    )?;
    writeln!(w, "        }}")?;
    writeln!(w, "    }}")?;
    // Element `c` of the row: contiguous rows, or where the kernel's write places it.
    let placed_at = match &k.write {
        Some(placed) => {
            let mut at = idx.clone();
            at.push(Some("c".to_string()));
            expr::offset(placed, &at)
        }
        None => format!("row * {dv} + c"),
    };
    writeln!(w, "#pragma unroll")?;
    writeln!(w, "    for (int t = 0; t < {vi}; ++t) {{")?;
    writeln!(w, "        const long long c = lane + 32 * t;")?;
    // A row whose every key is masked (-inf) weighed nothing: zeros, as the softmax gives, not 0 / 0.
    writeln!(
        w,
        "        if (c < {dv}) out[{}] = {}(running_sum == 0.0f ? 0.0f : acc[t] / running_sum);",
        placed_at,
        cx.store()
    )?;
    writeln!(w, "    }}")?;
    writeln!(w, "}}")
}
