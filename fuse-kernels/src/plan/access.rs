//! Strided access: how a kernel reads a value in memory through views (permute, reshape, slice) and NumPy
//! broadcasting, as an offset and one stride per iterated dim. Strides and offsets are symbolic in the dynamic dims.

use crate::ir::{Dim, Graph, NodeId, Op, Shape};

/// `element(i0, .., in) = base[offset + Σ ik · strides[k]]` over `shape`. A stride with `coeff == 0` is a broadcast.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Access {
    pub base: NodeId,
    /// A sum of monomials.
    pub offset: Vec<Dim>,
    pub shape: Vec<Dim>,
    pub strides: Vec<Dim>,
}

pub fn zero() -> Dim {
    Dim {
        coeff: 0,
        syms: Vec::new(),
    }
}

/// Row-major strides of a contiguous shape.
pub fn contiguous_strides(shape: &[Dim]) -> Vec<Dim> {
    let mut strides = vec![Dim::fixed(1); shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1].mul(&shape[i + 1]);
    }
    strides
}

impl Access {
    /// Whether a size-1 dim's stride matters: it never does, so compare only the dims longer than 1.
    pub fn is_contiguous(&self) -> bool {
        let want = contiguous_strides(&self.shape);
        self.shape
            .iter()
            .zip(self.strides.iter().zip(&want))
            .all(|(d, (s, w))| d.is_one() || s == w)
    }

    pub fn is_broadcast(stride: &Dim) -> bool {
        stride.coeff == 0
    }
}

/// The strides that read a strided view (`shape`, `strides`) as `new_shape` (same element count, row-major order
/// kept), or `None` when no strides can: PyTorch's rule for `view` (`computeStride`). The old dims are cut into
/// chunks that are contiguous with respect to each other (dim i's stride is dim i+1's stride times its length);
/// each chunk must be covered exactly by consecutive new dims, which then stride through it contiguously. So a
/// reshape that inserts or removes unit dims, or splits or merges dims inside a chunk, is a view even of a
/// permuted or sliced value (a head split `[b, kv, s, d] → [b, kv, 1, s, d]` for grouped-query attention), and
/// only one that merges across a chunk boundary needs a copy. Dims are monomials, so "covered exactly" is
/// structural equality; a dynamic dim that happens to be 1 at run time keeps the strides valid.
pub fn reshape_strides(shape: &[Dim], strides: &[Dim], new_shape: &[Dim]) -> Option<Vec<Dim>> {
    let mut new_strides = vec![zero(); new_shape.len()];
    let mut view_d = new_shape.len();
    let Some(mut chunk_base) = strides.last().cloned() else {
        // A scalar: every new dim is 1.
        return new_shape.iter().all(Dim::is_one).then_some(new_strides);
    };
    let (mut tensor_numel, mut view_numel) = (Dim::fixed(1), Dim::fixed(1));
    for d in (0..shape.len()).rev() {
        tensor_numel = tensor_numel.mul(&shape[d]);
        let chunk_ends =
            d == 0 || (!shape[d - 1].is_one() && strides[d - 1] != tensor_numel.mul(&chunk_base));
        if !chunk_ends {
            continue;
        }
        while view_d > 0
            && ((view_numel != tensor_numel && tensor_numel.divide(&view_numel).is_some())
                || new_shape[view_d - 1].is_one())
        {
            let next = view_numel.mul(&new_shape[view_d - 1]);
            if tensor_numel.divide(&next).is_none() && !new_shape[view_d - 1].is_one() {
                return None;
            }
            new_strides[view_d - 1] = view_numel.mul(&chunk_base);
            view_numel = next;
            view_d -= 1;
        }
        if view_numel != tensor_numel {
            return None;
        }
        if d > 0 {
            chunk_base = strides[d - 1].clone();
            tensor_numel = Dim::fixed(1);
            view_numel = Dim::fixed(1);
        }
    }
    (view_d == 0).then_some(new_strides)
}

/// Why a view cannot be read in place.
#[derive(Debug)]
pub struct NeedsCopy(pub NodeId);

/// The access of `node` (a materialized value or a chain of views over one) over its own shape.
/// `materialized(n)` says whether `n` is in memory. A reshape of a non-contiguous view cannot be expressed with
/// strides: the error names the view that must be copied first.
pub fn view_access(
    g: &Graph,
    node: NodeId,
    materialized: &dyn Fn(NodeId) -> bool,
) -> Result<Access, NeedsCopy> {
    if materialized(node) || !g.node(node).op.is_view() {
        let shape = g.ty(node).shape.0.clone();
        return Ok(Access {
            base: node,
            offset: Vec::new(),
            strides: contiguous_strides(&shape),
            shape,
        });
    }
    match &g.node(node).op {
        Op::Permute { input, perm } => {
            let inner = view_access(g, *input, materialized)?;
            Ok(Access {
                base: inner.base,
                offset: inner.offset,
                shape: perm.iter().map(|&p| inner.shape[p].clone()).collect(),
                strides: perm.iter().map(|&p| inner.strides[p].clone()).collect(),
            })
        }
        Op::Slice {
            input, axis, start, ..
        } => {
            let mut a = view_access(g, *input, materialized)?;
            if start.coeff > 0 {
                a.offset.push(a.strides[*axis].mul(start));
            }
            a.shape[*axis] = g.ty(node).shape.0[*axis].clone();
            Ok(a)
        }
        Op::Reshape { input, shape } => {
            let inner = view_access(g, *input, materialized)?;
            let strides = if inner.is_contiguous() {
                contiguous_strides(&shape.0)
            } else {
                reshape_strides(&inner.shape, &inner.strides, &shape.0).ok_or(NeedsCopy(*input))?
            };
            Ok(Access {
                base: inner.base,
                offset: inner.offset,
                strides,
                shape: shape.0.clone(),
            })
        }
        _ => unreachable!("is_view() covers exactly permute, slice and reshape"),
    }
}

/// The value a chain of views (permute, slice, reshape) starts from: `node` itself when it is not a view.
pub fn view_root(g: &Graph, node: NodeId) -> NodeId {
    match &g.node(node).op {
        Op::Permute { input, .. } | Op::Slice { input, .. } | Op::Reshape { input, .. } => {
            view_root(g, *input)
        }
        _ => node,
    }
}

/// Broadcasts `a` (right-aligned) to `target`: new leading dims and size-1 dims get stride 0.
pub fn broadcast_to(mut a: Access, target: &Shape) -> Access {
    let rank = target.rank();
    let pad = rank - a.shape.len();
    let mut strides = vec![zero(); pad];
    for (d, s) in a.shape.iter().zip(&a.strides) {
        strides.push(if d.is_one() { zero() } else { s.clone() });
    }
    a.shape = target.0.clone();
    a.strides = strides;
    a
}

#[cfg(test)]
#[path = "access_tests.rs"]
mod tests;
