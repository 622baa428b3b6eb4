//! The CUDA writer: a validated [`Plan`] → one self-contained CUDA C source (the device prelude pasted in, then one
//! `extern "C" __global__` function per kernel), written with `write!` like naga's backends.
//!
//! # Launch ABI (shared with the runtime)
//! Every generated kernel takes, in order:
//! 1. one `long long dynN` per dynamic dim of the graph, in [`crate::ir::Graph::dyn_dims`] order;
//! 2. `out`: the kernel's output buffer (element 0);
//! 3. `in0, in1, ...`: one pointer per entry of [`Kernel::reads`], each the buffer of that read's
//!    `access.base` (element 0 — the access offset is applied inside the kernel). Id buffers (`i64`) are
//!    `const long long*`, every other buffer is `const fuse_t*` (the storage type, f32 by default), except
//!    the values [`f32_values`] keeps in f32 whatever the storage (`float*`, for `out` too).
//!
//! Grid and block sizes, and the symbol to launch, come from [`launches`]: a kernel whose code is the same as an
//! earlier kernel's (every layer of a transformer) is emitted once and launched by the earlier symbol.
//!
//! MatMul kernels are special: the GEMM itself runs on the host side (cuBLASLt) and writes the product into
//! `out` (contiguous, row-major), then the epilogue kernel (if any) rewrites `out` in place; without cuBLAS,
//! `<symbol>_gemm` does both in one launch. [`gemm`] gives the GEMM's shape, its operands (as reads, with every
//! stride) and whether cuBLASLt's own epilogue (bias, bias+ReLU, bias+tanh-GELU) replaces the epilogue kernel.
//!
//! Half-precision storage ([`StorageType`]) changes loads and stores only; kernels compute in f32. The source
//! includes no header, so NVRTC compiles it on a host without a CUDA include directory.
//!
//! Output is deterministic: the same plan gives byte-identical text (no hash-map order, no timestamps).

mod attention;
mod elementwise;
mod expr;
mod gather;
mod launch;
mod matmul;
mod piecewise;
mod row;
mod row_passes;
mod row_region;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write};

pub use launch::{gemm, launches, param_buffers, GemmDesc, GemmEpilogue, Grid, Launch, Role};

use crate::ir::{DType, Graph, NodeId, Op, ReduceOp, UnaryOp};
use crate::plan::{Kernel, KernelKind, Mode, Plan};

/// The hand-written device helpers every generated file starts with.
pub const PRELUDE: &str = include_str!("../../../cuda/prelude.cuh");

/// How float tensors are stored in device memory. Kernels always compute in f32; only loads and stores change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum StorageType {
    #[default]
    F32,
    F16,
    Bf16,
}

impl StorageType {
    /// The C type of a stored element (the prelude defines the half types; see there).
    pub fn c_type(self) -> &'static str {
        match self {
            StorageType::F32 => "float",
            StorageType::F16 => "fuse_f16",
            StorageType::Bf16 => "fuse_bf16",
        }
    }

    fn prelude_define(self) -> Option<&'static str> {
        match self {
            StorageType::F32 => None,
            StorageType::F16 => Some("FUSE_STORAGE_F16"),
            StorageType::Bf16 => Some("FUSE_STORAGE_BF16"),
        }
    }

    /// The C expression converting the f32 `v` to the storage type.
    fn store_expr(self) -> &'static str {
        match self {
            StorageType::F32 => "v",
            StorageType::F16 => "fuse_f16_from_f32(v)",
            StorageType::Bf16 => "fuse_bf16_from_f32(v)",
        }
    }
}

/// Writer options; the default is f32 storage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Options {
    pub storage: StorageType,
}

/// What every kernel writer needs: the graph, the kernel, the storage type and the values kept in f32.
pub(crate) struct Ctx<'a> {
    pub g: &'a Graph,
    pub k: &'a Kernel,
    pub storage: StorageType,
    pub f32_values: &'a BTreeSet<NodeId>,
}

impl Ctx<'_> {
    /// Whether the buffer of `node` holds f32 where the storage type is a half type ([`f32_values`]).
    pub fn kept_f32(&self, node: NodeId) -> bool {
        self.storage != StorageType::F32 && self.f32_values.contains(&node)
    }

    /// The C type of `out`'s elements.
    fn out_type(&self) -> &'static str {
        if self.kept_f32(self.k.output) {
            "float"
        } else {
            "fuse_t"
        }
    }

    /// The function a store to `out` passes its f32 value through: to the storage type, or none for a value kept
    /// in f32 (`out[i] = (v);`).
    pub fn store(&self) -> &'static str {
        if self.kept_f32(self.k.output) {
            ""
        } else {
            "fuse_from_f32"
        }
    }
}

