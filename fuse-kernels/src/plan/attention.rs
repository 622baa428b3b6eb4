//! Attention fusion: `softmax(f(Q·Kᵀ)) · V` as one kernel, where `f` is any elementwise chain on the scores
//! (scaling, an additive mask, ...).
//!
//! Grouping alone keeps this pattern in three kernels: each matmul and the softmax is an anchor, and a kernel has
//! one. Those kernels pass the scores through memory twice — `[batch, heads, seq, seq]`, the largest tensors
//! of a transformer layer (6 MB each at batch 8, sequence 128). The attention kernel computes them a block of
//! query rows at a time, in a scratch that stays in cache (CPU) or in registers (GPU), so they never reach the
//! arena.

use std::collections::BTreeMap;

use super::fusion::{class, Class, Group, Refusal};
use crate::ir::{DType, Graph, NodeId, Op};

/// The largest head dims (`Q·Kᵀ`'s inner dim and `V`'s columns) an attention kernel takes: the GPU kernel keeps a
/// query row and an output row in registers, a warp's lanes sharing each.
pub const MAX_HEAD_DIM: usize = 256;

/// The three anchors of an attention kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Attention {
    /// `Q · Kᵀ`, the scores (before the elementwise chain).
    pub scores: NodeId,
    /// The softmax over the last axis of the (transformed) scores.
    pub softmax: NodeId,
    /// `P · V`: the kernel's output.
    pub output: NodeId,
    /// The value Q is a view of, when this kernel computes it from an elementwise chain (RoPE) rather than reading
    /// it from memory (see [`super::computed_operand`]).
    pub query: Option<NodeId>,
}

impl Attention {
    /// The elementwise chain between the scores and the softmax, in graph order.
    pub fn chain(&self, g: &Graph, k: &super::Kernel) -> Vec<NodeId> {
        let anchors = [self.scores, self.softmax, self.output];
        let query = self.query_nodes(g, k);
        k.nodes
            .iter()
            .copied()
            .filter(|n| !anchors.contains(n) && !query.contains(n))
            .collect()
    }

    /// The nodes that compute Q's rows, in graph order (empty when Q is read from memory): the query value and
    /// what it is computed from inside the kernel.
    pub fn query_nodes(&self, g: &Graph, k: &super::Kernel) -> Vec<NodeId> {
        let Some(root) = self.query else {
            return Vec::new();
        };
        let mut wanted = vec![root];
        for &n in k.nodes.iter().rev() {
            if wanted.contains(&n) {
                wanted.extend(
                    g.node(n)
                        .op
                        .operands()
                        .into_iter()
                        .filter(|o| k.nodes.contains(o)),
                );
            }
        }
        k.nodes
            .iter()
            .copied()
            .filter(|n| wanted.contains(n))
            .collect()
    }
}

/// Recognises the attention kernel among `nodes` (a group after [`fuse`]): two matmuls and a softmax.
pub fn recognise(g: &Graph, nodes: &[NodeId]) -> Option<Attention> {
    let &output = nodes.last()?;
    let Op::MatMul(p, _) = g.node(output).op else {
        return None;
    };
    let Op::Softmax { input, .. } = g.node(p).op else {
        return None;
    };
    if !nodes.contains(&p) {
        return None;
    }
    let scores = nodes
        .iter()
        .copied()
        .find(|&n| matches!(g.node(n).op, Op::MatMul(..)) && n != output)?;
    let Op::MatMul(q, _) = g.node(scores).op else {
        return None;
    };
    let query = Some(super::access::view_root(g, q)).filter(|r| nodes.contains(r));
    // The chain from the scores to the softmax input is what lies between; check it reaches `input`.
    (input == scores || nodes.contains(&input)).then_some(Attention {
        scores,
        softmax: p,
        output,
        query,
    })
}

/// Merges each `scores → chain → softmax → ·V` triple of groups into one.
pub fn fuse(g: &Graph, groups: Vec<Group>, refusals: &mut Vec<Refusal>) -> Vec<Group> {
    let uses = g.use_counts();
    let mut slots: Vec<Option<Group>> = groups.into_iter().map(Some).collect();
    let mut root_of: BTreeMap<NodeId, usize> = BTreeMap::new();
    for (i, gr) in slots.iter().enumerate() {
        if let Some(&root) = gr.as_ref().and_then(|gr| gr.nodes.last()) {
            root_of.insert(root, i);
        }
    }
    for i in 0..slots.len() {
        let Some(pv_group) = slots[i].as_ref() else {
            continue;
        };
        let Some((sm_index, qk_index)) = candidate(g, &uses, &slots, &root_of, pv_group) else {
            continue;
        };
        let (Some(qk), Some(sm)) = (slots[qk_index].as_ref(), slots[sm_index].as_ref()) else {
            continue;
        };
        let (s, p, out) = (
            qk.nodes.last().copied(),
            sm.nodes.last().copied(),
            pv_group.nodes.last().copied(),
        );
        let Some(merged) = merge(qk, sm, pv_group) else {
            continue;
        };
        // The merge overrides the refusals between the three anchors.
        refusals.retain(|r| {
            let pair = (Some(r.producer), Some(r.consumer));
            pair != (s, p) && pair != (p, out)
        });
        slots[qk_index] = None;
        slots[sm_index] = None;
        slots[i] = Some(merged);
    }
    slots.into_iter().flatten().collect()
}

