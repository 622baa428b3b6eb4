//! Operands computed by the kernel that reads them. A decoder's queries and new keys are RoPE of a projection,
//! `x * cos + concat([-x2, x1]) * sin`, each an elementwise (piecewise) kernel whose output one kernel reads: the
//! attention kernel reads the queries, and the KV cache's write reads the keys. This pass merges each such kernel
//! into its reader: the attention kernel then computes each block of query rows (CPU) or each query row (GPU)
//! from the chain as it starts on it, and the write computes each row of the keys into its place in the cache.
//! Per layer, two kernels and two round trips through memory less.
//!
//! Rows must line up: the reader iterates rows of the operand (the attention kernel its query rows over
//! `[batch.., m]` of the scores, the write the value's rows), the chain computes rows of its own output, so the
//! operand must be a contiguous view of that output (a head split `[b, heads, s, d] → [b, kv_heads,
//! heads / kv_heads, s, d]` is) with the same row length. Then row `r` of the operand is row `r` of the chain's
//! output.

use std::collections::BTreeMap;

use super::access::{view_access, view_root};
use super::concat;
use super::fusion::{class, Class, Group};
use crate::ir::{DType, Graph, NodeId, Op};

/// Merges into each attention group the group computing its Q, and into each state write the group computing its
/// value, where the rows line up and nothing else reads it.
pub fn fuse(g: &Graph, groups: Vec<Group>) -> Vec<Group> {
    let uses = g.use_counts();
    let mut slots: Vec<Option<Group>> = groups.into_iter().map(Some).collect();
    let root_of: BTreeMap<NodeId, usize> = slots
        .iter()
        .enumerate()
        .filter_map(|(i, gr)| Some((*gr.as_ref()?.nodes.last()?, i)))
        .collect();
    for i in 0..slots.len() {
        let Some(q) = slots[i].as_ref().and_then(|gr| computable_operand(g, gr)) else {
            continue;
        };
        let root = view_root(g, q);
        let Some(&j) = root_of.get(&root) else {
            continue;
        };
        let (Some(producer), Some(consumer)) = (slots[j].as_ref(), slots[i].as_ref()) else {
            continue;
        };
        if j == i
            || !computes_rows_of(g, &uses, producer, root, q)
            || !reads_agree(producer, consumer)
        {
            continue;
        }
        let mut merged = consumer.clone();
        merged.nodes.extend(producer.nodes.iter().copied());
        merged.nodes.sort();
        merged.recomputed |= producer.recomputed;
        for (node, at) in &producer.reads {
            merged.reads.entry(*node).or_insert_with(|| at.clone());
        }
        merged
            .reads
            .retain(|node, _| !merged.nodes.contains(&view_root(g, *node)));
        slots[j] = None;
        slots[i] = Some(merged);
    }
    slots.into_iter().flatten().collect()
}

/// Whether every node both groups read is read at the same shape. A kernel reads each node once, at one shape:
/// a tensor read by the chain computing Q over `[b, heads, s, d]` and by the chain over grouped scores
/// `[b, kv_heads, group, s, t]` (a per-position temperature) would be read at the wrong rank by one of them.
fn reads_agree(producer: &Group, consumer: &Group) -> bool {
    producer
        .reads
        .iter()
        .all(|(node, at)| consumer.reads.get(node).is_none_or(|there| there == at))
}

/// The operand of `group` that it could compute rather than read: an attention kernel's Q, a state write's value.
fn computable_operand(g: &Graph, group: &Group) -> Option<NodeId> {
    if let [node] = group.nodes[..] {
        if let Op::Write { value, .. } = g.node(node).op {
            return Some(value);
        }
    }
    let att = super::attention::recognise(g, &group.nodes)?;
    match g.node(att.scores).op {
        Op::MatMul(q, _) => Some(q),
        _ => None,
    }
}

/// Whether `producer` (whose output is `root`) can compute the operand `q` (a view of `root`) row by row inside
/// the kernel that reads it.
fn computes_rows_of(g: &Graph, uses: &[usize], producer: &Group, root: NodeId, q: NodeId) -> bool {
    // Elementwise ops only, or elementwise ops through one concat (RoPE's rotate-half).
    let elementwise = producer
        .nodes
        .iter()
        .all(|&n| class(&g.node(n).op) == Class::Elementwise);
    let computable = producer.anchor.is_none()
        && (elementwise || concat::recognise(g, &producer.nodes).is_some())
        && g.ty(root).dtype == DType::F32
        && !g.outputs.contains(&root);
    // Read once, through views read once: the value is never needed in memory.
    let mut only_reader = true;
    let mut n = q;
    while n != root {
        only_reader &= uses[n.index()] == 1;
        n = match &g.node(n).op {
            Op::Permute { input, .. } | Op::Slice { input, .. } | Op::Reshape { input, .. } => {
                *input
            }
            _ => root,
        };
    }
    only_reader &= uses[root.index()] == 1;
    // Q's rows are the root's rows, in order.
    let in_memory = |n: NodeId| n == root;
    let rows_line_up = view_access(g, q, &in_memory).is_ok_and(|a| {
        a.offset.is_empty() && a.is_contiguous() && a.shape.last() == g.ty(root).shape.0.last()
    });
    computable && only_reader && rows_line_up
}