/// The values stored as f32 whatever the storage type: every value a gather reads as ids, and whole numbers the
/// model computes ([`crate::id_range`] bounds them: positions, computed ids, `argmax`'s picks) that a half type
/// may not hold exactly. bf16 holds whole numbers exactly only up to 2^8 and f16 up to 2^11, fewer than a
/// position table has rows (RoBERTa's 514) or a vocabulary has tokens; f32 holds them up to 2^24. The arena's
/// slots are sized for f32, so such a value fits its slot in any storage, and a model output kept so comes back
/// from a buffer of f32 ([`f32_outputs`]). Every kernel converts what it loads and stores (attention's queries,
/// keys and values too), except two readers of the storage type alone, which refuse such a value in a half type
/// ([`storage_only_reads`]).
pub(crate) fn f32_values(plan: &Plan) -> BTreeSet<NodeId> {
    let g = &plan.graph;
    let gather_ids = plan.kernels.iter().filter_map(|k| {
        let KernelKind::Gather { node } = k.kind else {
            return None;
        };
        let Op::Embedding { ids, .. } = g.node(node).op else {
            return None;
        };
        Some(k.reads.iter().find(|r| r.node == ids)?.access.base)
    });
    let whole_numbers = plan
        .kernels
        .iter()
        .map(|k| k.output)
        .filter(|&v| large_whole_numbers(g, v));
    gather_ids
        .chain(whole_numbers)
        .filter(|&v| g.ty(v).dtype != DType::I64)
        .collect()
}

/// The values kernel `k` reads as the storage type whatever [`f32_values`] says: a product's operands (cuBLAS
/// multiplies the storage type) and the value a state write copies as it is.
fn storage_only_reads(g: &Graph, k: &Kernel) -> Vec<NodeId> {
    let bases = |reads: &[usize]| -> Vec<NodeId> {
        reads
            .iter()
            .filter_map(|&i| k.reads.get(i).map(|r| r.access.base))
            .collect()
    };
    match &k.kind {
        KernelKind::Write { .. } => k.reads.iter().map(|r| r.access.base).collect(),
        KernelKind::MatMul { .. } => match matmul::describe(g, k) {
            Some(gemm) => bases(&[gemm.a, gemm.b]),
            None => k.reads.iter().map(|r| r.access.base).collect(),
        },
        _ => Vec::new(),
    }
}

/// An `#error` line for a kernel that reads a value kept in f32 as the storage type ([`storage_only_reads`]):
/// read as a half type it would be wrong, so the model does not compile in that storage, and says why.
fn storage_only_refusal(cx: &Ctx) -> Option<String> {
    if cx.storage == StorageType::F32 {
        return None;
    }
    let v = storage_only_reads(cx.g, cx.k)
        .into_iter()
        .find(|v| cx.f32_values.contains(v))?;
    Some(format!(
        "#error \"fuse: {} reads {v}, whole numbers the model computes (positions, ids, argmax's picks) that a \
         half type may round, as the storage type, the only one it reads; run this model with f32 storage on the \
         GPU\"",
        cx.k.kind.name()
    ))
}

/// Whether `v` holds whole numbers a half type may not hold exactly: a value [`crate::id_range`] bounds past bf16's
/// whole numbers, or the negation or the largest along an axis of one (the steps of `min(axis, ..)` and `argmax`,
/// each stored apart in an eager plan).
fn large_whole_numbers(g: &Graph, v: NodeId) -> bool {
    match crate::id_range::of(g, v) {
        Some(r) => !exact_in_half_types(&r),
        None => match g.node(v).op {
            Op::Unary(UnaryOp::Neg, a)
            | Op::Reduce {
                op: ReduceOp::Max,
                input: a,
                ..
            } => large_whole_numbers(g, a),
            _ => false,
        },
    }
}

/// Whether every value in `r` is a whole number bf16 (and so f16) holds exactly: from -2^8 to 2^8.
fn exact_in_half_types(r: &crate::id_range::IdRange) -> bool {
    const BF16_WHOLE_NUMBERS: i64 = 1 << 8;
    r.lo >= -BF16_WHOLE_NUMBERS && r.static_hi().is_some_and(|hi| hi <= BF16_WHOLE_NUMBERS)
}

/// The model outputs among [`f32_values`], as plan buffers: the runtime gives them buffers of f32 in every storage.
pub fn f32_outputs(plan: &Plan) -> Vec<usize> {
    f32_values(plan)
        .into_iter()
        .filter(|v| plan.graph.outputs.contains(v))
        .filter_map(|v| plan.buffer_of(v))
        .collect()
}

/// The CUDA source of `plan`, f32 storage.
pub fn write_cuda(plan: &Plan, model_name: &str) -> String {
    write_cuda_with(plan, model_name, &Options::default())
}

