//! Row-region kernels (written-out norms, see `plan::row_region`): a warp or a block owns a row, as for the
//! built-in row ops ([`super::row::config`]); each reduction is a strided pass over the row that recomputes the
//! row nodes it needs, reduced with a warp shuffle or through shared memory; per-row values follow once; a last
//! pass writes the output row.

use std::collections::BTreeSet;
use std::fmt::{self, Write};

use super::expr::{self, Section};
use super::{row, Ctx};
use crate::ir::{Dim, NodeId, Op, ReduceOp};
use crate::plan::row_region::{place, Place};

/// The row length and row count of a row-region kernel (its output iterates the rows).
pub fn geometry(cx: &Ctx) -> Option<(Dim, Dim)> {
    let dims = &cx.g.ty(cx.k.output).shape.0;
    let (len, outer) = dims.split_last()?;
    let rows = outer.iter().fold(Dim::fixed(1), |acc, d| acc.mul(d));
    Some((len.clone(), rows))
}

/// The row nodes of the kernel that `value` depends on, in graph order, stopping at per-row values and reads.
fn row_chain(cx: &Ctx, value: NodeId) -> Vec<NodeId> {
    let (g, k) = (cx.g, cx.k);
    let rows = &g.ty(k.output).shape;
    let mut needed = BTreeSet::new();
    let mut stack = vec![value];
    while let Some(n) = stack.pop() {
        if !k.computes(n) || needed.contains(&n) || place(g, rows, n) != Some(Place::Row) {
            continue;
        }
        needed.insert(n);
        stack.extend(g.node(n).op.operands());
    }
    k.nodes
        .iter()
        .copied()
        .filter(|n| needed.contains(n))
        .collect()
}

pub fn write(w: &mut String, cx: &Ctx, symbol: &str) -> fmt::Result {
    let (g, k) = (cx.g, cx.k);
    let Some((len, rows)) = geometry(cx) else {
        return writeln!(w, "#error \"fuse: a row region needs rows\"");
    };
    let shape = &g.ty(k.output).shape;
    let rank = shape.rank();
    let cfg = row::config(&len);
    let threads = cfg.threads;
    row::preamble(w, cx, symbol, &cfg, &rows, &len)?;
    let outer_dims: Vec<Dim> = shape.0[..rank - 1].to_vec();
    let needed: BTreeSet<usize> = (0..rank - 1)
        .filter(|&d| k.reads.iter().any(|r| expr::moves(&r.access, d)))
        .collect();
    let outer_idx = expr::unravel(w, "    ", "row", &outer_dims, &needed, "o")?;
    // Each read's base offset for this row; row reads step along the row with `j`.
    for (i, r) in k.reads.iter().enumerate() {
        writeln!(
            w,
            "    const long long b{i} = {};",
            expr::offset(&r.access, &outer_idx)
        )?;
    }
    let offset = |i: usize| -> String {
        let a = &k.reads[i].access;
        if expr::moves(a, rank - 1) {
            format!("b{i} + {}", expr::scaled("j", &a.strides[rank - 1]))
        } else {
            format!("b{i}")
        }
    };
    // Per-row values are `pv{position}`: loads are `{tag}r{read}` and row values `v{position}`, so none collide.
    let name = |id: NodeId| format!("pv{}", k.nodes.iter().position(|&n| n == id).unwrap_or(0));
    // Per-row values computed so far, by name.
    let mut done: Vec<NodeId> = Vec::new();
    let (sum, max) = if threads == 32 {
        ("fuse_warp_sum({})", "fuse_warp_max({})")
    } else {
        ("fuse_block_sum({}, smem)", "fuse_block_max({}, smem)")
    };
    for (step, &id) in k.nodes.iter().enumerate() {
        if place(g, shape, id) != Some(Place::PerRow) {
            continue;
        }
        let known = |n: NodeId| done.contains(&n).then(|| name(n));
        match &g.node(id).op {
            Op::Reduce { op, input, .. } => {
                let (init, combine, finish) = match op {
                    ReduceOp::Sum => ("0.0f", "acc + v", sum.replace("{}", "acc")),
                    ReduceOp::Mean => (
                        "0.0f",
                        "acc + v",
                        format!("{} / (float)len", sum.replace("{}", "acc")),
                    ),
                    ReduceOp::Max => ("FUSE_NEG_INF", "fuse_max(acc, v)", max.replace("{}", "acc")),
                };
                writeln!(w, "    float {} = 0.0f;", name(id))?;
                writeln!(w, "    {{")?;
                writeln!(w, "        float acc = {init};")?;
                writeln!(
                    w,
                    "        for (long long j = tid; j < len; j += {threads}) {{"
                )?;
                let section = Section {
                    tag: "p",
                    offset: &offset,
                    known: &known,
                };
                let chain = row_chain(cx, *input);
                let v = expr::emit_nodes(w, "            ", cx, &chain, *input, &section)?;
                writeln!(w, "            const float v = {v};")?;
                writeln!(w, "            acc = {combine};")?;
                writeln!(w, "        }}")?;
                writeln!(w, "        {} = {finish};", name(id))?;
                writeln!(w, "    }}")?;
            }
            _ => {
                let tag = format!("s{step}_");
                let section = Section {
                    tag: &tag,
                    offset: &offset,
                    known: &known,
                };
                writeln!(w, "    float {};", name(id))?;
                writeln!(w, "    {{")?;
                let v = expr::emit_nodes(w, "        ", cx, &[id], id, &section)?;
                writeln!(w, "        {} = {v};", name(id))?;
                writeln!(w, "    }}")?;
            }
        }
        done.push(id);
    }
    let known = |n: NodeId| done.contains(&n).then(|| name(n));
    writeln!(w, "    for (long long j = tid; j < len; j += {threads}) {{")?;
    let section = Section {
        tag: "e",
        offset: &offset,
        known: &known,
    };
    let chain = row_chain(cx, k.output);
    let v = expr::emit_nodes(w, "        ", cx, &chain, k.output, &section)?;
    writeln!(w, "        out[row * len + j] = {}({v});", cx.store())?;
    writeln!(w, "    }}")?;
    writeln!(w, "}}")
}
