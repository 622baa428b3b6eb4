//! Row kernels: softmax, layer norm, RMS norm and reductions along one axis. A warp (short or dynamic rows) or a
//! block (long static rows) owns a row; the prologue is computed while the row is loaded into registers, the
//! statistics are warp-shuffle / shared-memory reductions over those registers, and the epilogue is applied on
//! the way out — one read and one write of the row. Rows too long for the register cache (or dynamic rows that
//! turn out to be) recompute the prologue on each pass instead, reading the row again from L2.

use std::collections::BTreeSet;
use std::fmt::{self, Write};

use super::expr;
use super::row_passes::Body;
use super::{signature, Ctx};
use crate::ir::{Dim, Graph, NodeId, Op};
use crate::plan::access::contiguous_strides;

/// Most row elements one thread keeps in registers.
const MAX_ITEMS: u32 = 16;

/// How a row kernel is laid out on the GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowConfig {
    /// Threads that cooperate on one row: 32 (one warp, several rows per block) or a whole block.
    pub threads: u32,
    pub rows_per_block: u32,
    /// Register cache per thread (elements).
    pub items: u32,
    /// Whether the row may not fit the cache: then the kernel also has a multi-pass loop.
    pub multipass: bool,
    /// Whether the row always fits the cache.
    pub cached: bool,
}

/// The row input, the axis and the row length and count of a row anchor.
pub fn geometry(g: &Graph, anchor: NodeId) -> Option<(NodeId, usize, Dim, Dim)> {
    let (x, axis) = match &g.node(anchor).op {
        Op::Softmax { input, axis }
        | Op::Cumsum { input, axis }
        | Op::Reduce { input, axis, .. } => (*input, *axis),
        Op::LayerNorm { input, .. } | Op::RmsNorm { input, .. } => {
            (*input, g.ty(*input).shape.rank().checked_sub(1)?)
        }
        _ => return None,
    };
    let dims = &g.ty(x).shape.0;
    let len = dims.get(axis)?.clone();
    let rows = dims
        .iter()
        .enumerate()
        .filter(|&(d, _)| d != axis)
        .fold(Dim::fixed(1), |acc, (_, d)| acc.mul(d));
    Some((x, axis, len, rows))
}

pub fn config(len: &Dim) -> RowConfig {
    let Some(len) = len.as_static() else {
        // A dynamic row (softmax over `seq`) is usually short: a warp per row, cached up to 512 elements.
        return RowConfig {
            threads: 32,
            rows_per_block: 4,
            items: MAX_ITEMS,
            multipass: true,
            cached: true,
        };
    };
    for threads in [32u32, 128, 256, 512, 1024] {
        let items = len.div_ceil(threads as usize) as u32;
        if items <= MAX_ITEMS {
            let rows_per_block = if threads == 32 { 4 } else { 1 };
            return RowConfig {
                threads,
                rows_per_block,
                items: items.max(1),
                multipass: false,
                cached: true,
            };
        }
    }
    RowConfig {
        threads: 1024,
        rows_per_block: 1,
        items: 0,
        multipass: true,
        cached: false,
    }
}

/// Where a read sits relative to the row.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Read at the row input's shape: one element per row element.
    AtRow,
    /// gamma / beta: a vector along the row.
    Vector,
    /// Read at a reduction's output shape: one element per row.
    AtReduced,
}

/// The start of a row kernel (built-in or row region): its signature, the reduction scratch, `rows`, `len`, which
/// `row` this warp or block owns (leaving when past the last) and `tid`, the thread's lane along the row.
pub fn preamble(
    w: &mut String,
    cx: &Ctx,
    symbol: &str,
    cfg: &RowConfig,
    rows: &Dim,
    len: &Dim,
) -> fmt::Result {
    signature(w, cx, symbol, cfg.threads * cfg.rows_per_block)?;
    if cfg.threads > 32 {
        writeln!(w, "    __shared__ float smem[32];")?;
    }
    writeln!(w, "    const long long rows = {};", expr::dim(rows))?;
    writeln!(w, "    const long long len = {};", expr::dim(len))?;
    if cfg.rows_per_block > 1 {
        writeln!(
            w,
            "    const long long row = (long long)blockIdx.x * {} + threadIdx.y;",
            cfg.rows_per_block
        )?;
    } else {
        writeln!(w, "    const long long row = blockIdx.x;")?;
    }
    writeln!(
        w,
        "    if (row >= rows) return;  // whole warps / blocks leave together: one row each"
    )?;
    writeln!(w, "    const int tid = threadIdx.x;")
}