/// The CUDA source of `plan` with the given options.
pub fn write_cuda_with(plan: &Plan, model_name: &str, options: &Options) -> String {
    let f32_values = f32_values(plan);
    let shared = shared_kernels_with(plan, &f32_values);
    source_with(plan, model_name, options, &shared, &f32_values)
}

/// Everything a model embeds of one plan's GPU side: its CUDA source in each storage type and its launch table.
pub struct CudaCode {
    pub f32: String,
    pub bf16: String,
    pub f16: String,
    pub launches: Vec<Launch>,
}

/// [`CudaCode`] of `plan`: what [`write_cuda_with`] (for each storage type) and [`launches`] write, with the
/// kernels' sharing (three renderings of each kernel) decided once rather than four times.
pub fn write_all(plan: &Plan, model_name: &str) -> CudaCode {
    let f32_values = f32_values(plan);
    let shared = shared_kernels_with(plan, &f32_values);
    let source =
        |storage| source_with(plan, model_name, &Options { storage }, &shared, &f32_values);
    CudaCode {
        f32: source(StorageType::F32),
        bf16: source(StorageType::Bf16),
        f16: source(StorageType::F16),
        launches: launch::launches_with(plan, model_name, &shared),
    }
}

fn source_with(
    plan: &Plan,
    model_name: &str,
    options: &Options,
    shared: &[Option<usize>],
    f32_values: &BTreeSet<NodeId>,
) -> String {
    let mut out = String::new();
    // Writing into a `String` cannot fail; an `Err` here could only come from a bug in a `Display` impl.
    if write_source(&mut out, plan, model_name, options, shared, f32_values).is_err() {
        out.push_str("\n#error \"fuse: the CUDA writer failed\"\n");
    }
    out
}

fn write_source(
    w: &mut String,
    plan: &Plan,
    model_name: &str,
    options: &Options,
    shared: &[Option<usize>],
    f32_values: &BTreeSet<NodeId>,
) -> fmt::Result {
    let mode = match plan.mode {
        Mode::Fused => "fused",
        Mode::Eager => "eager",
    };
    writeln!(
        w,
        "// @generated by fuse: CUDA kernels of model `{model_name}`, {mode} plan {:016x}.",
        plan.hash
    )?;
    writeln!(
        w,
        "// Do not edit: regenerated from the model source on every build."
    )?;
    writeln!(w, "// Dynamic dims: {}", dyn_dims_comment(&plan.graph))?;
    writeln!(w)?;
    if let Some(define) = options.storage.prelude_define() {
        writeln!(w, "#define {define} 1")?;
    }
    w.push_str(PRELUDE);
    writeln!(w)?;
    writeln!(w, "typedef {} fuse_t;", options.storage.c_type())?;
    writeln!(
        w,
        "FUSE_DEVICE fuse_t fuse_from_f32(float v) {{ return {}; }}",
        options.storage.store_expr()
    )?;
    for (i, k) in plan.kernels.iter().enumerate() {
        let cx = Ctx {
            g: &plan.graph,
            k,
            storage: options.storage,
            f32_values,
        };
        writeln!(w)?;
        kernel_comment(w, &cx)?;
        match shared[i] {
            Some(first) => {
                let same = kernel_symbol(plan, model_name, &plan.kernels[first]);
                writeln!(
                    w,
                    "// Same code as {}: launched as `{same}`.",
                    plan.kernels[first].name
                )?;
            }
            None => write_kernel(w, &cx, &kernel_symbol(plan, model_name, k))?,
        }
        if let Some(refusal) = storage_only_refusal(&cx) {
            writeln!(w, "{refusal}")?;
        }
    }
    Ok(())
}

/// The function(s) of one plan kernel.
fn write_kernel(w: &mut String, cx: &Ctx, symbol: &str) -> fmt::Result {
    match &cx.k.kind {
        KernelKind::Elementwise => elementwise::write(w, cx, symbol, None),
        KernelKind::Row { anchor } => row::write(w, cx, symbol, *anchor),
        KernelKind::RowRegion => row_region::write(w, cx, symbol),
        KernelKind::MatMul { anchor } => matmul::write(w, cx, symbol, *anchor),
        KernelKind::Gather { node } => gather::write_gather(w, cx, symbol, *node),
        KernelKind::Concat { node } => gather::write_concat(w, cx, symbol, *node),
        KernelKind::Piecewise(pw) => piecewise::write(w, cx, symbol, pw),
        KernelKind::Attention(att) => attention::write(w, cx, symbol, att),
        KernelKind::Write { node } => gather::write_state(w, cx, symbol, *node),
    }
}

/// For each kernel, the earlier kernel with exactly the same code, if any (the layers of a transformer are
/// the same kernels on other buffers): those are emitted once, which keeps nvcc time and binary size flat in
/// the layer count.
///
/// Two kernels share only where their code is equal in every storage type: the launch table is written once,
/// for all of them, and a kernel launched by its own symbol must be in each source. (f32 storage has vector
/// paths whose guards tell kernels apart that half storage, with no such path, renders alike.)
pub(crate) fn shared_kernels(plan: &Plan) -> Vec<Option<usize>> {
    shared_kernels_with(plan, &f32_values(plan))
}

