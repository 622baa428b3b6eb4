//! Written-out row ops: reductions over the last axis whose results are broadcast back over their own rows, fused
//! with the rows into one kernel.
//!
//! Grouping keeps `x * (x.square().mean(-1, true) + eps).rsqrt() * w` in two kernels: the reduced value is
//! broadcast into the row's shape ([`super::WhyNot::Broadcast`]). Written-out layer norm and softmax also read a
//! row value twice (`x - mean`, `exp(x - max)`: [`super::WhyNot::MultipleUses`]). This pass merges such groups
//! into a *row region*: every node is either a row node (computed per row element, its shape broadcast to the
//! rows) or a per-row node (one value per row: a keepdim reduction over the last axis and what is computed from
//! such values alone). The kernel evaluates each reduction in its own pass over the row, recomputing the
//! elementwise row nodes it needs, then the per-row values once, then the output row; so a user's norm variant
//! costs one kernel, like the built-ins.

use std::collections::{BTreeMap, BTreeSet};

use super::fusion::{Group, Refusal};
use crate::ir::{Graph, NodeId, Op, Shape};

/// How a node of a row region is evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Once per element of the row.
    Row,
    /// Once per row (a reduction, or elementwise on per-row values only).
    PerRow,
}

/// Where `id` sits in a region iterating rows of `rows` (the region's output shape), or `None` if it cannot be
/// part of one: a keepdim reduction over the last axis of exactly `rows`, or an elementwise op whose shape
/// broadcasts to the rows (a row node) or to one value per row (a per-row node).
pub fn place(g: &Graph, rows: &Shape, id: NodeId) -> Option<Place> {
    let rank = rows.rank();
    let last = rows.0.last()?;
    if last.is_one() {
        return None;
    }
    let shape = &g.ty(id).shape;
    match &g.node(id).op {
        Op::Reduce {
            input,
            axis,
            keepdim: true,
            ..
        } => (*axis + 1 == rank && g.ty(*input).shape == *rows).then_some(Place::PerRow),
        Op::Unary(..) | Op::Binary(..) | Op::Where(..) | Op::Cast(..) => {
            if !broadcasts_to(shape, rows) {
                return None;
            }
            match shape.0.last() {
                Some(d) if d == last => Some(Place::Row),
                _ => Some(Place::PerRow),
            }
        }
        _ => None,
    }
}

/// Whether `shape` broadcasts to `target` (aligned on the right, each dim 1 or equal).
fn broadcasts_to(shape: &Shape, target: &Shape) -> bool {
    shape.rank() <= target.rank()
        && shape
            .0
            .iter()
            .rev()
            .zip(target.0.iter().rev())
            .all(|(d, t)| d.is_one() || d == t)
}

/// Whether every node of `nodes` can be placed in a region over `rows`.
fn placeable(g: &Graph, rows: &Shape, nodes: &[NodeId]) -> bool {
    nodes.iter().all(|&n| place(g, rows, n).is_some())
}

/// Whether `nodes` (a finished group) is a row region: its output is a row node over its own shape and it holds a
/// reduction. Such a group becomes a [`super::KernelKind::RowRegion`] kernel.
pub fn is_region(g: &Graph, nodes: &[NodeId]) -> bool {
    let Some(&out) = nodes.last() else {
        return false;
    };
    let rows = &g.ty(out).shape;
    place(g, rows, out) == Some(Place::Row)
        && placeable(g, rows, nodes)
        && nodes
            .iter()
            .any(|&n| matches!(g.node(n).op, Op::Reduce { .. }))
}