/// The groups of the softmax and of the scores feeding `pv_group`'s matmul, when the three form an attention.
fn candidate(
    g: &Graph,
    uses: &[usize],
    slots: &[Option<Group>],
    root_of: &BTreeMap<NodeId, usize>,
    pv_group: &Group,
) -> Option<(usize, usize)> {
    let [pv] = pv_group.nodes[..] else {
        return None;
    };
    let Op::MatMul(p, v) = g.node(pv).op else {
        return None;
    };
    let Op::Softmax { input: s, axis } = g.node(p).op else {
        return None;
    };
    let scores_shape = &g.ty(s).shape.0;
    let out_shape = &g.ty(pv).shape.0;
    let rank = scores_shape.len();
    let head_dim_ok = |d: &crate::ir::Dim| d.as_static().is_some_and(|d| d <= MAX_HEAD_DIM);
    let shapes_ok = rank >= 2
        && axis + 1 == rank
        && out_shape.len() == rank
        // The output's batch and rows are the scores': `V` does not broadcast the scores to more batches.
        && out_shape[..rank - 1] == scores_shape[..rank - 1]
        && head_dim_ok(&out_shape[rank - 1])
        && [s, p, pv, v].iter().all(|&n| g.ty(n).dtype == DType::F32);
    if !shapes_ok || uses[p.index()] != 1 || uses[s.index()] != 1 {
        return None;
    }
    let sm_index = *root_of.get(&p)?;
    let qk_index = *root_of.get(&s)?;
    let sm = slots[sm_index].as_ref()?;
    let qk = slots[qk_index].as_ref()?;
    let Op::MatMul(q, _) = g.node(qk.anchor?).op else {
        return None;
    };
    // Q has the scores' batch dims and rows: the kernels take them as the scores'. A Q that broadcasts (learned
    // queries `[m, d]` shared by every batch and head, one head's `[b, 1, s, d]` against three heads of keys) does
    // so in the separate products instead. K and V may broadcast (keys shared by every batch, grouped heads): their
    // reads carry stride 0 over the batch dims they lack.
    let q_shape = &g.ty(q).shape.0;
    if q_shape.len() != rank || q_shape[..rank - 1] != scores_shape[..rank - 1] {
        return None;
    }
    let inner = g.ty(q).shape.0.last()?;
    let chain_ok = qk
        .nodes
        .iter()
        .all(|&n| Some(n) == qk.anchor || class(&g.node(n).op) == Class::Elementwise);
    (sm.nodes[..] == [p] && chain_ok && head_dim_ok(inner)).then_some((sm_index, qk_index))
}

/// One group of the three, unless it would read one value at two shapes.
fn merge(qk: &Group, sm: &Group, pv: &Group) -> Option<Group> {
    let (&s, &p) = (qk.nodes.last()?, sm.nodes.last()?);
    let mut reads = qk.reads.clone();
    for (node, at) in sm.reads.iter().chain(&pv.reads) {
        if *node == s || *node == p {
            continue;
        }
        if reads.get(node).is_some_and(|seen| seen != at) {
            return None;
        }
        reads.insert(*node, at.clone());
    }
    let mut nodes: Vec<NodeId> = [qk, sm, pv]
        .iter()
        .flat_map(|gr| gr.nodes.iter().copied())
        .collect();
    nodes.sort();
    Some(Group {
        nodes,
        anchor: pv.anchor,
        reads,
        recomputed: false,
    })
}

#[cfg(test)]
mod tests {
    use crate::plan::{plan, Mode};

