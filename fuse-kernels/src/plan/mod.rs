//! From a checked graph to a [`Plan`]: fusion groups → kernels with their strided reads → the static memory plan
//! → the plan hash. A `Plan` can only be made here, from a graph that passed inference, so the writers in
//! `back/` only ever see validated input.

pub mod access;
pub mod attention;
pub mod bounds;
pub mod computed_operand;
pub mod concat;
pub mod fusion;
pub mod memory;
pub mod output_layout;
mod report;
pub mod row_region;

use std::collections::BTreeSet;

pub use access::Access;
pub use attention::Attention;
pub use concat::{Piece, Piecewise};
pub use fusion::{can_fuse, Fusion, Refusal, WhyNot};
pub use memory::MemoryPlan;
pub use report::{dot, dump, dump_graph, kernel_bytes};

use crate::ir::{Graph, NodeId, Op, Shape};
use fusion::{class, Class};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Maximal fusion.
    Fused,
    /// One kernel per op (views are still read in place, as eager frameworks do).
    Eager,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KernelKind {
    /// Elementwise ops over the output shape (a materialising copy is the empty case).
    Elementwise,
    /// Prologue (elementwise, into the row) → `anchor` over the last axis → epilogue (elementwise, per output row).
    Row {
        anchor: NodeId,
    },
    /// Written-out row ops: reductions over the last axis broadcast back over their rows, each reduction a pass
    /// over the row, then the output row (see [`row_region`]).
    RowRegion,
    /// A (batched) GEMM with its elementwise epilogue applied per output block.
    MatMul {
        anchor: NodeId,
    },
    Gather {
        node: NodeId,
    },
    /// A concat of values in memory, copied (a concat no elementwise op reads, of inputs it computes nothing for).
    Concat {
        node: NodeId,
    },
    /// Elementwise ops that read through one concat, whose inputs' elementwise chains are computed here too: each
    /// input provides its span of the concat axis (see [`concat`]).
    Piecewise(Piecewise),
    /// `softmax(f(Q·Kᵀ)) · V` by blocks of query rows, the scores never in memory (see [`attention`]).
    Attention(Attention),
    /// `state.write(axis, start, value)`: copies the value into its span of the state's buffer, in place.
    Write {
        node: NodeId,
    },
}

impl KernelKind {
    pub fn name(&self) -> &'static str {
        match self {
            KernelKind::Elementwise | KernelKind::Piecewise(_) => "elementwise",
            KernelKind::Row { .. } | KernelKind::RowRegion => "row",
            KernelKind::MatMul { .. } => "matmul",
            KernelKind::Gather { .. } => "gather",
            KernelKind::Concat { .. } => "concat",
            KernelKind::Attention(_) => "attention",
            KernelKind::Write { .. } => "write",
        }
    }
}

/// One read of a value held in memory (directly or through views), broadcast over the shape it is read at.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Read {
    /// The operand node as the ops see it (a view, a leaf, or another kernel's output).
    pub node: NodeId,
    pub access: Access,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Kernel {
    pub name: String,
    pub kind: KernelKind,
    /// Nodes computed here, in graph order; the last is `output`, unless `write` says otherwise.
    pub nodes: Vec<NodeId>,
    pub output: NodeId,
    pub reads: Vec<Read>,
    /// Where the last computed node's elements go when the kernel's output is a view of it laid out contiguously
    /// (`base` is that node, `strides` index `output`'s buffer): an attention kernel writing its heads straight into
    /// the `[batch, seq, heads, d]` layout its reader wants, with no copy kernel after it (see [`output_layout`]).
    pub write: Option<Access>,
}

impl Kernel {
    pub fn computes(&self, id: NodeId) -> bool {
        self.nodes.contains(&id)
    }

    pub fn read(&self, id: NodeId) -> Option<&Read> {
        self.reads.iter().find(|r| r.node == id)
    }
}

/// Where a materialised value lives at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Storage {
    Input(u32),
    Param(u32),
    /// A state's buffer, owned by the caller's session: read as the state and written by its `write`.
    State(u32),
    /// An [`Op::Arange`]'s values, written by the runtime when it binds the dims (the node's op says which).
    Arange,
    Arena(usize),
    Output(usize),
}

#[derive(Clone, Debug)]
pub struct Plan {
    pub graph: Graph,
    pub mode: Mode,
    pub kernels: Vec<Kernel>,
    pub refusals: Vec<Refusal>,
    /// Every value in memory, with its storage, in a fixed order (buffer ids index this).
    pub buffers: Vec<(NodeId, Storage)>,
    pub memory: MemoryPlan,
    pub hash: u64,
}

