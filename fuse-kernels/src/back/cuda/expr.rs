//! C expressions shared by every kernel kind: symbolic dims, strided offsets, index unravelling, and the value of
//! each elementwise op. Everything index-like is `long long`: a dynamic `batch·seq·seq·heads` easily passes 2³¹.

use std::collections::BTreeSet;
use std::fmt::{self, Write};

use super::Ctx;
use crate::ir::{BinaryOp, DType, Dim, NodeId, Op, UnaryOp};
use crate::plan::Access;

/// A dim as a C expression. Static dims become literals, so nvcc folds strides and turns divisions by them into
/// multiply-shifts; dynamic dims read the kernel's `dynN` parameters.
pub fn dim(d: &Dim) -> String {
    if d.syms.is_empty() {
        return format!("{}LL", d.coeff);
    }
    let mut parts: Vec<String> = Vec::new();
    if d.coeff != 1 {
        parts.push(format!("{}LL", d.coeff));
    }
    parts.extend(d.syms.iter().map(|s| format!("dyn{s}")));
    if parts.len() == 1 {
        parts.remove(0)
    } else {
        format!("({})", parts.join(" * "))
    }
}

/// A sum of monomials (an access offset) as a C expression.
pub fn sum(terms: &[Dim]) -> String {
    let parts: Vec<String> = terms.iter().filter(|t| t.coeff != 0).map(dim).collect();
    if parts.is_empty() {
        "0LL".into()
    } else {
        parts.join(" + ")
    }
}

/// `base + rest`, dropping a zero base.
pub fn plus(base: &str, rest: &str) -> String {
    if base == "0LL" {
        rest.to_string()
    } else {
        format!("{base} + {rest}")
    }
}

/// `index * stride`, dropping a stride of one.
pub fn scaled(index: &str, stride: &Dim) -> String {
    if stride.as_static() == Some(1) {
        index.to_string()
    } else {
        format!("{index} * {}", dim(stride))
    }
}

/// Whether dim `k` of an access moves the address (a broadcast or size-1 dim never does).
pub fn moves(a: &Access, k: usize) -> bool {
    !Access::is_broadcast(&a.strides[k]) && !a.shape[k].is_one()
}

/// `offset + Σ index[k] · stride[k]` over the dims that move; `index[k]` is `None` where the caller knows it is 0.
pub fn offset(a: &Access, index: &[Option<String>]) -> String {
    let mut parts = vec![sum(&a.offset)];
    for (k, idx) in index.iter().enumerate() {
        if let Some(idx) = idx {
            if k < a.strides.len() && moves(a, k) {
                parts.push(scaled(idx, &a.strides[k]));
            }
        }
    }
    if parts.len() > 1 && parts[0] == "0LL" {
        parts.remove(0);
    }
    parts.join(" + ")
}

/// Emits the row-major unravelling of `linear` over `dims` into `{prefix}{k}` variables, for the dims in `needed`
/// only (from the innermost up to the outermost needed one). Returns the index names (`None` for dims not needed).
pub fn unravel(
    w: &mut String,
    ind: &str,
    linear: &str,
    dims: &[Dim],
    needed: &BTreeSet<usize>,
    prefix: &str,
) -> Result<Vec<Option<String>>, fmt::Error> {
    let mut names = vec![None; dims.len()];
    let Some(&outermost) = needed.iter().next() else {
        return Ok(names);
    };
    writeln!(w, "{ind}long long {prefix}rem = {linear};")?;
    for k in (outermost..dims.len()).rev() {
        if dims[k].is_one() {
            continue;
        }
        let name = format!("{prefix}{k}");
        let d = dim(&dims[k]);
        if needed.contains(&k) {
            if k == 0 {
                // The outermost index needs no modulo: `linear` is in range.
                writeln!(w, "{ind}const long long {name} = {prefix}rem;")?;
            } else {
                writeln!(w, "{ind}const long long {name} = {prefix}rem % {d};")?;
            }
            names[k] = Some(name);
        }
        if k > outermost {
            writeln!(w, "{ind}{prefix}rem /= {d};")?;
        }
    }
    Ok(names)
}

