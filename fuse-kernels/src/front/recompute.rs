//! A pass over a captured graph: a cheap value computed from the dims alone (positions from `arange`, their casts,
//! comparisons and selections between them, views of these), read by more than one op, is written out again for
//! each op that could compute it in its own kernel.
//!
//! The planner keeps a value read twice in memory, in a kernel of its own ("value read 2 times"), since a kernel
//! computes each node once. For such a value that costs a kernel launch and a round trip through memory to save a
//! few operations per element, and a user would have to write the expression out at each use to avoid it, as in
//!
//! ```text
//! let cols = arange(0, t).reshape([1, 1, t]).to_f32();
//! let rows = arange(past, s).reshape([1, s, 1]).to_f32();
//! where_(cols.eq(&rows), 0.0, where_(cols.lt(&rows), padding, -1e9))   // one kernel, not three
//! ```
//!
//! Only values of the dims are copied: they read no tensor, so a copy costs only its arithmetic. A value that also
//! reads an input or a weight keeps its one kernel (its readers may be matmuls or attention kernels, which read
//! operands from memory anyway).

use crate::ir::{FusedPromise, Graph, Node, NodeId, Op};
// The planner's bound on a value it recomputes in its reader: a copy here is held to the same.
use crate::plan::fusion::MAX_RECOMPUTED_NODES as MAX_COPIED_NODES;

/// `arange`s and scalars: what copies share rather than copy.
fn shared_leaf(op: &Op) -> bool {
    matches!(op, Op::Arange { .. } | Op::Scalar(_))
}

/// Per node: `Some(computing nodes)` when it is a value of the dims alone, made of cheap ops over `arange`s and
/// scalars; `None` otherwise.
fn dims_only(g: &Graph) -> Vec<Option<usize>> {
    let mut cost: Vec<Option<usize>> = Vec::with_capacity(g.nodes.len());
    for node in &g.nodes {
        let own = match &node.op {
            op if shared_leaf(op) => Some(0),
            op if op.is_cheap_to_recompute() || op.is_view() => op
                .operands()
                .iter()
                .try_fold(usize::from(!op.is_view()), |sum, o| {
                    cost.get(o.index()).copied().flatten().map(|c| sum + c)
                }),
            _ => None,
        };
        cost.push(own);
    }
    cost
}

/// Whether `consumer` computes element by element and so could hold a copy of its operand `pos` in its kernel: an
/// elementwise op, a concat, or a row op's row input.
fn fusing_reader(op: &Op, pos: usize) -> bool {
    match op {
        Op::Unary(..) | Op::Binary(..) | Op::Where(..) | Op::Cast(..) | Op::Concat { .. } => true,
        Op::Reduce { .. }
        | Op::Softmax { .. }
        | Op::Cumsum { .. }
        | Op::LayerNorm { .. }
        | Op::RmsNorm { .. } => pos == 0,
        _ => false,
    }
}

/// The graph with each shared value of the dims copied for its fusing readers (see the module doc). Node order
/// stays topological; `.fused()` promises cover the copies made for the ops they covered.
pub fn copy_shared_dim_values(g: Graph) -> Graph {
    let cost = dims_only(&g);
    let uses = g.use_counts();
    // Whether some node of the value's cone (views included) is read more than once: only then is there anything
    // to copy.
    let mut shared = vec![false; g.nodes.len()];
    for id in g.ids() {
        let i = id.index();
        if cost[i].is_some() && !shared_leaf(&g.node(id).op) {
            shared[i] = uses[i] > 1 || g.node(id).op.operands().iter().any(|o| shared[o.index()]);
        }
    }
    let copyable =
        |o: NodeId| shared[o.index()] && cost[o.index()].is_some_and(|c| c <= MAX_COPIED_NODES);
    if !g.ids().any(|id| {
        let op = &g.node(id).op;
        op.operands()
            .into_iter()
            .enumerate()
            .any(|(pos, o)| copyable(o) && fusing_reader(op, pos))
    }) {
        return g;
    }

    // The originals still read once every fusing reader has its copy: a value of the dims whose readers all
    // copy it is left out (from the last node back, so a node's readers are decided before it).
    let mut readers: Vec<Vec<(NodeId, usize)>> = vec![Vec::new(); g.nodes.len()];
    for id in g.ids() {
        for (pos, o) in g.node(id).op.operands().into_iter().enumerate() {
            readers[o.index()].push((id, pos));
        }
    }
    let mut needed = vec![true; g.nodes.len()];
    for id in (0..g.nodes.len()).rev().map(|i| NodeId(i as u32)) {
        let op = &g.node(id).op;
        // `arange`s and scalars stay: copies share them.
        if cost[id.index()].is_none() || shared_leaf(op) || g.outputs.contains(&id) {
            continue;
        }
        needed[id.index()] = readers[id.index()].iter().any(|&(r, pos)| {
            needed[r.index()] && !(copyable(id) && fusing_reader(&g.node(r).op, pos))
        });
    }

    let mut out = g.empty_like();
    let mut new_of: Vec<NodeId> = Vec::with_capacity(g.nodes.len());
    // Where each old node's emission began in `out` (its copies first), for the promises.
    let mut began: Vec<usize> = Vec::with_capacity(g.nodes.len() + 1);
    for id in g.ids() {
        began.push(out.nodes.len());
        if !needed[id.index()] {
            // Not read by any node emitted: every reader has a copy.
            new_of.push(NodeId(0));
            continue;
        }
        let op = &g.node(id).op;
        let mut operands = Vec::new();
        for (pos, o) in op.operands().into_iter().enumerate() {
            operands.push(if copyable(o) && fusing_reader(op, pos) {
                copy_cone(&g, o, &new_of, &mut out)
            } else {
                new_of[o.index()]
            });
        }
        let node = Node {
            op: with_operands(op, &operands),
            ty: g.node(id).ty.clone(),
        };
        new_of.push(out.push(node, g.span(id)));
    }
    began.push(out.nodes.len());
    out.outputs = g.outputs.iter().map(|o| new_of[o.index()]).collect();
    out.promises = g
        .promises
        .iter()
        .map(|p| FusedPromise {
            first: NodeId(began[p.first.index()] as u32),
            end: NodeId(began[p.end.index().min(g.nodes.len())] as u32),
            ..p.clone()
        })
        .collect();
    out
}

