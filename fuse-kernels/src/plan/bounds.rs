//! The slice bounds a build cannot prove. `narrow(0, past, seq)` reads rows `[past, past + seq)`, which fit the
//! axis only for some values of the dims; the runtime checks each such bound when it binds the dims, so an
//! out-of-range call is a typed error before any kernel reads past the end. Bounds that are provably false are
//! refused by inference, at the user's line.

use crate::infer::slice_fits;
use crate::ir::{DType, Dim, Graph, NodeId, Op};

/// `start + len <= size` along `axis` of the value `node` slices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceBound {
    pub node: NodeId,
    /// The value it slices.
    pub input: NodeId,
    pub axis: usize,
    pub start: Dim,
    pub len: Dim,
    pub size: Dim,
    /// A state write (`input` the state), not a slice that reads.
    pub write: bool,
    /// An embedding whose ids are an `arange` (`input` the table): the rows `[start, start + len)` it reads.
    pub ids: bool,
}

impl SliceBound {
    /// `past + seq <= 16`, for the plan dump and the report.
    pub fn text(&self, g: &Graph) -> String {
        format!(
            "{} + {} <= {}",
            g.fmt_dim(&self.start),
            g.fmt_dim(&self.len),
            g.fmt_dim(&self.size)
        )
    }
}

/// Every slice in `g` whose bound depends on the dynamic dims, in node order.
pub fn unproved(g: &Graph) -> Vec<SliceBound> {
    g.ids()
        .filter_map(|id| match &g.node(id).op {
            Op::Slice {
                input,
                axis,
                start,
                len,
            } => {
                let size = g.ty(*input).shape.0[*axis].clone();
                (slice_fits(g, start, len, &size).is_none()).then(|| SliceBound {
                    node: id,
                    input: *input,
                    axis: *axis,
                    start: start.clone(),
                    len: len.clone(),
                    size,
                    write: false,
                    ids: false,
                })
            }
            // A state write replaces `[start, start + len)` of its axis: it must not reach past the buffer.
            Op::Write {
                state,
                axis,
                start,
                value,
            } => {
                let size = g.ty(*state).shape.0[*axis].clone();
                let len = g.ty(*value).shape.0[*axis].clone();
                (slice_fits(g, start, &len, &size).is_none()).then(|| SliceBound {
                    node: id,
                    input: *state,
                    axis: *axis,
                    start: start.clone(),
                    len,
                    size,
                    write: true,
                    ids: false,
                })
            }
            // Ids made by an `arange` are positions the runtime computes, not an input it validates: the rows
            // they read must exist, or the kernel would read zeros. Views of the arange read a subset of its
            // values, so its whole range is checked (a safe over-approximation); inference refuses a range past
            // the table whatever the dims.
            Op::Embedding { table, ids } => {
                let (start, len) = match g.arange_behind(*ids) {
                    Some(rows) => rows,
                    // Ids the model computed: the rows their bound reaches (refused by inference when it cannot
                    // be bounded, or when it is static and past the table).
                    None if g.ty(*ids).dtype == DType::F32 => {
                        crate::id_range::of(g, *ids)?.as_rows()?
                    }
                    None => return None,
                };
                let size = g.ty(*table).shape.0.first()?.clone();
                slice_fits(g, &start, &len, &size)
                    .is_none()
                    .then_some(SliceBound {
                        node: id,
                        input: *table,
                        axis: 0,
                        start,
                        len,
                        size,
                        write: false,
                        ids: true,
                    })
            }
            _ => None,
        })
        .collect()
}