/// An f32 literal that reads back exactly (non-finite values by their bits: there is no literal for them).
pub fn float_lit(v: f64) -> String {
    let f = v as f32;
    if !f.is_finite() {
        return format!("__int_as_float(0x{:08x})", f.to_bits());
    }
    let text = format!("{f:?}");
    let text = if text.contains(['.', 'e']) {
        text
    } else {
        format!("{text}.0")
    };
    if f.is_sign_negative() {
        format!("({text}f)")
    } else {
        format!("{text}f")
    }
}

/// The C expression of one elementwise op, given the expressions of its operands.
pub fn node_value(op: &Op, val: &dyn Fn(NodeId) -> String) -> String {
    match op {
        Op::Scalar(v) => float_lit(*v),
        // Ids are converted to float by their load; masks are already stored as 0.0 / 1.0.
        Op::Cast(a, _) => val(*a),
        Op::Unary(u, a) => unary(*u, &val(*a)),
        Op::Binary(b, x, y) => binary(*b, &val(*x), &val(*y)),
        Op::Where(m, a, b) => format!("({} != 0.0f ? {} : {})", val(*m), val(*a), val(*b)),
        // Not elementwise: the kernel writers compute these themselves.
        other => format!("/* {} */ 0.0f", other.name()),
    }
}

fn unary(u: UnaryOp, a: &str) -> String {
    match u {
        UnaryOp::Neg => format!("(-{a})"),
        UnaryOp::Abs => format!("fabsf({a})"),
        UnaryOp::Exp => format!("expf({a})"),
        UnaryOp::Log => format!("logf({a})"),
        UnaryOp::Sqrt => format!("sqrtf({a})"),
        UnaryOp::Rsqrt => format!("rsqrtf({a})"),
        UnaryOp::Tanh => format!("tanhf({a})"),
        UnaryOp::Sigmoid => format!("fuse_sigmoid({a})"),
        UnaryOp::Relu => format!("fuse_relu({a})"),
        UnaryOp::Gelu => format!("fuse_gelu({a})"),
        UnaryOp::GeluTanh => format!("fuse_gelu_tanh({a})"),
        UnaryOp::Silu => format!("fuse_silu({a})"),
        UnaryOp::Erf => format!("erff({a})"),
        UnaryOp::Sin => format!("fuse_sin({a})"),
        UnaryOp::Cos => format!("fuse_cos({a})"),
        UnaryOp::Floor => format!("floorf({a})"),
        UnaryOp::Ceil => format!("ceilf({a})"),
        // Ties to even, as PyTorch's `round` (`roundf` rounds them away from zero).
        UnaryOp::Round => format!("rintf({a})"),
        UnaryOp::Trunc => format!("truncf({a})"),
    }
}

fn binary(b: BinaryOp, x: &str, y: &str) -> String {
    let cmp = |op: &str| format!("({x} {op} {y} ? 1.0f : 0.0f)");
    match b {
        BinaryOp::Add => format!("({x} + {y})"),
        BinaryOp::Sub => format!("({x} - {y})"),
        BinaryOp::Mul => format!("({x} * {y})"),
        BinaryOp::Div => format!("({x} / {y})"),
        BinaryOp::Max => format!("fuse_max({x}, {y})"),
        BinaryOp::Min => format!("fuse_min({x}, {y})"),
        BinaryOp::Pow => format!("powf({x}, {y})"),
        BinaryOp::Lt => cmp("<"),
        BinaryOp::Le => cmp("<="),
        BinaryOp::Gt => cmp(">"),
        BinaryOp::Ge => cmp(">="),
        BinaryOp::Eq => cmp("=="),
        BinaryOp::Ne => cmp("!="),
    }
}

