//! Human-readable forms of a plan: the text dump (golden files, plan hash), the DOT graph with fusion groups, and
//! the modelled bytes each kernel moves.

use std::fmt::Write;

use super::{Kernel, Plan, Storage};
use crate::ir::{Dim, Graph, Op};

fn fmt_sum(g: &Graph, terms: &[Dim]) -> String {
    if terms.is_empty() {
        return "0".into();
    }
    terms
        .iter()
        .map(|t| g.fmt_dim(t))
        .collect::<Vec<_>>()
        .join(" + ")
}

/// The constant a derived dim subtracts, as the dumps write it: nothing for a plain sum.
fn less(n: usize) -> String {
    if n > 0 {
        format!(" - {n}")
    } else {
        String::new()
    }
}

/// The IR as text: one line per node with its type.
pub fn dump_graph(g: &Graph) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "dyn dims: [{}]", g.dyn_dims.join(", "));
    for d in &g.derived {
        let terms: Vec<String> = d
            .terms
            .iter()
            .map(|t| format!("{}{:?}", t.coeff, t.syms))
            .collect();
        let _ = writeln!(
            out,
            "sum dim {}: {}{}",
            d.sym,
            terms.join(" + "),
            less(d.less)
        );
    }
    for (i, input) in g.inputs.iter().enumerate() {
        let _ = writeln!(
            out,
            "input{i} {}: {} {}",
            input.name,
            input.ty.dtype.name(),
            g.fmt_shape(&input.ty.shape)
        );
    }
    for (i, p) in g.params.iter().enumerate() {
        let _ = writeln!(out, "param{i} {}: {}", p.name, g.fmt_shape(&p.ty.shape));
    }
    for id in g.ids() {
        let node = g.node(id);
        let operands: Vec<String> = node.op.operands().iter().map(|o| o.to_string()).collect();
        let extra = match &node.op {
            Op::Reduce { axis, keepdim, .. } => format!(" axis={axis} keepdim={keepdim}"),
            Op::Softmax { axis, .. } | Op::Cumsum { axis, .. } => format!(" axis={axis}"),
            Op::LayerNorm { eps, .. } | Op::RmsNorm { eps, .. } => format!(" eps={eps:e}"),
            Op::Permute { perm, .. } => format!(" perm={perm:?}"),
            Op::Slice {
                axis, start, len, ..
            } => match (start.as_static(), len.as_static()) {
                (Some(start), Some(len)) => format!(" axis={axis} {start}..{}", start + len),
                _ => format!(
                    " axis={axis} start={} len={}",
                    g.fmt_dim(start),
                    g.fmt_dim(len)
                ),
            },
            Op::Concat { axis, .. } => format!(" axis={axis}"),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "{id} = {}({}){extra} : {} {}",
            node.op.name(),
            operands.join(", "),
            node.ty.dtype.name(),
            g.fmt_shape(&node.ty.shape)
        );
    }
    let outs: Vec<String> = g.outputs.iter().map(|o| o.to_string()).collect();
    let _ = writeln!(out, "outputs: {}", outs.join(", "));
    out
}

