//! Concats fused into elementwise kernels (RoPE's `concat([x2.neg(), x1], -1)`).
//!
//! Grouping ([`super::fusion::group`]) lets a concat absorb the elementwise chains that compute its inputs and
//! lets an elementwise consumer absorb the concat, as long as the kernel has no anchor and holds one concat. Such a
//! kernel computes its output element by element like any elementwise kernel, except that the concat's value at
//! an element comes from one input, chosen by the element's index along the concat axis: the kernel is cut into
//! one *piece* per input, the span of the output whose index along the axis falls in that input's range. Inside a
//! piece, the input's own chain (its *branch*: the nodes that compute it, and the reads they make, at the
//! input's shape) is evaluated at the output index shifted back by the piece's start; the rest of the kernel
//! reads at the output index. This module recognises that structure in a finished group, for the writers.

use crate::ir::{Graph, NodeId, Op};

/// The span of the output that one concat input provides, and how it is computed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Piece {
    /// The concat's operand.
    pub input: NodeId,
    /// Where the input starts along the concat axis, and its length there.
    pub start: usize,
    pub len: usize,
    /// The kernel's nodes that compute `input` (in graph order, `input` last when it is computed here); empty
    /// when the input is read from memory.
    pub branch: Vec<NodeId>,
}

/// An elementwise kernel that reads through one concat.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Piecewise {
    pub concat: NodeId,
    pub axis: usize,
    pub pieces: Vec<Piece>,
    /// The nodes computed from the concat (and from reads at the output's shape), in graph order; empty when the
    /// concat is the kernel's output.
    pub rest: Vec<NodeId>,
}

impl Piecewise {
    /// The piece that computes `id`, if `id` is in a branch.
    pub fn piece_of(&self, id: NodeId) -> Option<usize> {
        self.pieces.iter().position(|p| p.branch.contains(&id))
    }
}

/// The piecewise structure of a kernel computing `nodes` (in graph order), if it holds a concat. Grouping
/// guarantees there is at most one, that every other node is elementwise, and that each computed node has one
/// reader, so the branches are disjoint.
pub fn recognise(g: &Graph, nodes: &[NodeId]) -> Option<Piecewise> {
    let concat = nodes
        .iter()
        .copied()
        .find(|&n| matches!(g.node(n).op, Op::Concat { .. }))?;
    let Op::Concat { inputs, axis } = &g.node(concat).op else {
        return None;
    };
    let mut pieces = Vec::with_capacity(inputs.len());
    let mut start = 0usize;
    for &input in inputs {
        let len = g.ty(input).shape.0.get(*axis)?.as_static()?;
        pieces.push(Piece {
            input,
            start,
            len,
            branch: branch(g, nodes, input),
        });
        start += len;
    }
    let in_branch = |n: &NodeId| pieces.iter().any(|p| p.branch.contains(n));
    let rest = nodes
        .iter()
        .copied()
        .filter(|n| *n != concat && !in_branch(n))
        .collect();
    Some(Piecewise {
        concat,
        axis: *axis,
        pieces,
        rest,
    })
}