/// How a section of a kernel gets the value of a node it does not compute from one of the kernel's reads.
pub struct Section<'s> {
    /// Prefix of the load variables, so two sections can share a scope.
    pub tag: &'s str,
    /// Element offset of read `i` at the current element.
    pub offset: &'s dyn Fn(usize) -> String,
    /// Values the caller already holds (the anchor's result, the in-place matmul value).
    pub known: &'s dyn Fn(NodeId) -> Option<String>,
}

/// Emits the loads and the values of `nodes` (in graph order) as `const float` locals; returns the expression of
/// `result`.
pub fn emit_nodes(
    w: &mut String,
    ind: &str,
    cx: &Ctx,
    nodes: &[NodeId],
    result: NodeId,
    s: &Section,
) -> Result<String, fmt::Error> {
    let g = cx.g;
    let value = |id: NodeId| -> String {
        if let Some(v) = (s.known)(id) {
            return v;
        }
        if nodes.contains(&id) {
            return local_name(cx, id);
        }
        if let Op::Scalar(v) = g.node(id).op {
            return float_lit(v);
        }
        match cx.k.reads.iter().position(|r| r.node == id) {
            Some(i) => format!("{}r{i}", s.tag),
            None => format!("/* {id} unavailable */ 0.0f"),
        }
    };
    let mut loaded = BTreeSet::new();
    let mut wanted: Vec<NodeId> = nodes
        .iter()
        .flat_map(|&n| g.node(n).op.operands())
        .collect();
    if nodes.is_empty() {
        wanted.push(result);
    }
    for id in wanted {
        if (s.known)(id).is_some() || nodes.contains(&id) {
            continue;
        }
        let Some(i) = cx.k.reads.iter().position(|r| r.node == id) else {
            continue;
        };
        if loaded.insert(i) {
            writeln!(
                w,
                "{ind}const float {}r{i} = fuse_to_f32(in{i}[{}]);",
                s.tag,
                (s.offset)(i)
            )?;
        }
    }
    for &id in nodes {
        let v = node_value(&g.node(id).op, &value);
        writeln!(w, "{ind}const float {} = {v};", local_name(cx, id))?;
    }
    Ok(value(result))
}

/// A computed value is named by its position in the kernel, not its graph id, so the same kernel in every
/// layer of a model is the same text (and is emitted once).
fn local_name(cx: &Ctx, id: NodeId) -> String {
    match cx.k.nodes.iter().position(|&n| n == id) {
        Some(i) => format!("v{i}"),
        None => format!("v_{}", id.0),
    }
}

/// The reads whose values `nodes` use (or `result` itself for a copy kernel), in read order.
pub fn used_reads(
    cx: &Ctx,
    nodes: &[NodeId],
    result: NodeId,
    known: &dyn Fn(NodeId) -> bool,
) -> Vec<usize> {
    let mut wanted: BTreeSet<usize> = BTreeSet::new();
    let mut operands: Vec<NodeId> = nodes
        .iter()
        .flat_map(|&n| cx.g.node(n).op.operands())
        .collect();
    if nodes.is_empty() {
        operands.push(result);
    }
    for id in operands {
        if nodes.contains(&id) || known(id) {
            continue;
        }
        if let Some(i) = cx.k.reads.iter().position(|r| r.node == id) {
            wanted.insert(i);
        }
    }
    wanted.into_iter().collect()
}

/// The C type of read `i`'s elements: ids stay integers, values kept in f32 are `float`, everything else is the
/// storage type.
pub fn read_type(cx: &Ctx, i: usize) -> &'static str {
    let base = cx.k.reads[i].access.base;
    match cx.g.ty(base).dtype {
        DType::I64 => "long long",
        DType::F32 | DType::Bool if cx.kept_f32(base) => "float",
        DType::F32 | DType::Bool => "fuse_t",
    }
}