/// A fresh copy in `out` of the cone of `value` (a shared value of the dims): its computing nodes and views again,
/// its `arange`s and scalars shared.
fn copy_cone(g: &Graph, value: NodeId, new_of: &[NodeId], out: &mut Graph) -> NodeId {
    let op = &g.node(value).op;
    if shared_leaf(op) {
        return new_of[value.index()];
    }
    let operands: Vec<NodeId> = op
        .operands()
        .into_iter()
        .map(|o| copy_cone(g, o, new_of, out))
        .collect();
    let node = Node {
        op: with_operands(op, &operands),
        ty: g.node(value).ty.clone(),
    };
    out.push(node, g.span(value))
}

/// `op` reading `operands` (in [`Op::operands`]' order) instead of its own.
fn with_operands(op: &Op, operands: &[NodeId]) -> Op {
    let mut next = operands.iter().copied();
    let mut take = || next.next().unwrap_or(NodeId(0));
    match op {
        Op::Input(_) | Op::Param(_) | Op::State(_) | Op::Arange { .. } | Op::Scalar(_) => {
            op.clone()
        }
        Op::Write { axis, start, .. } => Op::Write {
            state: take(),
            axis: *axis,
            start: start.clone(),
            value: take(),
        },
        Op::Unary(u, _) => Op::Unary(*u, take()),
        Op::Cast(_, t) => Op::Cast(take(), *t),
        Op::Binary(b, _, _) => Op::Binary(*b, take(), take()),
        Op::MatMul(..) => Op::MatMul(take(), take()),
        Op::Where(..) => Op::Where(take(), take(), take()),
        Op::Reduce {
            op, axis, keepdim, ..
        } => Op::Reduce {
            op: *op,
            input: take(),
            axis: *axis,
            keepdim: *keepdim,
        },
        Op::Softmax { axis, .. } => Op::Softmax {
            input: take(),
            axis: *axis,
        },
        Op::Cumsum { axis, .. } => Op::Cumsum {
            input: take(),
            axis: *axis,
        },
        Op::LayerNorm { eps, .. } => Op::LayerNorm {
            input: take(),
            gamma: take(),
            beta: take(),
            eps: *eps,
        },
        Op::RmsNorm { eps, .. } => Op::RmsNorm {
            input: take(),
            gamma: take(),
            eps: *eps,
        },
        Op::Permute { perm, .. } => Op::Permute {
            input: take(),
            perm: perm.clone(),
        },
        Op::Reshape { shape, .. } => Op::Reshape {
            input: take(),
            shape: shape.clone(),
        },
        Op::Slice {
            axis, start, len, ..
        } => Op::Slice {
            input: take(),
            axis: *axis,
            start: start.clone(),
            len: len.clone(),
        },
        Op::Concat { inputs, axis } => Op::Concat {
            inputs: inputs.iter().map(|_| take()).collect(),
            axis: *axis,
        },
        Op::Embedding { .. } => Op::Embedding {
            table: take(),
            ids: take(),
        },
    }
}

#[cfg(test)]
#[path = "recompute_tests.rs"]
mod tests;
