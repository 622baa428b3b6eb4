//! Fusion planning: which ops share a kernel. One question decides it, [`can_fuse`], so the report can say why two
//! ops were kept apart.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::ir::{Dim, Graph, NodeId, Op, Shape};

/// What a node is to the planner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Inputs and params: already in memory.
    Leaf,
    /// Scalar constants: inlined into every kernel that reads them.
    Constant,
    /// Permute / reshape / slice: read through strides, never a kernel of their own unless a consumer needs them
    /// contiguous.
    View,
    Elementwise,
    /// A reduction over the last axis, softmax, layer norm or RMS norm: one kernel iterates rows.
    Row,
    MatMul,
    /// A concat: fused into an elementwise consumer, or a kernel of its own (see [`super::concat`]).
    Concat,
    /// Embedding gather, state write: a kernel of its own.
    Standalone,
}

pub fn class(op: &Op) -> Class {
    match op {
        Op::Input(_) | Op::Param(_) | Op::State(_) | Op::Arange { .. } => Class::Leaf,
        Op::Scalar(_) => Class::Constant,
        Op::Permute { .. } | Op::Reshape { .. } | Op::Slice { .. } => Class::View,
        Op::Unary(..) | Op::Binary(..) | Op::Where(..) | Op::Cast(..) => Class::Elementwise,
        Op::Reduce { .. }
        | Op::Softmax { .. }
        | Op::Cumsum { .. }
        | Op::LayerNorm { .. }
        | Op::RmsNorm { .. } => Class::Row,
        Op::MatMul(..) => Class::MatMul,
        Op::Concat { .. } => Class::Concat,
        Op::Embedding { .. } | Op::Write { .. } => Class::Standalone,
    }
}

/// Why a producer was not fused into its consumer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WhyNot {
    /// The plan was built unfused on purpose.
    EagerPlan,
    /// The producer's value is read by more than one op (or is a model output), so it must be in memory.
    MultipleUses(usize),
    /// The producer's value is broadcast into a larger shape, and it is not cheap enough to recompute per element
    /// (see [`recomputable`]).
    Broadcast,
    /// A kernel that recomputes a broadcast value per element holds no concat.
    Recomputed,
    /// Both sides already hold a reduction or a matmul; a kernel has at most one.
    TwoAnchors,
    /// A matmul reads its operands from memory; elementwise producers are not fused into it.
    MatMulOperand,
    /// The consumer is a gather kernel of its own.
    Standalone,
    /// A concat is computed only in elementwise kernels: its reader is a row op or a matmul, or the kernel
    /// already holds one.
    ConcatReader,
    /// A concat computes only elementwise inputs: this input holds a reduction or a matmul.
    ConcatInput,
    /// A kernel reads through at most one concat.
    TwoConcats,
    /// A concat along a dynamic axis (`past + seq` long) is a copy of its own: a fused concat's pieces start at
    /// fixed offsets.
    DynamicConcat,
    /// A row op fuses only its row input (not gamma/beta) as a prologue.
    NotRowInput,
    /// The consumer does not compute element by element (e.g. a view).
    ConsumerKind,
    /// The kernel would read one value at two different shapes (e.g. a norm's weight, and the same weight again
    /// broadcast in the epilogue); each value is read through one access per kernel.
    ReadAtTwoShapes,
}

impl fmt::Display for WhyNot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WhyNot::EagerPlan => write!(f, "eager plan: one kernel per op"),
            WhyNot::MultipleUses(n) => write!(f, "value read {n} times, kept in memory"),
            WhyNot::Broadcast => write!(
                f,
                "value is broadcast into a larger shape and too costly to recompute per element"
            ),
            WhyNot::Recomputed => write!(
                f,
                "a kernel that recomputes a broadcast value holds no concat"
            ),
            WhyNot::TwoAnchors => write!(f, "both sides hold a reduction or matmul"),
            WhyNot::MatMulOperand => write!(f, "matmul reads its operands from memory"),
            WhyNot::Standalone => write!(f, "gathers and state writes run as kernels of their own"),
            WhyNot::ConcatReader => write!(
                f,
                "a concat fuses only into elementwise ops, not a row op, matmul or attention"
            ),
            WhyNot::ConcatInput => write!(
                f,
                "a concat fuses only elementwise inputs, not a reduction or matmul"
            ),
            WhyNot::TwoConcats => write!(f, "a kernel reads through one concat at most"),
            WhyNot::DynamicConcat => {
                write!(f, "a concat along a dynamic axis is a copy of its own")
            }
            WhyNot::NotRowInput => {
                write!(f, "only the row input of a norm is fused as its prologue")
            }
            WhyNot::ConsumerKind => write!(f, "consumer is not a computing op"),
            WhyNot::ReadAtTwoShapes => write!(f, "the kernel would read one value at two shapes"),
        }
    }
}