pub fn write(w: &mut String, cx: &Ctx, symbol: &str, anchor: NodeId) -> fmt::Result {
    let (g, k) = (cx.g, cx.k);
    let Some((x, axis, len, rows)) = geometry(g, anchor) else {
        return writeln!(
            w,
            "#error \"fuse: {} is not a row op\"",
            g.node(anchor).op.name()
        );
    };
    let cfg = config(&len);
    let shape = &g.ty(x).shape.0;
    let rank = shape.len();
    let reduce = matches!(g.node(anchor).op, Op::Reduce { .. });
    let (gamma, beta) = match &g.node(anchor).op {
        Op::LayerNorm { gamma, beta, .. } => (Some(*gamma), Some(*beta)),
        Op::RmsNorm { gamma, .. } => (Some(*gamma), None),
        _ => (None, None),
    };

    // The prologue is what the row input depends on inside this kernel; everything else after the anchor.
    let mut before = BTreeSet::new();
    let mut stack = vec![x];
    while let Some(n) = stack.pop() {
        if k.computes(n) && n != anchor && before.insert(n) {
            stack.extend(g.node(n).op.operands());
        }
    }
    let prologue: Vec<NodeId> = k
        .nodes
        .iter()
        .copied()
        .filter(|n| before.contains(n))
        .collect();
    let epilogue: Vec<NodeId> = k
        .nodes
        .iter()
        .copied()
        .filter(|n| !before.contains(n) && *n != anchor)
        .collect();
    let pro_reads: BTreeSet<usize> = expr::used_reads(cx, &prologue, x, &|_| false)
        .into_iter()
        .collect();
    let role = |i: usize| {
        let node = k.reads[i].node;
        if Some(node) == gamma || Some(node) == beta {
            Role::Vector
        } else if node == x || pro_reads.contains(&i) || !reduce {
            Role::AtRow
        } else {
            // An epilogue read after a reduction: one value per row.
            Role::AtReduced
        }
    };
    let last = axis + 1 == rank;
    let fast = |i: usize| last && k.reads[i].access.is_contiguous();

    // Outer (non-axis) dims, unravelled from the row number as far as some read or the output needs them.
    let outer: Vec<usize> = (0..rank).filter(|&d| d != axis).collect();
    let outer_dims: Vec<Dim> = outer.iter().map(|&d| shape[d].clone()).collect();
    let mut needed = BTreeSet::new();
    for i in 0..k.reads.len() {
        let a = &k.reads[i].access;
        match role(i) {
            Role::Vector => {}
            _ if fast(i) => {}
            Role::AtReduced if a.shape.len() + 1 == rank => {
                needed.extend((0..a.shape.len()).filter(|&p| expr::moves(a, p)));
            }
            _ => needed.extend(
                outer
                    .iter()
                    .enumerate()
                    .filter(|&(_, &d)| d < a.shape.len() && expr::moves(a, d))
                    .map(|(p, _)| p),
            ),
        }
    }
    if !reduce && !last {
        needed.extend((0..outer.len()).filter(|&p| !outer_dims[p].is_one()));
    }

    preamble(w, cx, symbol, &cfg, &rows, &len)?;
    let outer_idx = expr::unravel(w, "    ", "row", &outer_dims, &needed, "o")?;
    let mut at_shape: Vec<Option<String>> = vec![None; rank];
    for (p, &d) in outer.iter().enumerate() {
        at_shape[d] = outer_idx[p].clone();
    }

    // Per-read base offsets of this row, and each read's element offset at row position `j`.
    let mut steps: Vec<Option<String>> = vec![None; k.reads.len()];
    for (i, step) in steps.iter_mut().enumerate() {
        let a = &k.reads[i].access;
        let base = match role(i) {
            Role::Vector => continue,
            // Contiguous along the last axis: the row starts at `row * len` (or element `row` of a reduction's
            // output) and its elements are consecutive.
            _ if fast(i) => {
                let off = expr::sum(&a.offset);
                if role(i) == Role::AtReduced {
                    expr::plus(&off, "row")
                } else {
                    *step = Some("j".into());
                    expr::plus(&off, "row * len")
                }
            }
            Role::AtReduced if a.shape.len() + 1 == rank => expr::offset(a, &outer_idx),
            role => {
                let idx: Vec<Option<String>> =
                    at_shape.iter().take(a.shape.len()).cloned().collect();
                if role == Role::AtRow && axis < a.shape.len() && expr::moves(a, axis) {
                    *step = Some(expr::scaled("j", &a.strides[axis]));
                }
                expr::offset(a, &idx)
            }
        };
        writeln!(w, "    const long long b{i} = {base};")?;
    }
    let offset = |i: usize| -> String {
        let a = &k.reads[i].access;
        match (role(i), &steps[i]) {
            (Role::Vector, _) => {
                let last = a.strides.len().saturating_sub(1);
                let j = if a.strides.is_empty() || !expr::moves(a, last) {
                    None
                } else {
                    Some(expr::scaled("j", &a.strides[last]))
                };
                let off = expr::sum(&a.offset);
                j.map_or_else(|| off.clone(), |j| expr::plus(&off, &j))
            }
            (_, Some(step)) => format!("b{i} + {step}"),
            (_, None) => format!("b{i}"),
        }
    };
    let out_at = if last {
        "row * len + j".to_string()
    } else {
        let cs = contiguous_strides(shape);
        let mut parts: Vec<String> = outer
            .iter()
            .enumerate()
            .filter_map(|(p, &d)| outer_idx[p].as_ref().map(|n| expr::scaled(n, &cs[d])))
            .collect();
        parts.push(expr::scaled("j", &cs[axis]));
        parts.join(" + ")
    };

    let body = Body {
        cx,
        cfg,
        x,
        anchor,
        prologue: &prologue,
        epilogue: &epilogue,
        offset: &offset,
        out_at,
        static_len: len.as_static(),
    };
    match (cfg.cached, cfg.multipass) {
        (true, true) => {
            writeln!(w, "    if (len <= {}LL) {{", cfg.items * cfg.threads)?;
            body.anchor_code(w, "        ", true)?;
            writeln!(w, "    }} else {{")?;
            body.anchor_code(w, "        ", false)?;
            writeln!(w, "    }}")?;
        }
        (cached, _) => body.anchor_code(w, "    ", cached)?,
    }
    writeln!(w, "}}")
}