impl Plan {
    pub fn buffer_of(&self, node: NodeId) -> Option<usize> {
        self.buffers.iter().position(|(n, _)| *n == node)
    }
}

/// The planning passes, in order.
pub fn plan(graph: &Graph, mode: Mode) -> Plan {
    let graph = &separate_leaf_outputs(graph);
    let (groups, mut refusals) = fusion::group(graph, mode == Mode::Fused);
    let groups = match mode {
        Mode::Fused => {
            let groups = attention::fuse(graph, groups, &mut refusals);
            let groups = computed_operand::fuse(graph, groups);
            row_region::fuse(graph, groups, &mut refusals)
        }
        Mode::Eager => groups,
    };
    let roots: BTreeSet<NodeId> = groups
        .iter()
        .filter_map(|g| g.nodes.last().copied())
        .collect();
    let copies = views_needing_copies(graph, &roots);
    let kernels = build_kernels(graph, groups, &copies);
    let buffers = storage(graph, &kernels);
    let memory = memory::plan(graph, &liveness(&kernels, &buffers));
    let mut plan = Plan {
        graph: graph.clone(),
        mode,
        kernels,
        refusals,
        buffers,
        memory,
        hash: 0,
    };
    plan.hash = fnv1a(dump(&plan).as_bytes());
    plan
}

/// A model output that is an input, a parameter or a state itself (or a state's written value, which lives in the
/// state's buffer) gets a node of its own (an identity reshape, i.e. a view), so that it has an output buffer
/// distinct from the leaf's for its copy kernel to fill.
fn separate_leaf_outputs(graph: &Graph) -> Graph {
    let mut g = graph.clone();
    for i in 0..g.outputs.len() {
        let out = g.outputs[i];
        if g.node(out).op.is_leaf() || matches!(g.node(out).op, Op::Write { .. }) {
            let shape = g.ty(out).shape.clone();
            let span = g.span(out);
            if let Ok(id) = g.add(Op::Reshape { input: out, shape }, span) {
                g.outputs[i] = id;
            }
        }
    }
    g
}

/// Values that need a copy kernel: reshapes of non-contiguous views cannot be read in place, so their input view
/// is materialised; and a model output that is a view or an input/param gets its own contiguous copy.
fn views_needing_copies(g: &Graph, roots: &BTreeSet<NodeId>) -> BTreeSet<NodeId> {
    let mut copies: BTreeSet<NodeId> = g
        .outputs
        .iter()
        .copied()
        .filter(|&o| !roots.contains(&o) && !matches!(g.node(o).op, Op::Scalar(_)))
        .collect();
    for id in g.ids() {
        if !matches!(g.node(id).op, Op::Reshape { .. }) {
            continue;
        }
        // Not `id` itself: a model output that is a reshape gets a copy kernel, which must read it through views.
        let in_memory = |n: NodeId| n != id && (roots.contains(&n) || copies.contains(&n));
        if let Err(access::NeedsCopy(view)) = access::view_access(g, id, &in_memory) {
            copies.insert(view);
        }
    }
    copies
}

fn is_materialized(g: &Graph, roots: &BTreeSet<NodeId>, n: NodeId) -> bool {
    roots.contains(&n) || g.node(n).op.is_leaf()
}