/// A fusion group under construction: its nodes, its anchor (row op or matmul), if any, and what it reads from
/// memory with the shape of each read (one shape per value: see [`WhyNot::ReadAtTwoShapes`]).
///
/// The reads are kept up to date as groups merge, so checking a fusion costs the consumer's few operands rather
/// than a pass over every node of the group (which made long chains cubic to plan).
#[derive(Clone, Debug, Default)]
pub struct Group {
    pub nodes: Vec<NodeId>,
    pub anchor: Option<NodeId>,
    pub reads: BTreeMap<NodeId, Shape>,
    /// Some node is computed per element of a larger shape than its own: a cheap producer broadcast into its
    /// consumer (see [`eval_shapes`]).
    pub recomputed: bool,
}

/// How a producer joins its consumer's kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fusion {
    /// At its own shape, the consumer's.
    InPlace,
    /// Recomputed per element of the consumer's larger shape.
    Broadcast,
}

/// The most nodes a producer recomputed per element of a broadcast may have.
pub const MAX_RECOMPUTED_NODES: usize = 8;

/// Whether `producer` (a group whose value is broadcast into its consumer) is cheap enough to recompute per element
/// of the consumer rather than to write to memory in a kernel of its own: a few casts, selections, comparisons and
/// additive or multiplicative ops (a causal mask from positions, a padding term), with no reduction, matmul or
/// concat. Transcendental ops, divisions and powers stay in a kernel of their own, computed once per value.
pub fn recomputable(g: &Graph, producer: &Group) -> bool {
    producer.anchor.is_none()
        && producer.nodes.len() <= MAX_RECOMPUTED_NODES
        && producer
            .nodes
            .iter()
            .all(|&n| g.node(n).op.is_cheap_to_recompute())
}

impl Group {
    /// Adds `other`'s nodes and reads. A group never reads a node of another group it merges with: every node
    /// of a group but its output has its one use inside the group, and the output's one use is the consumer.
    fn absorb(&mut self, other: Group) {
        self.anchor = self.anchor.or(other.anchor);
        self.recomputed |= other.recomputed;
        self.nodes.extend(other.nodes);
        self.reads.extend(other.reads);
    }
}

/// Can `producer` (the output of `producer_group`) be computed in the same kernel as `consumer`, which has already
/// absorbed `consumer_group` (its other fused producers)? `operand_pos` is the producer's position among the
/// consumer's operands. Both groups are asked about together, so reads are checked across every group merging
/// into the kernel.
pub fn can_fuse(
    g: &Graph,
    uses: &[usize],
    producer_group: &Group,
    consumer_group: &Group,
    producer: NodeId,
    consumer: NodeId,
    operand_pos: usize,
) -> Result<Fusion, WhyNot> {
    // The anchor stays the producer's: the consumer's side may hold the consumer itself (a row op), and the two
    // sides' anchors are compared below.
    let mut group = producer_group.clone();
    group.absorb(consumer_group.clone());
    group.anchor = producer_group.anchor;
    if group
        .nodes
        .iter()
        .any(|&n| class(&g.node(n).op) == Class::Standalone)
    {
        return Err(WhyNot::Standalone);
    }
    let consumer_class = class(&g.node(consumer).op);
    if group
        .nodes
        .iter()
        .chain([&consumer])
        .any(|&n| is_dynamic_concat(g, n))
    {
        return Err(WhyNot::DynamicConcat);
    }
    let concats = count_concats(g, &group.nodes) + usize::from(consumer_class == Class::Concat);
    if concats > 0 && !matches!(consumer_class, Class::Elementwise | Class::Concat) {
        return Err(WhyNot::ConcatReader);
    }
    if concats > 0 && group.anchor.is_some() {
        return Err(if consumer_class == Class::Concat {
            WhyNot::ConcatInput
        } else {
            WhyNot::ConcatReader
        });
    }
    if concats > 1 {
        return Err(WhyNot::TwoConcats);
    }
    match consumer_class {
        Class::Elementwise | Class::Concat => {}
        Class::Row => {
            if operand_pos != 0 {
                return Err(WhyNot::NotRowInput);
            }
            if group.anchor.is_some() {
                return Err(WhyNot::TwoAnchors);
            }
        }
        Class::MatMul => return Err(WhyNot::MatMulOperand),
        Class::Standalone => return Err(WhyNot::Standalone),
        Class::Leaf | Class::Constant | Class::View => return Err(WhyNot::ConsumerKind),
    }
    if uses[producer.index()] != 1 {
        return Err(WhyNot::MultipleUses(uses[producer.index()]));
    }
    // Row consumers read the producer as their row input, and a concat each input, at the producer's own shape.
    let consumer_shape = &g.ty(consumer).shape;
    let fusion = if consumer_class == Class::Elementwise && g.ty(producer).shape != *consumer_shape
    {
        if !recomputable(g, producer_group) {
            return Err(WhyNot::Broadcast);
        }
        Fusion::Broadcast
    } else {
        Fusion::InPlace
    };
    if producer_group.anchor.is_some() && consumer_group.anchor.is_some() {
        return Err(WhyNot::TwoAnchors);
    }
    if consumer_group.anchor.is_some() && count_concats(g, &producer_group.nodes) > 0 {
        // The consumer already holds a matmul epilogue (or is a row op): no concat in it.
        return Err(WhyNot::ConcatReader);
    }
    // A fused concat's pieces are computed at their own spans of the concat axis: no value recomputed over a
    // broadcast among them.
    if (fusion == Fusion::Broadcast || group.recomputed) && concats > 0 {
        return Err(WhyNot::Recomputed);
    }
    // A recomputed producer's reads are made at the consumer's shape, like everything else in its kernel.
    let producer_reads = producer_group.reads.iter().map(|(n, at)| match fusion {
        Fusion::Broadcast => (*n, consumer_shape.clone()),
        Fusion::InPlace => (*n, at.clone()),
    });
    let mut reads: BTreeMap<NodeId, Shape> = consumer_group.reads.clone();
    for (n, at) in producer_reads {
        if reads.get(&n).is_some_and(|seen| *seen != at) {
            return Err(WhyNot::ReadAtTwoShapes);
        }
        reads.insert(n, at);
    }
    let conflict = node_reads(g, consumer)
        .into_iter()
        .filter(|(n, _)| !group.nodes.contains(n))
        .any(|(n, at)| reads.get(&n).is_some_and(|seen| *seen != at));
    if conflict {
        return Err(WhyNot::ReadAtTwoShapes);
    }
    Ok(fusion)
}