/// Merges into each row-shaped group the groups of the reductions (and the row values they read) that only it
/// uses, as long as every merged node can be placed in the region. Groups are visited from the last, so a region
/// grows from its final consumer; refusals between nodes that end up in one kernel are dropped.
pub fn fuse(g: &Graph, groups: Vec<Group>, refusals: &mut Vec<Refusal>) -> Vec<Group> {
    let uses = g.use_counts();
    let mut slots: Vec<Option<Group>> = groups.into_iter().map(Some).collect();
    let mut slot_of: BTreeMap<NodeId, usize> = BTreeMap::new();
    for (i, gr) in slots.iter().enumerate() {
        if let Some(&root) = gr.as_ref().and_then(|gr| gr.nodes.last()) {
            slot_of.insert(root, i);
        }
    }
    let mut order: Vec<usize> = (0..slots.len()).collect();
    order.sort_by_key(|&i| {
        std::cmp::Reverse(slots[i].as_ref().and_then(|gr| gr.nodes.last().copied()))
    });
    for seed in order {
        let Some(seed_group) = slots[seed].as_ref() else {
            continue;
        };
        let Some(&out) = seed_group.nodes.last() else {
            continue;
        };
        let rows = g.ty(out).shape.clone();
        if rows.rank() == 0
            || place(g, &rows, out) != Some(Place::Row)
            || !placeable(g, &rows, &seed_group.nodes)
        {
            continue;
        }
        let mut region: BTreeSet<NodeId> = seed_group.nodes.iter().copied().collect();
        let mut absorbed: Vec<usize> = Vec::new();
        loop {
            let next = region.iter().find_map(|&n| {
                g.node(n).op.operands().into_iter().find_map(|p| {
                    let &slot = slot_of.get(&p)?;
                    if region.contains(&p) || slot == seed || absorbed.contains(&slot) {
                        return None;
                    }
                    let producer = slots[slot].as_ref()?;
                    let readers_inside = region
                        .iter()
                        .map(|&c| g.node(c).op.operands().iter().filter(|&&o| o == p).count())
                        .sum::<usize>();
                    (uses[p.index()] == readers_inside && placeable(g, &rows, &producer.nodes))
                        .then_some(slot)
                })
            });
            let Some(slot) = next else { break };
            if let Some(producer) = slots[slot].as_ref() {
                region.extend(producer.nodes.iter().copied());
            }
            absorbed.push(slot);
        }
        let nodes: Vec<NodeId> = region.iter().copied().collect();
        if absorbed.is_empty() || !is_region(g, &nodes) {
            continue;
        }
        let mut merged = slots[seed].take().unwrap_or_default();
        for slot in absorbed {
            if let Some(producer) = slots[slot].take() {
                merged.nodes.extend(producer.nodes);
                merged.reads.extend(producer.reads);
            }
        }
        merged.nodes.sort();
        merged.anchor = None;
        merged.reads.retain(|n, _| !region.contains(n));
        refusals.retain(|r| !(region.contains(&r.producer) && region.contains(&r.consumer)));
        slots[seed] = Some(merged);
    }
    slots.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use crate::plan::{plan, KernelKind, Mode, Plan};

    /// The fused plan of a one-struct model with a weight `w: [16]`.
    fn planned(forward: &str) -> Plan {
        let source = format!(
            "#[fused_model] mod m {{ pub struct M {{ #[shape(16)] w: Tensor }} impl M {{ pub fn forward{forward} }} }}"
        );
        let capture = crate::front::capture_str(&source).unwrap_or_else(|e| panic!("{e}"));
        assert!(capture.errors.is_none(), "test model does not capture");
        plan(&capture.models[0].graph, Mode::Fused)
    }

    fn one_region(forward: &str) {
        let p = planned(forward);
        let kinds: Vec<&KernelKind> = p.kernels.iter().map(|k| &k.kind).collect();
        assert_eq!(kinds, [&KernelKind::RowRegion], "{forward}");
        assert!(p.refusals.is_empty(), "{forward}: {:?}", p.refusals);
    }

    #[test]
    fn written_out_norms_are_one_kernel() {
        // RMSNorm, Gemma's `(1 + w)`, layer norm without bias, softmax, and a QK-norm over dynamic heads.
        one_region(
            "(&self, #[shape(b, s, 16)] x: Tensor) -> Tensor { \
             x * (x.square().mean(-1, true) + 1e-6).rsqrt() * &self.w }",
        );
        one_region(
            "(&self, #[shape(b, 16)] x: Tensor) -> Tensor { \
             x * (x.square().mean(-1, true) + 1e-6).rsqrt() * (&self.w + 1.0) }",
        );
        one_region(
            "(&self, #[shape(b, 16)] x: Tensor) -> Tensor { let c = x - x.mean(-1, true); \
             c * (c.square().mean(-1, true) + 1e-5).rsqrt() * &self.w }",
        );
        one_region(
            "(&self, #[shape(b, s, 16)] x: Tensor) -> Tensor { let e = (x - x.max(-1, true)).exp(); \
             e / e.sum(-1, true) }",
        );
        one_region(
            "(&self, #[shape(b, h, s, 16)] q: Tensor) -> Tensor { \
             q * (q.square().mean(-1, true) + 1e-6).rsqrt() * &self.w }",
        );
    }

    #[test]
    fn a_reduction_read_elsewhere_stays_in_memory_and_says_why() {
        let p = planned(
            "(&self, #[shape(b, 16)] x: Tensor) -> (Tensor, Tensor) { let r = x.sum(-1, true); (x / r, r) }",
        );
        assert_eq!(p.kernels.len(), 2);
        assert!(
            p.refusals
                .iter()
                .any(|r| r.why == crate::plan::WhyNot::MultipleUses(2)),
            "{:?}",
            p.refusals
        );
    }
}