fn build_kernels(g: &Graph, groups: Vec<fusion::Group>, copies: &BTreeSet<NodeId>) -> Vec<Kernel> {
    let mut units: Vec<(NodeId, Vec<NodeId>, Option<NodeId>)> = groups
        .into_iter()
        .filter_map(|gr| {
            gr.nodes
                .last()
                .copied()
                .map(|root| (root, gr.nodes, gr.anchor))
        })
        .collect();
    units.extend(copies.iter().map(|&c| (c, Vec::new(), None)));
    units.sort_by_key(|u| u.0);
    let mut writes = output_layout::merge_copies(g, &mut units);
    let roots: BTreeSet<NodeId> = units.iter().map(|u| u.0).collect();
    let in_memory = |n: NodeId| is_materialized(g, &roots, n);
    let mut kernels = Vec::new();
    for (index, (root, nodes, anchor)) in units.into_iter().enumerate() {
        let attention = anchor.and_then(|_| attention::recognise(g, &nodes));
        let region = anchor.is_none() && row_region::is_region(g, &nodes);
        let kind = match (attention, anchor.map(|a| (a, class(&g.node(a).op)))) {
            _ if region => KernelKind::RowRegion,
            (Some(att), _) => KernelKind::Attention(att),
            (None, Some((a, Class::Row))) => KernelKind::Row { anchor: a },
            (None, Some((a, _))) => KernelKind::MatMul { anchor: a },
            (None, None) => match &g.node(root).op {
                Op::Embedding { .. } => KernelKind::Gather { node: root },
                Op::Write { .. } => KernelKind::Write { node: root },
                Op::Concat { .. } if nodes.len() == 1 => KernelKind::Concat { node: root },
                _ => match concat::recognise(g, &nodes) {
                    Some(pieces) => KernelKind::Piecewise(pieces),
                    None => KernelKind::Elementwise,
                },
            },
        };
        let mut k = Kernel {
            name: format!("k{index}_{}", kind.name()),
            kind,
            nodes: nodes.clone(),
            output: root,
            reads: Vec::new(),
            write: writes.remove(&root),
        };
        // A copy kernel reads its view through the view's own access and computes nothing.
        let operands: Vec<(NodeId, Shape)> = if nodes.is_empty() {
            vec![(root, g.ty(root).shape.clone())]
        } else if region {
            // A row region reads everything at its rows: per-row values broadcast along the row.
            let rows = g.ty(root).shape.clone();
            read_shapes(g, &k)
                .into_iter()
                .map(|(n, _)| (n, rows.clone()))
                .collect()
        } else {
            read_shapes(g, &k)
        };
        for (operand, at) in operands {
            if matches!(g.node(operand).op, Op::Scalar(_))
                || k.reads.iter().any(|r| r.node == operand)
            {
                continue;
            }
            let own = if nodes.is_empty() {
                // Copy kernels read the view of their own output node.
                let inner = |n: NodeId| n != root && in_memory(n);
                access::view_access(g, operand, &inner)
            } else {
                access::view_access(g, operand, &in_memory)
            };
            // Every reshape that needed a copy got one above, so this cannot fail; keep the node for the report.
            let Ok(own) = own else { continue };
            k.reads.push(Read {
                node: operand,
                access: access::broadcast_to(own, &at),
            });
        }
        kernels.push(k);
    }
    kernels
}

/// The operands a kernel reads from memory, each with the shape it is read at.
fn read_shapes(g: &Graph, k: &Kernel) -> Vec<(NodeId, Shape)> {
    fusion::reads_from_memory(g, &k.nodes)
}

/// Inputs and params first (their own memory), then every kernel output: graph outputs get their own allocation,
/// the rest live in the arena.
fn storage(g: &Graph, kernels: &[Kernel]) -> Vec<(NodeId, Storage)> {
    let mut buffers = Vec::new();
    for id in g.ids() {
        match g.node(id).op {
            Op::Input(i) => buffers.push((id, Storage::Input(i))),
            Op::Param(i) => buffers.push((id, Storage::Param(i))),
            Op::State(i) => buffers.push((id, Storage::State(i))),
            Op::Arange { .. } => buffers.push((id, Storage::Arange)),
            _ => {}
        }
    }
    for k in kernels {
        let storage = match (
            g.outputs.iter().position(|&o| o == k.output),
            &g.node(k.output).op,
        ) {
            // A write's result is the state's buffer itself (never an output: see `separate_leaf_outputs`).
            (_, Op::Write { state, .. }) => match g.node(*state).op {
                Op::State(i) => Storage::State(i),
                _ => Storage::Arena(usize::MAX),
            },
            (Some(i), _) => Storage::Output(i),
            (None, _) => Storage::Arena(usize::MAX),
        };
        buffers.push((k.output, storage));
    }
    buffers
}

fn liveness(kernels: &[Kernel], buffers: &[(NodeId, Storage)]) -> Vec<memory::Interval> {
    let mut intervals = Vec::new();
    for (def, k) in kernels.iter().enumerate() {
        let in_arena = buffers
            .iter()
            .any(|&(n, s)| n == k.output && matches!(s, Storage::Arena(_)));
        if !in_arena {
            continue;
        }
        let last_use = kernels
            .iter()
            .enumerate()
            .filter(|(_, other)| other.reads.iter().any(|r| r.access.base == k.output))
            .map(|(i, _)| i)
            .max()
            .unwrap_or(def);
        intervals.push(memory::Interval {
            node: k.output,
            def,
            last_use,
        });
    }
    intervals
}

/// Arena slots are known only after the memory plan; fill them into the buffer table.
impl Plan {
    pub fn storage_of(&self, buffer: usize) -> Storage {
        let (node, s) = self.buffers[buffer];
        match s {
            Storage::Arena(_) => Storage::Arena(self.memory.slot_of(node).unwrap_or(0)),
            other => other,
        }
    }
}

/// FNV-1a, 64-bit: stable across platforms and Rust versions, unlike `DefaultHasher`.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
