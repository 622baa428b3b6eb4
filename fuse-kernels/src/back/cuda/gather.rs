//! Gather (embedding lookup) and concat kernels: grid-stride loops over the output that pick their source element
//! per output element. Both are rare in a forward pass (once per model, or on small tensors), so they stay simple.

use std::collections::BTreeSet;
use std::fmt::{self, Write};

use super::elementwise::THREADS;
use super::{expr, signature, Ctx};
use crate::ir::{DType, NodeId, Op};

/// The signature and the grid-stride loop over the output's elements, opened on `i`.
pub(super) fn loop_head(w: &mut String, cx: &Ctx, symbol: &str) -> fmt::Result {
    signature(w, cx, symbol, THREADS)?;
    writeln!(
        w,
        "    const long long n = {};",
        expr::dim(&cx.g.ty(cx.k.output).shape.numel())
    )?;
    writeln!(
        w,
        "    const long long step = (long long)gridDim.x * blockDim.x;"
    )?;
    writeln!(w, "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {{")
}

fn read_of(cx: &Ctx, node: NodeId) -> Option<usize> {
    cx.k.reads.iter().position(|r| r.node == node)
}

/// `out[ids..., d] = table[ids[ids...], d]`; ids outside the table give zeros (the runtime validates ids before
/// launch, so this only guards memory).
pub fn write_gather(w: &mut String, cx: &Ctx, symbol: &str, node: NodeId) -> fmt::Result {
    let g = cx.g;
    let Op::Embedding { table, ids } = g.node(node).op else {
        return writeln!(w, "#error \"fuse: {node} is not an embedding\"");
    };
    let (Some(t), Some(r)) = (read_of(cx, table), read_of(cx, ids)) else {
        return writeln!(
            w,
            "#error \"fuse: embedding {node} has no table or ids read\""
        );
    };
    let table_dims = &g.ty(table).shape.0;
    let (Some(vocab), Some(width)) = (table_dims.first(), table_dims.get(1)) else {
        return writeln!(w, "#error \"fuse: embedding table of {node} is not 2-D\"");
    };
    loop_head(w, cx, symbol)?;
    let ind = "        ";
    writeln!(w, "{ind}const long long col = i % {};", expr::dim(width))?;
    writeln!(w, "{ind}const long long at = i / {};", expr::dim(width))?;
    let ids_access = &cx.k.reads[r].access;
    let ids_offset = if ids_access.is_contiguous() {
        expr::plus(&expr::sum(&ids_access.offset), "at")
    } else {
        let needed: BTreeSet<usize> = (0..ids_access.shape.len())
            .filter(|&d| expr::moves(ids_access, d))
            .collect();
        let idx = expr::unravel(w, ind, "at", &ids_access.shape, &needed, "x")?;
        expr::offset(ids_access, &idx)
    };
    let base = cx.k.reads[r].access.base;
    if g.ty(base).dtype == DType::I64 {
        writeln!(w, "{ind}const long long id = in{r}[{ids_offset}];")?;
    } else {
        // Ids the model computed: whole numbers below the table's rows (`crate::id_range`), kept in f32 whatever
        // the storage (`super::f32_values`), which holds them exactly up to 2^24.
        let rows = vocab.as_static().unwrap_or(usize::MAX);
        let exact = crate::id_range::F32_WHOLE_NUMBERS;
        if rows > exact + 1 {
            writeln!(
                w,
                "#error \"fuse: an embedding reads ids the model computes from a table of {rows} rows, but f32 holds \
                 whole numbers exactly only up to {exact}, so an id could be rounded to another row's\""
            )?;
        }
        writeln!(
            w,
            "{ind}const long long id = (long long)fuse_to_f32(in{r}[{ids_offset}]);"
        )?;
    }
    let row = expr::offset(
        &cx.k.reads[t].access,
        &[Some("id".into()), Some("col".into())],
    );
    writeln!(w, "{ind}float v = 0.0f;")?;
    writeln!(
        w,
        "{ind}if (id >= 0 && id < {}) v = fuse_to_f32(in{t}[{row}]);",
        expr::dim(vocab)
    )?;
    writeln!(w, "{ind}out[i] = {}(v);", cx.store())?;
    writeln!(w, "    }}")?;
    writeln!(w, "}}")
}

