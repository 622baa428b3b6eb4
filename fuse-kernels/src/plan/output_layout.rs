//! An attention kernel that writes its output in the layout its reader wants. Multi-head attention computes
//! `[batch, heads, seq, d]` and the output projection reads `[batch, seq, heads · d]`: a permute, then a reshape
//! that merges dims the permute separated, which no strides can read, so the permuted value gets a copy kernel
//! of its own (`views_needing_copies`). When the attention's output is read only through those views, the
//! attention kernel instead writes each head's rows straight to their places in the copy's buffer, and the copy
//! kernel goes: per layer, one kernel and one round trip of the attention output through memory less.
//!
//! The placement is the views undone: the copy's buffer is contiguous in the view's shape, and walking the views
//! back (a permute's inverse, a reshape back to its input's shape) gives, for each dim of the attention's
//! output, its stride in that buffer. Slices are not undone (a slice writes only part of the buffer).

use std::collections::BTreeMap;

use super::access::{contiguous_strides, reshape_strides, Access};
use crate::ir::{Dim, Graph, NodeId, Op};

/// One kernel-to-be: its root, its nodes, its anchor.
pub type Unit = (NodeId, Vec<NodeId>, Option<NodeId>);

/// Merges each copy of a view of an attention kernel's output into that kernel: the unit's root becomes the
/// copy's view, and the returned map gives, by that root, where the attention's elements go in its buffer.
pub fn merge_copies(g: &Graph, units: &mut Vec<Unit>) -> BTreeMap<NodeId, Access> {
    let uses = g.use_counts();
    let mut writes = BTreeMap::new();
    let copies: Vec<NodeId> = units
        .iter()
        .filter(|u| u.1.is_empty())
        .map(|u| u.0)
        .collect();
    for view in copies {
        let Some(write) = placement(g, &uses, view) else {
            continue;
        };
        let Some(at) = units.iter().position(|u| u.0 == write.base) else {
            continue;
        };
        if super::attention::recognise(g, &units[at].1).is_none() {
            continue;
        }
        units[at].0 = view;
        units.retain(|u| !(u.0 == view && u.1.is_empty()));
        writes.insert(view, write);
    }
    units.sort_by_key(|u| u.0);
    writes
}

/// Where the elements of the value `view` is a chain of permutes and reshapes of go in `view`'s contiguous
/// buffer, when each step of the chain is read only by the next (so the value is needed nowhere else) and the
/// value's rows stay contiguous there.
fn placement(g: &Graph, uses: &[usize], view: NodeId) -> Option<Access> {
    let shape = g.ty(view).shape.0.clone();
    let mut strides = contiguous_strides(&shape);
    let (mut node, mut shape) = (view, shape);
    loop {
        let (input, input_shape) = match &g.node(node).op {
            Op::Permute { input, perm } => {
                let mut inner_shape = vec![Dim::fixed(1); perm.len()];
                let mut inner_strides = vec![Dim::fixed(1); perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inner_shape[p] = shape[i].clone();
                    inner_strides[p] = strides[i].clone();
                }
                strides = inner_strides;
                (*input, inner_shape)
            }
            Op::Reshape { input, .. } => {
                let inner_shape = g.ty(*input).shape.0.clone();
                strides = reshape_strides(&shape, &strides, &inner_shape)?;
                (*input, inner_shape)
            }
            _ => break,
        };
        if uses[input.index()] != 1 || g.outputs.contains(&input) {
            return None;
        }
        node = input;
        shape = input_shape;
    }
    // Rows of the value contiguous in the buffer, as the kernels write them.
    let rows_contiguous = strides
        .last()
        .is_some_and(|s| s.as_static() == Some(1) || shape.last().is_some_and(Dim::is_one));
    (node != view && rows_contiguous).then_some(Access {
        base: node,
        offset: Vec::new(),
        shape,
        strides,
    })
}
