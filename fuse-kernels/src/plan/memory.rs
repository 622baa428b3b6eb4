//! The static memory plan: liveness of every intermediate over the kernel sequence, then one arena whose slots
//! (and so offsets) are fixed at build time. Sizes are symbolic in the dynamic dims, so a slot holds values of one
//! monomial (e.g. all `batch·seq·k` buffers) and its offset is a sum of monomials evaluated per call.

use crate::ir::{Dim, Graph, NodeId};

/// Slot offsets are rounded up to this many bytes when evaluated, so every buffer starts cache-line aligned.
pub const ALIGN: usize = 64;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Slot {
    /// Bytes per unit of `syms` (the largest tenant).
    pub coeff_bytes: usize,
    pub syms: Vec<u16>,
}

impl Slot {
    pub fn bytes(&self) -> Dim {
        Dim {
            coeff: self.coeff_bytes,
            syms: self.syms.clone(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MemoryPlan {
    pub slots: Vec<Slot>,
    /// Slot of each arena-resident value.
    pub assignment: Vec<(NodeId, usize)>,
}

impl MemoryPlan {
    pub fn slot_of(&self, node: NodeId) -> Option<usize> {
        self.assignment
            .iter()
            .find(|(n, _)| *n == node)
            .map(|&(_, s)| s)
    }

    /// Byte offset of each slot and the arena size for the given dynamic dims: slots in order, each start
    /// rounded up to [`ALIGN`]. The runtime evaluates the same formula (`fuse_runtime::exec`).
    pub fn layout(&self, dyn_values: &[usize]) -> (Vec<usize>, usize) {
        let mut offsets = Vec::with_capacity(self.slots.len());
        let mut end = 0usize;
        for slot in &self.slots {
            let start = end.div_ceil(ALIGN) * ALIGN;
            offsets.push(start);
            end = start + slot.bytes().eval(dyn_values);
        }
        (offsets, end)
    }
}

/// A value living in the arena from the kernel that writes it to the last kernel that reads it.
pub struct Interval {
    pub node: NodeId,
    pub def: usize,
    pub last_use: usize,
}

/// Greedy best fit in definition order: a value reuses a slot of the same monomial whose tenants are all dead
/// before it is written, the smallest that holds it, or else the largest (which grows least). First fit let a
/// large value grow a small slot while a large one was free, and the arena then depended on the order values
/// happened to be defined in. A kernel's output never shares a slot with a value that kernel reads (their
/// intervals overlap at that kernel), which is what makes it safe for kernels to write while they read.
pub fn plan(g: &Graph, intervals: &[Interval]) -> MemoryPlan {
    let mut slots: Vec<Slot> = Vec::new();
    let mut busy_until: Vec<usize> = Vec::new();
    let mut assignment = Vec::new();
    for iv in intervals {
        let ty = g.ty(iv.node);
        let numel = ty.shape.numel();
        let coeff_bytes = numel.coeff * ty.dtype.size();
        let free_slots =
            (0..slots.len()).filter(|&s| slots[s].syms == numel.syms && busy_until[s] < iv.def);
        let fits = |s: &usize| slots[*s].coeff_bytes >= coeff_bytes;
        let free = free_slots
            .clone()
            .filter(fits)
            .min_by_key(|&s| (slots[s].coeff_bytes, s))
            .or_else(|| free_slots.max_by_key(|&s| (slots[s].coeff_bytes, std::cmp::Reverse(s))));
        let s = match free {
            Some(s) => {
                slots[s].coeff_bytes = slots[s].coeff_bytes.max(coeff_bytes);
                s
            }
            None => {
                slots.push(Slot {
                    coeff_bytes,
                    syms: numel.syms.clone(),
                });
                busy_until.push(0);
                slots.len() - 1
            }
        };
        busy_until[s] = iv.last_use;
        assignment.push((iv.node, s));
    }
    MemoryPlan { slots, assignment }
}