/// Each output element comes from the input whose span along the axis holds its index.
pub fn write_concat(w: &mut String, cx: &Ctx, symbol: &str, node: NodeId) -> fmt::Result {
    let g = cx.g;
    let Op::Concat { inputs, axis } = &g.node(node).op else {
        return writeln!(w, "#error \"fuse: {node} is not a concat\"");
    };
    let shape = &g.ty(node).shape.0;
    loop_head(w, cx, symbol)?;
    let ind = "        ";
    let needed: BTreeSet<usize> = (0..shape.len())
        .filter(|&d| d == *axis || !shape[d].is_one())
        .collect();
    let idx = expr::unravel(w, ind, "i", shape, &needed, "x")?;
    let along = idx
        .get(*axis)
        .cloned()
        .flatten()
        .unwrap_or_else(|| "0LL".into());
    writeln!(w, "{ind}float v = 0.0f;")?;
    // Where each input starts along the axis: a constant, or a sum of dims when the axis is dynamic (the static
    // case keeps its constants folded).
    let (mut start, mut start_text) = (Some(0usize), "0LL".to_string());
    for (p, &input) in inputs.iter().enumerate() {
        let Some(len) = g.ty(input).shape.0.get(*axis) else {
            return writeln!(w, "#error \"fuse: concat {node} has no axis {axis}\"");
        };
        let Some(r) = read_of(cx, input) else {
            return writeln!(w, "#error \"fuse: concat {node} does not read {input}\"");
        };
        let end = start.zip(len.as_static()).map(|(s, l)| s + l);
        let end_text = match end {
            Some(e) => format!("{e}LL"),
            None => format!("{start_text} + {}", expr::dim(len)),
        };
        let mut at = idx.clone();
        at[*axis] = Some(format!("({along} - {start_text})"));
        let cond = if p + 1 == inputs.len() {
            "".to_string()
        } else {
            format!("if ({along} < {end_text}) ")
        };
        let els = if p == 0 { "" } else { "else " };
        let offset = expr::offset(&cx.k.reads[r].access, &at);
        writeln!(w, "{ind}{els}{cond}v = fuse_to_f32(in{r}[{offset}]);")?;
        (start, start_text) = match end {
            Some(e) => (Some(e), format!("{e}LL")),
            None => (None, format!("({end_text})")),
        };
    }
    writeln!(w, "{ind}out[i] = {}(v);", cx.store())?;
    writeln!(w, "    }}")?;
    writeln!(w, "}}")
}

/// `state.write(axis, start, value)`: each element of the value goes to its place in the state's buffer, the index
/// along `axis` shifted by `start`. The loop runs over the value, not the (larger) state.
pub fn write_state(w: &mut String, cx: &Ctx, symbol: &str, node: NodeId) -> fmt::Result {
    let g = cx.g;
    let Op::Write {
        state,
        axis,
        start,
        value,
    } = &g.node(node).op
    else {
        return writeln!(w, "#error \"fuse: {node} is not a state write\"");
    };
    // The value is read, or computed by the kernel's other nodes (RoPE of the new keys).
    let read = read_of(cx, *value);
    let computed: Vec<NodeId> = cx.k.nodes.iter().copied().filter(|&n| n != node).collect();
    if read.is_none() && computed.is_empty() {
        return writeln!(w, "#error \"fuse: write {node} does not read {value}\"");
    }
    let shape = &g.ty(*value).shape.0;
    let strides = crate::plan::access::contiguous_strides(&g.ty(*state).shape.0);
    signature(w, cx, symbol, THREADS)?;
    writeln!(
        w,
        "    const long long n = {};",
        expr::dim(&g.ty(*value).shape.numel())
    )?;
    writeln!(
        w,
        "    const long long step = (long long)gridDim.x * blockDim.x;"
    )?;
    writeln!(w, "    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {{")?;
    let ind = "        ";
    let needed: BTreeSet<usize> = (0..shape.len()).filter(|&d| !shape[d].is_one()).collect();
    let idx = expr::unravel(w, ind, "i", shape, &needed, "x")?;
    let mut dst: Vec<String> = vec![format!(
        "{} * {}",
        expr::dim(start),
        expr::dim(&strides[*axis])
    )];
    for (d, name) in idx.iter().enumerate() {
        if let Some(name) = name {
            dst.push(format!("{name} * {}", expr::dim(&strides[d])));
        }
    }
    match read {
        Some(r) => {
            let src = expr::offset(&cx.k.reads[r].access, &idx);
            writeln!(w, "{ind}out[{}] = in{r}[{src}];", dst.join(" + "))?;
        }
        None => {
            // Element `i` of the value is element `i` of the value it is a contiguous view of.
            let root = crate::plan::access::view_root(g, *value);
            let v = super::piecewise::emit_value(w, ind, cx, &computed, (root, "i"), "w")?;
            writeln!(w, "{ind}out[{}] = {}({v});", dst.join(" + "), cx.store())?;
        }
    }
    writeln!(w, "    }}")?;
    writeln!(w, "}}")
}