/// The plan as text; its FNV-1a hash is the plan hash.
pub fn dump(plan: &Plan) -> String {
    let g = &plan.graph;
    let mut out = String::new();
    let _ = writeln!(out, "plan {:?}: {} kernels", plan.mode, plan.kernels.len());
    // The runtime computes these from the free dims, so their definitions are part of the plan (and its hash).
    for d in &g.derived {
        let _ = writeln!(
            out,
            "sum dim {} = {}{}",
            g.dyn_dims[d.sym as usize],
            d.terms
                .iter()
                .map(|t| format!("{}{:?}", t.coeff, t.syms))
                .collect::<Vec<_>>()
                .join(" + "),
            less(d.less)
        );
    }
    for k in &plan.kernels {
        let ops: Vec<String> = k
            .nodes
            .iter()
            .map(|&n| format!("{n}:{}", g.node(n).op.name()))
            .collect();
        let _ = writeln!(
            out,
            "{} -> {} {} [{}]",
            k.name,
            k.output,
            g.fmt_shape(&g.ty(k.output).shape),
            ops.join(" ")
        );
        if let Some(w) = &k.write {
            let strides: Vec<String> = w.strides.iter().map(|s| g.fmt_dim(s)).collect();
            let _ = writeln!(out, "  write {} strides [{}]", w.base, strides.join(", "));
        }
        for r in &k.reads {
            let strides: Vec<String> = r.access.strides.iter().map(|s| g.fmt_dim(s)).collect();
            let _ = writeln!(
                out,
                "  read {} via {} at {} offset {} strides [{}]",
                r.node,
                r.access.base,
                g.fmt_shape(&crate::ir::Shape(r.access.shape.clone())),
                fmt_sum(g, &r.access.offset),
                strides.join(", ")
            );
        }
    }
    let _ = writeln!(out, "memory:");
    for (i, slot) in plan.memory.slots.iter().enumerate() {
        let _ = writeln!(out, "  slot{i} size {} bytes", g.fmt_dim(&slot.bytes()));
    }
    for (b, &(node, _)) in plan.buffers.iter().enumerate() {
        let _ = writeln!(out, "  buffer{b} {node} {:?}", plan.storage_of(b));
    }
    for r in &plan.refusals {
        let _ = writeln!(
            out,
            "not fused: {} -> {}: {}",
            r.producer, r.consumer, r.why
        );
    }
    for b in super::bounds::unproved(g) {
        let _ = writeln!(
            out,
            "checked per call: {} axis {}: {}",
            b.node,
            b.axis,
            b.text(g)
        );
    }
    out
}

/// Bytes a kernel moves, as monomials: each distinct value read once, plus the output written once.
pub fn kernel_bytes(g: &Graph, k: &Kernel) -> Vec<Dim> {
    let mut bases = Vec::new();
    for r in &k.reads {
        if !bases.contains(&r.access.base) {
            bases.push(r.access.base);
        }
    }
    bases.push(k.output);
    bases
        .into_iter()
        .map(|b| {
            let ty = g.ty(b);
            ty.shape.numel().mul(&Dim::fixed(ty.dtype.size()))
        })
        .collect()
}

/// The graph in Graphviz DOT, one cluster per kernel.
pub fn dot(plan: &Plan) -> String {
    let g = &plan.graph;
    let mut out =
        String::from("digraph fuse {\n  rankdir=TB;\n  node [shape=box, fontname=monospace];\n");
    for id in g.ids() {
        let node = g.node(id);
        let shape = if node.op.is_leaf() { "ellipse" } else { "box" };
        let _ = writeln!(
            out,
            "  n{} [label=\"{} {}\\n{}\", shape={shape}];",
            id.0,
            id,
            node.op.name(),
            g.fmt_shape(&node.ty.shape)
        );
    }
    for k in &plan.kernels {
        let _ = writeln!(
            out,
            "  subgraph cluster_{} {{\n    label=\"{}\"; style=filled; color=lightblue;",
            k.name, k.name
        );
        for n in &k.nodes {
            let _ = writeln!(out, "    n{};", n.0);
        }
        let _ = writeln!(out, "  }}");
    }
    for id in g.ids() {
        for o in g.node(id).op.operands() {
            let _ = writeln!(out, "  n{} -> n{};", o.0, id.0);
        }
    }
    for (b, &(node, _)) in plan.buffers.iter().enumerate() {
        if let Storage::Output(i) = plan.storage_of(b) {
            let _ = writeln!(
                out,
                "  out{i} [label=\"output {i}\", shape=ellipse];\n  n{} -> out{i};",
                node.0
            );
        }
    }
    out.push_str("}\n");
    out
}