/// A concat whose axis has a dynamic length.
pub fn is_dynamic_concat(g: &Graph, n: NodeId) -> bool {
    match &g.node(n).op {
        Op::Concat { axis, .. } => g.ty(n).shape.0[*axis].as_static().is_none(),
        _ => false,
    }
}

/// How many of `nodes` are concats.
pub fn count_concats(g: &Graph, nodes: &[NodeId]) -> usize {
    nodes
        .iter()
        .filter(|&&n| class(&g.node(n).op) == Class::Concat)
        .count()
}

/// Every operand a kernel computing `nodes` reads from memory (not computed by one of `nodes`, not a constant),
/// with the shape it is read at: a matmul reads its operands at the output's batch dims plus their own matrix
/// dims, row ops and gathers read whole operands, elementwise ops read at their evaluation shape
/// ([`eval_shapes`]).
pub fn reads_from_memory(g: &Graph, nodes: &[NodeId]) -> Vec<(NodeId, Shape)> {
    let inside: BTreeSet<NodeId> = nodes.iter().copied().collect();
    let evaluated_at = eval_shapes(g, nodes);
    nodes
        .iter()
        .flat_map(|&id| {
            let reads = node_reads(g, id);
            match evaluated_at.get(&id) {
                Some(at) => reads.into_iter().map(|(n, _)| (n, at.clone())).collect(),
                None => reads,
            }
        })
        // A view of a value computed here (Q of an attention kernel that computes it) is not read from memory.
        .filter(|(operand, _)| !inside.contains(&super::access::view_root(g, *operand)))
        .collect()
}

/// The shape each elementwise node of the kernel computing `nodes` is evaluated at: the shape of the end of its
/// elementwise chain inside the kernel (the kernel's output, or the operand of the row op or matmul it feeds).
/// That is the node's own shape, unless it is a cheap value broadcast into its reader and recomputed there per
/// element ([`Fusion::Broadcast`]); broadcasting composes, so what such a node reads is broadcast straight to the
/// end of the chain.
fn eval_shapes(g: &Graph, nodes: &[NodeId]) -> BTreeMap<NodeId, Shape> {
    // Every node of a kernel but its output has its one use inside the kernel, and readers come after what they
    // read: so, from the last node back, each node's reader is already evaluated.
    let mut reader_of: BTreeMap<NodeId, NodeId> = BTreeMap::new();
    for &n in nodes {
        for operand in g.node(n).op.operands() {
            reader_of.insert(operand, n);
        }
    }
    let mut at: BTreeMap<NodeId, Shape> = BTreeMap::new();
    for &n in nodes.iter().rev() {
        if class(&g.node(n).op) != Class::Elementwise {
            continue;
        }
        let shape = match reader_of.get(&n).and_then(|r| at.get(r)) {
            Some(reader_at) => reader_at.clone(),
            None => g.ty(n).shape.clone(),
        };
        at.insert(n, shape);
    }
    at
}