/// The nodes of `nodes` that `input` is computed from, through nodes of `nodes` only.
fn branch(g: &Graph, nodes: &[NodeId], input: NodeId) -> Vec<NodeId> {
    let mut wanted = vec![input];
    let mut found = Vec::new();
    while let Some(n) = wanted.pop() {
        if !nodes.contains(&n) || found.contains(&n) {
            continue;
        }
        found.push(n);
        wanted.extend(g.node(n).op.operands());
    }
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use crate::plan::{plan, KernelKind, Mode, Plan, WhyNot};

    /// The fused plan of a one-struct model.
    fn fused(forward: &str) -> Plan {
        let source = format!(
            "#[fused_model] mod m {{ pub struct M {{}} impl M {{ pub fn forward{forward} }} }}"
        );
        let capture = crate::front::capture_str(&source).unwrap_or_else(|e| panic!("{e}"));
        assert!(capture.errors.is_none(), "test model does not capture");
        plan(&capture.models[0].graph, Mode::Fused)
    }

    fn refusals(p: &Plan) -> Vec<WhyNot> {
        p.refusals.iter().map(|r| r.why.clone()).collect()
    }

    #[test]
    fn rotate_half_fuses_into_its_reader() {
        let p = fused(
            "(&self, #[shape(b, 8)] x: Tensor, #[shape(b, 8)] s: Tensor) -> Tensor { \
             x * &s + concat([x.slice(1, 4, 8).neg(), x.slice(1, 0, 4)], 1) * &s }",
        );
        assert_eq!(p.kernels.len(), 1, "{}", crate::plan::dump(&p));
        let KernelKind::Piecewise(pw) = &p.kernels[0].kind else {
            panic!("not piecewise: {:?}", p.kernels[0].kind);
        };
        let spans: Vec<(usize, usize, usize)> = pw
            .pieces
            .iter()
            .map(|piece| (piece.start, piece.len, piece.branch.len()))
            .collect();
        assert_eq!(spans, [(0, 4, 1), (4, 4, 0)]);
        assert_eq!(pw.axis, 1);
        // x * s, the product with s and the sum.
        assert_eq!(pw.rest.len(), 3);
        assert!(refusals(&p).is_empty(), "{:?}", refusals(&p));
    }

    #[test]
    fn a_concat_of_computed_inputs_is_one_kernel_even_unread() {
        let p = fused(
            "(&self, #[shape(3, b)] x: Tensor) -> Tensor { concat([x.exp(), (x * 2.0).neg(), x], 0) }",
        );
        assert_eq!(p.kernels.len(), 1, "{}", crate::plan::dump(&p));
        let KernelKind::Piecewise(pw) = &p.kernels[0].kind else {
            panic!("not piecewise: {:?}", p.kernels[0].kind);
        };
        assert!(pw.rest.is_empty());
        assert_eq!(pw.pieces.len(), 3);
    }

    #[test]
    fn a_concat_of_views_only_read_by_nothing_stays_a_copy() {
        let p = fused(
            "(&self, #[shape(b, 8)] x: Tensor) -> Tensor { concat([x.slice(1, 4, 8), x.slice(1, 0, 4)], 1) }",
        );
        assert!(matches!(p.kernels[..], [ref k] if matches!(k.kind, KernelKind::Concat { .. })));
    }

    #[test]
    fn refused_where_the_kernel_is_not_elementwise_or_holds_two() {
        let cases: [(&str, WhyNot); 5] = [
            (
                "(&self, #[shape(b, 8)] x: Tensor) -> Tensor { \
                 concat([x.slice(1, 4, 8).neg(), x.slice(1, 0, 4)], 1).softmax(-1) }",
                WhyNot::ConcatReader,
            ),
            (
                "(&self, #[shape(b, 8)] x: Tensor, #[shape(8, 8)] w: Tensor) -> Tensor { \
                 x.matmul(&w) + concat([x.slice(1, 4, 8).neg(), x.slice(1, 0, 4)], 1) }",
                WhyNot::ConcatReader,
            ),
            (
                "(&self, #[shape(b, 8)] x: Tensor, #[shape(8, 4)] w: Tensor) -> Tensor { \
                 concat([x.matmul(&w), x.slice(1, 0, 4)], 1) + 1.0 }",
                WhyNot::ConcatInput,
            ),
            (
                "(&self, #[shape(b, 8)] x: Tensor) -> Tensor { \
                 concat([concat([x.slice(1, 0, 2), x.slice(1, 2, 4)], 1), x.slice(1, 4, 8)], 1).neg() }",
                WhyNot::TwoConcats,
            ),
            (
                "(&self, #[shape(b, 8)] x: Tensor) -> Tensor { \
                 concat([x.slice(1, 0, 2), x.slice(1, 2, 8)], 1) + concat([x.slice(1, 4, 8), x.slice(1, 0, 4)], 1) }",
                WhyNot::TwoConcats,
            ),
        ];
        for (forward, why) in cases {
            let p = fused(forward);
            assert!(
                refusals(&p).contains(&why),
                "{forward}: {why:?} not in {:?}",
                refusals(&p)
            );
            for k in &p.kernels {
                let concats = crate::plan::fusion::count_concats(&p.graph, &k.nodes);
                assert!(concats <= 1, "{forward}: {}", crate::plan::dump(&p));
                let elementwise =
                    matches!(k.kind, KernelKind::Piecewise(_) | KernelKind::Concat { .. });
                assert!(
                    concats == 0 || elementwise,
                    "{forward}: {}",
                    crate::plan::dump(&p)
                );
            }
        }
    }

    #[test]
    fn a_concat_read_twice_is_kept_in_memory() {
        let p = fused(
            "(&self, #[shape(b, 8)] x: Tensor) -> Tensor { \
             let c = concat([x.slice(1, 4, 8).neg(), x.slice(1, 0, 4)], 1); c * &c }",
        );
        assert_eq!(p.kernels.len(), 2, "{}", crate::plan::dump(&p));
        assert!(refusals(&p).contains(&WhyNot::MultipleUses(2)));
    }
}
