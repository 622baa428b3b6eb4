//! Q computed inside the attention kernel: a decoder's queries are RoPE of a projection,
//! `q * cos + concat([-q2, q1]) * sin`, an elementwise (piecewise) kernel whose output only the attention kernel
//! reads. This pass merges that kernel into the attention kernel, which then computes each block of query rows
//! (CPU) or each query row (GPU) from the chain as it starts on it, instead of reading it from memory: one kernel
//! and one round trip of Q through memory less per layer.
//!
//! Rows must line up: the attention kernel iterates its query rows over `[batch.., m]` of the scores, the chain
//! computes rows of its own output, so Q must be a contiguous view of that output (a head split
//! `[b, heads, s, d] → [b, kv_heads, heads / kv_heads, s, d]` is) with the same row length. Then query row `r` of
//! the attention is row `r` of the chain's output.

use std::collections::BTreeMap;

use super::access::{view_access, view_root};
use super::concat;
use super::fusion::{class, Class, Group};
use crate::ir::{DType, Graph, NodeId, Op};

/// Merges into each attention group the group computing its Q, where the rows line up and nothing else reads it.
pub fn fuse(g: &Graph, groups: Vec<Group>) -> Vec<Group> {
    let uses = g.use_counts();
    let mut slots: Vec<Option<Group>> = groups.into_iter().map(Some).collect();
    let root_of: BTreeMap<NodeId, usize> = slots
        .iter()
        .enumerate()
        .filter_map(|(i, gr)| Some((*gr.as_ref()?.nodes.last()?, i)))
        .collect();
    for i in 0..slots.len() {
        let Some(att) = slots[i]
            .as_ref()
            .and_then(|gr| super::attention::recognise(g, &gr.nodes))
        else {
            continue;
        };
        let Op::MatMul(q, _) = g.node(att.scores).op else {
            continue;
        };
        let root = view_root(g, q);
        let Some(&j) = root_of.get(&root) else {
            continue;
        };
        let (Some(producer), Some(consumer)) = (slots[j].as_ref(), slots[i].as_ref()) else {
            continue;
        };
        if j == i || !computes_rows_of(g, &uses, producer, root, q) {
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

/// Whether `producer` (whose output is `root`) can compute Q (`q`, a view of `root`) row by row inside the
/// attention kernel.
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