fn shared_kernels_with(plan: &Plan, f32_values: &BTreeSet<NodeId>) -> Vec<Option<usize>> {
    const STORAGES: [StorageType; 3] = [StorageType::F32, StorageType::F16, StorageType::Bf16];
    let mut first_with: BTreeMap<String, usize> = BTreeMap::new();
    let mut shared = Vec::with_capacity(plan.kernels.len());
    for (i, k) in plan.kernels.iter().enumerate() {
        // An unnamed rendering is the kernel's code, independent of its name and position.
        let mut text = String::new();
        let rendered = STORAGES.iter().all(|&storage| {
            let cx = Ctx {
                g: &plan.graph,
                k,
                storage,
                f32_values,
            };
            write_kernel(&mut text, &cx, "").is_ok()
        });
        if !rendered {
            shared.push(None);
            continue;
        }
        match first_with.get(&text) {
            Some(&first) => shared.push(Some(first)),
            None => {
                first_with.insert(text, i);
                shared.push(None);
            }
        }
    }
    shared
}

/// The symbol each kernel is launched by: its own, or that of the earlier kernel with the same code.
pub(crate) fn launch_symbol(
    plan: &Plan,
    model_name: &str,
    shared: &[Option<usize>],
    index: usize,
) -> String {
    let k = shared.get(index).copied().flatten().unwrap_or(index);
    kernel_symbol(plan, model_name, &plan.kernels[k])
}

fn dyn_dims_comment(g: &Graph) -> String {
    if g.dyn_dims.is_empty() {
        return "none".into();
    }
    let names: Vec<String> = g
        .dyn_dims
        .iter()
        .enumerate()
        .map(|(i, n)| format!("dyn{i} = {n}"))
        .collect();
    names.join(", ")
}

/// `fuse_<model>_<planhash>_`: kernels of different models and plans never share a name, so their modules can be
/// loaded side by side.
pub fn symbol_prefix(plan: &Plan, model_name: &str) -> String {
    let model: String = model_name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("fuse_{model}_{:016x}_", plan.hash)
}

/// The symbol of a plan kernel, e.g. `fuse_encoderlayer_1a2b3c4d5e6f7a8b_k3_elementwise`.
pub fn kernel_symbol(plan: &Plan, model_name: &str, k: &Kernel) -> String {
    format!("{}{}", symbol_prefix(plan, model_name), k.name)
}

/// A comment naming what the kernel computes and reads, so the `.cu` can be read against the plan dump.
fn kernel_comment(w: &mut String, cx: &Ctx) -> fmt::Result {
    let (g, k) = (cx.g, cx.k);
    let ops: Vec<String> = k
        .nodes
        .iter()
        .map(|&n| format!("{n} {}", g.node(n).op.name()))
        .collect();
    let ops = if ops.is_empty() {
        "copy".to_string()
    } else {
        ops.join(", ")
    };
    writeln!(
        w,
        "// {}: {ops} -> {} {}",
        k.name,
        k.output,
        g.fmt_shape(&g.ty(k.output).shape)
    )?;
    for (i, r) in k.reads.iter().enumerate() {
        let strides: Vec<String> = r.access.strides.iter().map(|s| g.fmt_dim(s)).collect();
        let offset: Vec<String> = r.access.offset.iter().map(|s| g.fmt_dim(s)).collect();
        let offset = if offset.is_empty() {
            "0".to_string()
        } else {
            offset.join(" + ")
        };
        writeln!(
            w,
            "//   in{i} = {} via {} at {} offset {offset} strides [{}]",
            r.node,
            r.access.base,
            g.fmt_shape(&crate::ir::Shape(r.access.shape.clone())),
            strides.join(", ")
        )?;
    }
    Ok(())
}

/// The parameter list of the launch ABI (see the module docs).
fn params(cx: &Ctx) -> String {
    let mut ps: Vec<String> = (0..cx.g.dyn_dims.len())
        .map(|i| format!("long long dyn{i}"))
        .collect();
    ps.push(format!("{}* __restrict__ out", cx.out_type()));
    for i in 0..cx.k.reads.len() {
        ps.push(format!(
            "const {}* __restrict__ in{i}",
            expr::read_type(cx, i)
        ));
    }
    ps.join(", ")
}

/// The opening line of a kernel.
fn signature(w: &mut String, cx: &Ctx, symbol: &str, threads: u32) -> fmt::Result {
    writeln!(
        w,
        "extern \"C\" __global__ void __launch_bounds__({threads}) {symbol}({}) {{",
        params(cx)
    )
}