/// The non-constant operands of one node, each with the shape the node reads it at.
fn node_reads(g: &Graph, id: NodeId) -> Vec<(NodeId, Shape)> {
    let node = g.node(id);
    // A state write reads only its value: the state it replaces part of is its output buffer.
    let written = match node.op {
        Op::Write { state, .. } => Some(state),
        _ => None,
    };
    node.op
        .operands()
        .into_iter()
        .filter(|&operand| !matches!(g.node(operand).op, Op::Scalar(_)))
        .filter(|&operand| Some(operand) != written)
        .map(|operand| {
            let at = match &node.op {
                Op::MatMul(..) => matmul_operand_shape(g, id, operand),
                Op::Reduce { .. }
                | Op::Softmax { .. }
                | Op::Cumsum { .. }
                | Op::LayerNorm { .. }
                | Op::RmsNorm { .. }
                | Op::Embedding { .. }
                | Op::Write { .. }
                | Op::Concat { .. } => g.ty(operand).shape.clone(),
                _ => g.ty(id).shape.clone(),
            };
            (operand, at)
        })
        .collect()
}

/// A matmul operand is read at the output's batch dims followed by its own two matrix dims.
fn matmul_operand_shape(g: &Graph, mm: NodeId, operand: NodeId) -> Shape {
    let out = &g.ty(mm).shape.0;
    let own = &g.ty(operand).shape.0;
    let mut dims: Vec<Dim> = out[..out.len() - 2].to_vec();
    dims.extend_from_slice(&own[own.len() - 2..]);
    Shape(dims)
}

/// A refused fusion, for the report.
#[derive(Clone, Debug)]
pub struct Refusal {
    pub producer: NodeId,
    pub consumer: NodeId,
    pub why: WhyNot,
}

/// Groups the computing nodes of `g` into kernels. Each consumer absorbs the groups of the producers it may
/// fuse with; since a fused producer has exactly one reader, merging can never create a cycle between kernels.
pub fn group(g: &Graph, fused: bool) -> (Vec<Group>, Vec<Refusal>) {
    let uses = g.use_counts();
    let mut group_of: Vec<Option<usize>> = vec![None; g.nodes.len()];
    let mut groups: Vec<Option<Group>> = Vec::new();
    let mut refusals = Vec::new();
    for id in g.ids() {
        let c = class(&g.node(id).op);
        if matches!(c, Class::Leaf | Class::Constant | Class::View) {
            continue;
        }
        let mut merged = Group {
            anchor: matches!(c, Class::Row | Class::MatMul).then_some(id),
            ..Group::default()
        };
        for (pos, operand) in g.node(id).op.operands().into_iter().enumerate() {
            let Some(gi) = group_of[operand.index()] else {
                continue;
            };
            let Some(candidate) = groups[gi].as_ref() else {
                continue;
            };
            let verdict = if fused {
                can_fuse(g, &uses, candidate, &merged, operand, id, pos)
            } else {
                Err(WhyNot::EagerPlan)
            };
            match verdict {
                Ok(fusion) => {
                    if let Some(mut taken) = groups[gi].take() {
                        if fusion == Fusion::Broadcast {
                            let at = g.ty(id).shape.clone();
                            taken
                                .reads
                                .values_mut()
                                .for_each(|shape| *shape = at.clone());
                            taken.recomputed = true;
                        }
                        merged.absorb(taken);
                    }
                }
                Err(why) => refusals.push(Refusal {
                    producer: operand,
                    consumer: id,
                    why,
                }),
            }
        }
        let own_reads: Vec<(NodeId, Shape)> = node_reads(g, id)
            .into_iter()
            .filter(|(n, _)| !merged.nodes.contains(n))
            .collect();
        merged.reads.extend(own_reads);
        merged.nodes.push(id);
        merged.nodes.sort();
        let gi = groups.len();
        for n in &merged.nodes {
            group_of[n.index()] = Some(gi);
        }
        groups.push(Some(merged));
    }
    (groups.into_iter().flatten().collect(), refusals)
}

#[cfg(test)]
#[path = "fusion_tests.rs"]
mod tests;