    /// The kinds of the fused plan of a one-struct model.
    fn kinds(forward: &str) -> Vec<&'static str> {
        let source = format!(
            "#[fused_model] mod m {{ pub struct M {{}} impl M {{ pub fn forward{forward} }} }}"
        );
        let capture = crate::front::capture_str(&source).unwrap_or_else(|e| panic!("{e}"));
        assert!(capture.errors.is_none(), "test model does not capture");
        let p = plan(&capture.models[0].graph, Mode::Fused);
        p.kernels.iter().map(|k| k.kind.name()).collect()
    }

    #[test]
    fn fuses_scores_chain_softmax_and_product() {
        let found = kinds(
            "(&self, #[shape(b, s, 16)] q: Tensor, #[shape(b, s)] m: Tensor) -> Tensor { \
             (q.matmul(&q.t()) * 0.25 + m.reshape([q.dim(0), 1, q.dim(1)])).softmax(-1).matmul(&q) }",
        );
        assert_eq!(found, ["attention"]);
    }

    #[test]
    fn keeps_three_kernels_when_the_pattern_does_not_hold() {
        // A head dim over the GPU kernel's register budget.
        let wide = kinds(
            "(&self, #[shape(b, s, 300)] q: Tensor) -> Tensor { q.matmul(&q.t()).softmax(-1).matmul(&q) }",
        );
        assert_eq!(wide, ["matmul", "row", "matmul"]);
        // A dynamic head dim.
        let dynamic = kinds(
            "(&self, #[shape(s, h)] q: Tensor) -> Tensor { q.matmul(&q.t()).softmax(-1).matmul(&q) }",
        );
        assert_eq!(dynamic, ["matmul", "row", "matmul"]);
        // The softmax over another axis than the keys'.
        let axis = kinds(
            "(&self, #[shape(s, 8)] q: Tensor) -> Tensor { q.matmul(&q.t()).softmax(0).matmul(&q) }",
        );
        assert!(!axis.contains(&"attention"), "{axis:?}");
        // The product consumed by something else than a matmul with V: a softmax then a sum.
        let other = kinds(
            "(&self, #[shape(s, 8)] q: Tensor) -> Tensor { q.matmul(&q.t()).softmax(-1).sum(-1, false) }",
        );
        assert!(!other.contains(&"attention"), "{other:?}");
    }

    /// A Q that broadcasts to the scores (of lower rank: learned queries shared by every batch and head; or of
    /// their rank with a 1 for several heads or batches) does so in separate products: the attention kernels take
    /// Q's batch dims and rows as the scores', and read past Q (the CPU writer panicked at build time on the first
    /// kind, the kernels at run time on the others). K and V of lower rank (shared by every batch) stay fused: their
    /// reads broadcast.
    #[test]
    fn a_query_that_broadcasts_keeps_separate_products() {
        for (forward, fused) in [
            (
                "(&self, #[shape(4, 8)] q: Tensor, #[shape(b, 2, 6, 8)] k: Tensor) -> Tensor { \
                 q.matmul(&k.t()).softmax(-1).matmul(&k) }",
                false,
            ),
            (
                "(&self, #[shape(b, 1, 4, 8)] q: Tensor, #[shape(b, 3, 6, 8)] k: Tensor) -> Tensor { \
                 q.matmul(&k.t()).softmax(-1).matmul(&k) }",
                false,
            ),
            (
                "(&self, #[shape(1, 3, 4, 8)] q: Tensor, #[shape(b, 3, 6, 8)] k: Tensor) -> Tensor { \
                 q.matmul(&k.t()).softmax(-1).matmul(&k) }",
                false,
            ),
            (
                "(&self, #[shape(b, 2, 4, 8)] q: Tensor, #[shape(6, 8)] k: Tensor, \
                 #[shape(b, 2, 6, 8)] v: Tensor) -> Tensor { q.matmul(&k.t()).softmax(-1).matmul(&v) }",
                true,
            ),
            (
                "(&self, #[shape(b, 2, 4, 8)] q: Tensor, #[shape(b, 2, 6, 8)] k: Tensor, \
                 #[shape(6, 8)] v: Tensor) -> Tensor { q.matmul(&k.t()).softmax(-1).matmul(&v) }",
                true,
            ),
        ] {
            let source = format!(
                "#[fused_model] mod m {{ pub struct M {{}} impl M {{ pub fn forward{forward} }} }}"
            );
            let capture = crate::front::capture_str(&source).unwrap_or_else(|e| panic!("{e}"));
            assert!(capture.errors.is_none(), "{forward}: {:?}", capture.errors);
            let p = plan(&capture.models[0].graph, Mode::Fused);
            let found: Vec<&str> = p.kernels.iter().map(|k| k.kind.name()).collect();
            assert_eq!(found.contains(&"attention"), fused, "{forward}: {found:?}");
            crate::back::cpu::write_program(&p, "M");
            crate::back::cuda::write_cuda(&p, "M");
        }
    }
}
