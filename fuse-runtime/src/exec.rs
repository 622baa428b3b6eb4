//! The CPU executor: validates inputs, binds the dynamic dims, lays out the arena from the build-time memory plan,
//! and runs the generated kernels in order.
//!
//! Concurrency: each call takes an arena from a pool (a lock held only to pop/push, see [`crate::pool`]), so many
//! threads may run the same model at once; kernels only touch their own call's arena and the shared, read-only
//! weights.

use crate::cpu::attention::Products as AttentionProducts;
use crate::cpu::gemm::bf16::Bf16B;
use crate::cpu::gemm::int8::QuantB;
use crate::cpu::gemm::{BView, PackedB, WeightPack};
use crate::cpu::CpuPrecision;
use crate::error::{Error, Result};
use crate::iota::Iota;
use crate::pool::{ArenaPool, PoolLimits, PoolStats};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use fuse_tables::ProgramTables;

use crate::tensor::{DType, Tensor};

pub use fuse_tables::{BufferKind, BufferSpec, KernelCall, KernelInfo, Mono, OutputSpec};

/// A generated kernel function: runs one kernel on the plan buffers its launch lists (output first, then one
/// per read). Kernels that differ only in their buffers (every layer of a transformer) share one function.
pub type KernelFn = fn(&Ctx<'_>, &[usize]);

/// Handed each kernel's index in plan order and its output, right after the kernel ran (see
/// [`Executor::run_observed`]).
pub type KernelObserver<'a> = &'a mut dyn FnMut(usize, &[f32]);

/// One compiled plan (fused or eager) as the macro embeds it: its kernel functions, its report texts, and its
/// tables (`fuse_tables::ProgramTables`) still encoded. [`EmbeddedProgram::decode`] makes the [`Program`] the
/// executor runs, once per process.
#[derive(Debug)]
pub struct EmbeddedProgram {
    pub model: &'static str,
    pub mode: &'static str,
    pub plan_hash: u64,
    /// The plan's distinct kernel functions; `fuse_tables::KernelCall::function` indexes them.
    pub functions: &'static [KernelFn],
    /// `fuse_tables::encode` of the plan's `ProgramTables`.
    pub tables: &'static str,
    pub dump: &'static str,
    pub dot: &'static str,
    decoded: OnceLock<std::result::Result<Program, String>>,
}

impl EmbeddedProgram {
    #[allow(clippy::too_many_arguments)]
    pub const fn new(
        model: &'static str,
        mode: &'static str,
        plan_hash: u64,
        functions: &'static [KernelFn],
        tables: &'static str,
        dump: &'static str,
        dot: &'static str,
    ) -> Self {
        EmbeddedProgram {
            model,
            mode,
            plan_hash,
            functions,
            tables,
            dump,
            dot,
            decoded: OnceLock::new(),
        }
    }

    /// The plan, its tables decoded on first use; [`Error::PlanTables`] when they do not decode.
    pub fn decode(&'static self) -> Result<&'static Program> {
        let decoded = self.decoded.get_or_init(|| self.decode_now());
        decoded.as_ref().map_err(|why| Error::PlanTables {
            model: self.model.into(),
            plan: self.mode,
            why: why.clone(),
        })
    }

    fn decode_now(&self) -> std::result::Result<Program, String> {
        let tables: ProgramTables = fuse_tables::decode(self.tables)?;
        if let Some(call) = tables
            .kernels
            .iter()
            .find(|k| k.function >= self.functions.len())
        {
            return Err(format!(
                "a kernel calls function {} of {}",
                call.function,
                self.functions.len()
            ));
        }
        Ok(Program {
            model: self.model,
            mode: self.mode,
            plan_hash: self.plan_hash,
            functions: self.functions,
            tables,
            dump: self.dump,
            dot: self.dot,
        })
    }
}

/// One compiled plan (fused or eager), decoded: what the executor runs and the report shows. It reads as its
/// tables (`program.kernels`, `program.buffers`, ...) through `Deref`, plus the code and texts beside them.
#[derive(Debug)]
pub struct Program {
    pub model: &'static str,
    pub mode: &'static str,
    pub plan_hash: u64,
    /// The plan's distinct kernel functions; every call's `function` indexes them (checked when decoded).
    pub functions: &'static [KernelFn],
    pub tables: ProgramTables,
    pub dump: &'static str,
    pub dot: &'static str,
}

impl std::ops::Deref for Program {
    type Target = ProgramTables;

    fn deref(&self) -> &ProgramTables {
        &self.tables
    }
}

/// Arena slots start at multiples of this (the same rule as the compiler's memory plan).
const ALIGN: usize = 64;

impl Program {
    /// The values of the `index`-th `arange` at `dims`, `numel` of them from its start; the end fits an i64.
    pub(crate) fn arange(
        &self,
        index: usize,
        numel: usize,
        dims: &[usize],
    ) -> Result<std::ops::Range<usize>> {
        let start = self.aranges.get(index).map_or(0, |m| m.eval(dims));
        let end = start.saturating_add(numel);
        i64::try_from(end).map_err(|_| Error::DimArgTooLarge { value: end })?;
        Ok(start..end)
    }

    /// Zeroed output tensors of this program's output shapes at `dims`.
    pub(crate) fn fresh_outputs(&self, dims: &[usize]) -> Result<Vec<Tensor>> {
        self.outputs
            .iter()
            .map(|o| {
                let shape: Vec<usize> = o.dims.iter().map(|m| m.eval(dims)).collect();
                let numel = self.buffers[o.buffer].numel.checked_eval(dims);
                let numel = numel.ok_or(Error::OutOfMemory {
                    what: "an output",
                    bytes: None,
                    available: None,
                })?;
                Tensor::from_f32(&shape, crate::arena::zeroed_f32("an output", numel)?)
            })
            .collect()
    }

    /// Keeps `outputs` when they already have the output shapes at `dims` (so a serving loop allocates nothing),
    /// else replaces them with fresh ones.
    pub(crate) fn fit_outputs(&self, dims: &[usize], outputs: &mut Vec<Tensor>) -> Result<()> {
        let fits = outputs.len() == self.outputs.len()
            && outputs.iter().zip(&self.outputs).all(|(t, o)| {
                t.as_f32().is_some()
                    && t.shape().len() == o.dims.len()
                    && t.shape()
                        .iter()
                        .zip(&o.dims)
                        .all(|(&n, m)| n == m.eval(dims))
            });
        if !fits {
            *outputs = self.fresh_outputs(dims)?;
        }
        Ok(())
    }

    /// Checks the slice bounds the build could not prove (`narrow(0, past, seq)`) at these dims: no kernel may read
    /// past an axis.
    pub fn check_slice_bounds(&self, dims: &[usize]) -> Result<()> {
        for b in &self.slice_bounds {
            let (start, len, size) = (b.start.eval(dims), b.len.eval(dims), b.size.eval(dims));
            if start.checked_add(len).is_none_or(|end| end > size) {
                let what = b.what.clone();
                let axis = b.axis;
                return Err(if b.ids {
                    Error::IdOutOfRange {
                        // An `arange`, or ids the model computes (`fuse_kernels::id_range`): no input holds them.
                        input: "ids made in the model".into(),
                        id: i64::try_from(start.saturating_add(len) - 1).unwrap_or(i64::MAX),
                        vocab: size,
                        table: what,
                    }
                } else if b.write {
                    Error::StateWriteOutOfRange {
                        what,
                        axis,
                        start,
                        len,
                        size,
                    }
                } else {
                    Error::NarrowOutOfRange {
                        what,
                        axis,
                        start,
                        len,
                        size,
                    }
                });
            }
        }
        Ok(())
    }

    /// Byte offset of each slot and the arena size.
    pub fn layout(&self, dims: &[usize]) -> Result<(Vec<usize>, usize)> {
        let overflow = || Error::OutOfMemory {
            what: "the arena",
            bytes: None,
            available: None,
        };
        let mut offsets = Vec::with_capacity(self.slots.len());
        let mut end = 0usize;
        for slot in &self.slots {
            let start = end.checked_next_multiple_of(ALIGN).ok_or_else(overflow)?;
            offsets.push(start);
            let bytes = slot.checked_eval(dims).ok_or_else(overflow)?;
            end = start.checked_add(bytes).ok_or_else(overflow)?;
        }
        Ok((offsets, end))
    }
}

/// The buffers of one call, as kernels see them.
pub struct Ctx<'a> {
    dims: &'a [usize],
    ptrs: &'a [(*mut u8, usize)],
    /// The running kernel's GEMM B operand packed at load, if the plan's tables named one (`packed_b`).
    packed_b: Option<&'a WeightPack>,
    /// The arithmetic of attention's products, from the model's precision.
    attention: AttentionProducts,
}

// SAFETY: the pointers are into memory owned by the call (arena, outputs) or borrowed immutably for its whole
// duration (inputs, weights); kernels run on rayon workers only within the call.
unsafe impl Sync for Ctx<'_> {}

impl Ctx<'_> {
    pub fn dims(&self) -> &[usize] {
        self.dims
    }

    /// The running kernel's B operand, packed when the model's weights were put in place; `gemm_with` uses it
    /// only if it matches the view the kernel reads.
    pub fn packed_b(&self) -> Option<&WeightPack> {
        self.packed_b
    }

    /// What an attention kernel multiplies in (see [`AttentionProducts::for_precision`]).
    pub fn attention_products(&self) -> AttentionProducts {
        self.attention
    }

    fn raw(&self, buffer: usize) -> (*mut u8, usize) {
        self.ptrs[buffer]
    }

    pub fn f32(&self, buffer: usize) -> &[f32] {
        let (ptr, bytes) = self.raw(buffer);
        // SAFETY: the buffer holds `bytes / 4` initialised, 4-aligned f32 (checked when the table is built), and
        // no kernel writes a buffer it reads: the memory plan never gives a kernel's output the slot of a value
        // that is live at that kernel.
        unsafe { std::slice::from_raw_parts(ptr as *const f32, bytes / 4) }
    }

    pub fn i64(&self, buffer: usize) -> &[i64] {
        let (ptr, bytes) = self.raw(buffer);
        // SAFETY: as for `f32`; i64 buffers are always user inputs, 8-aligned by their `Vec<i64>`.
        unsafe { std::slice::from_raw_parts(ptr as *const i64, bytes / 8) }
    }

    /// The output buffer of the running kernel.
    #[allow(clippy::mut_from_ref)]
    pub fn out_f32(&self, buffer: usize) -> &mut [f32] {
        let (ptr, bytes) = self.raw(buffer);
        // SAFETY: each kernel takes its own output exactly once, and (memory plan invariant) it overlaps no buffer
        // the kernel reads; arena and output memory is owned by this call.
        unsafe { std::slice::from_raw_parts_mut(ptr as *mut f32, bytes / 4) }
    }
}

/// How an input is declared: its name, dtype and dims (a fixed size or a named dynamic dim).
#[derive(Clone, Copy, Debug)]
pub enum DimSpec {
    Fixed(usize),
    Dyn(usize),
}

#[derive(Clone, Copy, Debug)]
pub struct InputSpec {
    pub name: &'static str,
    pub dtype: DType,
    pub dims: &'static [DimSpec],
    /// e.g. `[batch, seq, 384]`, for messages.
    pub shape_text: &'static str,
    /// When the input holds ids for embeddings: the smallest table they index.
    pub id_bound: Option<IdBound>,
    /// For a `#[dim] past: usize` argument (passed as an i64 scalar tensor): the dim its value binds.
    pub binds: Option<DimArg>,
}

/// The dim a `#[dim]` argument binds.
#[derive(Clone, Copy, Debug)]
pub struct DimArg {
    /// Index into the model's dynamic dims.
    pub dim: usize,
    /// Whether 0 is a valid value in some call: when the dim only offsets views (a `narrow` start), or its empty
    /// values make only empty values, or only where other dims are 0 too (see `ProgramTables::zero_dims`; the
    /// call then checks `ProgramTables::zero_with`).
    pub may_be_zero: bool,
}

/// A `#[dim]` argument as the untyped API takes it: an i64 scalar tensor.
pub fn dim_arg(value: usize) -> Result<Tensor> {
    let n = i64::try_from(value).map_err(|_| Error::DimArgTooLarge { value })?;
    Tensor::from_i64(&[], vec![n])
}

/// The rows an ids input may index: those of the smallest embedding table it feeds.
#[derive(Clone, Copy, Debug)]
pub struct IdBound {
    pub rows: usize,
    /// The table's checkpoint name, for the error.
    pub table: &'static str,
}

/// Checks inputs against their declarations and binds the dynamic dims, for a model without sums of dims.
pub fn bind_inputs(
    specs: &[InputSpec],
    dyn_dims: &[&str],
    inputs: &[&Tensor],
) -> Result<Vec<usize>> {
    bind_dims(specs, dyn_dims, &|_| false, &|_| false, inputs)
}

/// [`bind_inputs`] for `program`'s model: its sums of dims (`past + seq`) are computed from the free dims, and an
/// input whose shape holds one (a `[batch, seq, past + seq]` mask) must have that length there.
pub fn bind_inputs_with(
    program: &Program,
    specs: &[InputSpec],
    dyn_dims: &[&str],
    inputs: &[&Tensor],
) -> Result<Vec<usize>> {
    let mut dims = bind_dims(
        specs,
        dyn_dims,
        &|s| program.is_sum_dim(s),
        &|s| program.may_be_zero(s),
        inputs,
    )?;
    derive_dims(program, dyn_dims, &mut dims)?;
    for (spec, t) in specs.iter().zip(inputs) {
        for (d, &n) in spec.dims.iter().zip(t.shape()) {
            if let DimSpec::Dyn(s) = *d {
                if program.is_sum_dim(s) && dims[s] != n {
                    return Err(Error::InconsistentDim {
                        dim: dyn_dims[s].into(),
                        first: dims[s],
                        first_input: format!("the sum of its terms ({})", dyn_dims[s]),
                        found: n,
                        input: spec.name.into(),
                    });
                }
            }
        }
    }
    Ok(dims)
}

/// Fills in `program`'s sums of dims from the free ones; one out of range (`seq - 2` at `seq` 1) is an error, and
/// so is a dim at 0 that some value this call leaves non-empty reads (`seq` 0 under a mean over it, with `batch`
/// not 0).
pub(crate) fn derive_dims(program: &Program, names: &[&str], dims: &mut [usize]) -> Result<()> {
    let name = |sym: usize| -> String { names.get(sym).copied().unwrap_or("?").into() };
    program.derive_dims(dims).map_err(|e| match e.value {
        // A sum at 0 where it may not be: the rule of empty values, as for a free dim.
        0 => Error::ZeroDim {
            dim: name(e.sym),
            unless: Vec::new(),
        },
        value => Error::DimOutOfRange {
            dim: name(e.sym),
            value,
        },
    })?;
    match program.zero_refused(dims) {
        Some(rule) => Err(Error::ZeroDim {
            dim: name(rule.sym),
            unless: rule
                .any_of
                .iter()
                .map(|set| set.iter().map(|&s| name(s)).collect())
                .collect(),
        }),
        None => Ok(()),
    }
}

/// Binds every free dim from the shapes and `#[dim]` arguments; `is_sum` dims are left for the caller. An axis
/// binds 0 only to a dim that `may_be_zero` in some call; [`derive_dims`] then checks those that may be 0 only
/// where other dims are.
fn bind_dims(
    specs: &[InputSpec],
    dyn_dims: &[&str],
    is_sum: &dyn Fn(usize) -> bool,
    may_be_zero: &dyn Fn(usize) -> bool,
    inputs: &[&Tensor],
) -> Result<Vec<usize>> {
    if specs.len() != inputs.len() {
        return Err(Error::InputCount {
            expected: specs.len(),
            found: inputs.len(),
        });
    }
    let mut dims: Vec<Option<(usize, &str)>> = vec![None; dyn_dims.len()];
    for (spec, t) in specs.iter().zip(inputs) {
        if t.dtype() != spec.dtype {
            return Err(Error::InputDType {
                input: spec.name.into(),
                expected: spec.dtype,
                found: t.dtype(),
            });
        }
        if t.shape().len() != spec.dims.len() {
            return Err(Error::InputRank {
                input: spec.name.into(),
                expected: spec.dims.len(),
                found: t.shape().to_vec(),
            });
        }
        for (d, &n) in spec.dims.iter().zip(t.shape()) {
            match *d {
                DimSpec::Fixed(want) if want != n => {
                    return Err(Error::InputShape {
                        input: spec.name.into(),
                        expected: spec.shape_text.into(),
                        found: t.shape().to_vec(),
                    })
                }
                DimSpec::Fixed(_) => {}
                DimSpec::Dyn(s) if is_sum(s) => {
                    if n == 0 && !may_be_zero(s) {
                        return Err(Error::ZeroDim {
                            dim: dyn_dims[s].into(),
                            unless: Vec::new(),
                        });
                    }
                }
                DimSpec::Dyn(s) => {
                    if n == 0 && !may_be_zero(s) {
                        return Err(Error::ZeroDim {
                            dim: dyn_dims[s].into(),
                            unless: Vec::new(),
                        });
                    }
                    match dims[s] {
                        Some((first, first_input)) if first != n => {
                            return Err(Error::InconsistentDim {
                                dim: dyn_dims[s].into(),
                                first,
                                first_input: first_input.into(),
                                found: n,
                                input: spec.name.into(),
                            })
                        }
                        _ => dims[s] = Some((n, spec.name)),
                    }
                }
            }
        }
        if let (Some(arg), Some(&value)) = (spec.binds, t.as_i64().and_then(|v| v.first())) {
            let name = dyn_dims[arg.dim];
            let n = usize::try_from(value).map_err(|_| Error::NegativeDim {
                dim: name.into(),
                value,
            })?;
            if n == 0 && !arg.may_be_zero {
                return Err(Error::ZeroDim {
                    dim: name.into(),
                    unless: Vec::new(),
                });
            }
            match dims[arg.dim] {
                Some((first, first_input)) if first != n => {
                    return Err(Error::InconsistentDim {
                        dim: name.into(),
                        first,
                        first_input: first_input.into(),
                        found: n,
                        input: spec.name.into(),
                    })
                }
                _ => dims[arg.dim] = Some((n, spec.name)),
            }
        }
        if let (Some(bound), Some(ids)) = (spec.id_bound, t.as_i64()) {
            if let Some(&bad) = ids
                .iter()
                .find(|&&i| i < 0 || i as u64 >= bound.rows as u64)
            {
                return Err(Error::IdOutOfRange {
                    input: spec.name.into(),
                    id: bad,
                    vocab: bound.rows,
                    table: bound.table.into(),
                });
            }
        }
    }
    Ok(dims.into_iter().map(|d| d.map_or(1, |(n, _)| n)).collect())
}

/// Runs a program; owns the pool of arenas and the B operands its GEMMs read packed.
pub struct Executor {
    program: &'static Program,
    pool: ArenaPool,
    /// Per plan kernel, its GEMM's B packed from the weights this executor runs with (see
    /// [`Executor::pack_weights`]).
    packs: Vec<Option<Arc<WeightPack>>>,
    /// What attention kernels multiply in: follows the precision the weights were packed in.
    attention: AttentionProducts,
    /// The table every call's `arange` buffers point into.
    iota: Iota,
}

/// Packs made for one set of weights, by parameter and view: a B that several kernels or both plans read (tied
/// weights, fused and eager) is packed once.
#[derive(Default)]
pub struct PackCache {
    packs: HashMap<(usize, BView), Arc<WeightPack>>,
}

/// One weight view packed in `precision`, falling back to f32 where int8 or f16 cannot hold it.
fn pack_one(
    backend: crate::cpu::gemm::Backend,
    precision: CpuPrecision,
    source: &[f32],
    view: BView,
) -> Result<Option<WeightPack>> {
    match precision {
        CpuPrecision::Int8 => {
            if let Some(q) = QuantB::new(source, view)? {
                return Ok(Some(WeightPack::Int8(q)));
            }
        }
        CpuPrecision::Bf16 => {
            if let Some(h) = Bf16B::new(source, view)? {
                return Ok(Some(WeightPack::Bf16(h)));
            }
        }
        CpuPrecision::F16 => {
            if let Some(h) = PackedB::new_f16(backend, source, view)? {
                return Ok(Some(WeightPack::F16(h)));
            }
        }
        CpuPrecision::F32 => {}
    }
    Ok(PackedB::new(backend, source, view)?.map(WeightPack::F32))
}

impl PackCache {
    /// Bytes of every distinct pack.
    pub fn bytes(&self) -> usize {
        self.packs.values().map(|p| p.bytes()).sum()
    }
}

impl Executor {
    /// An executor that packs nothing: every GEMM packs its B per call until [`Executor::pack_weights`].
    pub fn new(program: &'static Program) -> Self {
        Executor {
            program,
            pool: ArenaPool::default(),
            packs: Vec::new(),
            attention: AttentionProducts::F32,
            iota: Iota::default(),
        }
    }

    /// Drops every pack, before the parameters are packed again one by one in `precision`
    /// ([`Executor::pack_param`]); attention's products follow `precision` from now on.
    pub fn begin_packing(&mut self, precision: CpuPrecision) {
        self.packs = vec![None; self.program.kernels.len()];
        self.attention = AttentionProducts::for_precision(precision);
    }

    /// Packs, for the best GEMM backend of this CPU and in `precision`, every B operand view of parameter
    /// `param` the plan's tables name (`packed_b`) from `source`, reusing what `cache` already holds (a view the
    /// other plan packed). Every later call must pass this parameter's weight as it is now, or an empty tensor
    /// once [`Executor::reads_only_packed`] (in every plan) let the model release it: a model packs when its
    /// weights are put in place, and they never change after. In int8, a B that cannot be quantised (deeper
    /// than `int8::MAX_DEPTH`) is packed in f32.
    pub fn pack_param(
        &mut self,
        param: usize,
        source: &Tensor,
        cache: &mut PackCache,
        precision: CpuPrecision,
    ) -> Result<()> {
        let backend = crate::cpu::gemm::Backend::best();
        if self.packs.len() != self.program.kernels.len() {
            self.begin_packing(precision);
        }
        let Some(source) = source.as_f32() else {
            return Ok(());
        };
        let entries = self.program.packed_b.iter().filter(|e| {
            self.program.buffers.get(e.buffer).map(|b| b.kind) == Some(BufferKind::Param(param))
        });
        // Products first: a gather reads rows from the reduced pack of a product of the same view (a tied output
        // layer) when there is one.
        let (gathers, products): (Vec<_>, Vec<_>) = entries.partition(|e| e.gather);
        for entry in products.into_iter().chain(gathers) {
            let view = BView {
                offset: entry.offset,
                rs: entry.rs,
                cs: entry.cs,
                k: entry.k,
                n: entry.n,
            };
            let pack = match cache.packs.get(&(param, view)) {
                Some(pack) if entry.gather => Some(pack.clone()).filter(|p| p.is_reduced()),
                Some(pack) => Some(pack.clone()),
                // A table only gathered gets a pack of its own in bf16 and f16, where a model's weights are in
                // that precision (as in a half-precision PyTorch model); in int8 it stays f32, as ONNX Runtime
                // keeps a Gather's table. A gather reads rows from a reduced pack only.
                None => {
                    let made = match (entry.gather, precision) {
                        (true, CpuPrecision::Int8 | CpuPrecision::F32) => None,
                        _ => pack_one(backend, precision, source, view)?,
                    };
                    made.filter(|p| !entry.gather || p.is_reduced())
                        .map(|pack| {
                            let pack = Arc::new(pack);
                            cache.packs.insert((param, view), pack.clone());
                            pack
                        })
                }
            };
            if let Some(slot) = self.packs.get_mut(entry.kernel) {
                *slot = pack;
            }
        }
        Ok(())
    }

    /// Whether every kernel that reads parameter `param` reads it through a pack (`PackedB::exclusive`): a GEMM
    /// reading it only as its B, or a gather reading rows from such a GEMM's reduced pack; and at least one
    /// kernel does. Then nothing reads its dense weight.
    pub fn reads_only_packed(&self, param: usize) -> bool {
        let p = self.program;
        let mut readers = 0;
        for (ki, call) in p.kernels.iter().enumerate() {
            for &b in call.buffers.iter().skip(1) {
                if p.buffers.get(b).map(|s| s.kind) != Some(BufferKind::Param(param)) {
                    continue;
                }
                let packed = self.packs.get(ki).is_some_and(Option::is_some)
                    && p.packed_b
                        .iter()
                        .any(|e| e.kernel == ki && e.buffer == b && e.exclusive);
                if !packed {
                    return false;
                }
                readers += 1;
            }
        }
        readers > 0
    }

    /// How many of the program's GEMMs read a weight packed in a reduced precision (int8, bf16 or f16), of how many
    /// read a packed weight.
    pub fn reduced_gemms(&self) -> (usize, usize) {
        let packed = self.packs_read_by(false);
        let reduced = packed.clone().filter(|p| p.is_reduced()).count();
        (reduced, packed.count())
    }

    /// How many of the program's gathers read their table's rows from a reduced pack (a tied output layer's, or in
    /// bf16 one of the table's own).
    pub fn packed_gathers(&self) -> usize {
        self.packs_read_by(true).count()
    }

    /// The packs the program's GEMMs (`gathers` false) or gathers read, one per kernel that has one.
    fn packs_read_by(&self, gathers: bool) -> impl Iterator<Item = &WeightPack> + Clone {
        self.program
            .packed_b
            .iter()
            .filter(move |e| e.gather == gathers)
            .filter_map(|e| self.packs.get(e.kernel)?.as_deref())
    }

    pub fn program(&self) -> &'static Program {
        self.program
    }

    /// Makes sure a call with `dims` finds an arena in the pool, allocating (and page-faulting) it now, and that
    /// every thread that may run it holds the scratch its int8 products quantise their rows into.
    pub fn reserve(&self, dims: &[usize]) -> Result<()> {
        let (_, bytes) = self.program.layout(dims)?;
        self.pool.reserve(bytes)?;
        self.reserve_int8_rows(dims);
        Ok(())
    }

    /// The scratch for the int8 products that, at `dims`, quantise A's rows once for all their column blocks
    /// ([`crate::cpu::par::int8_rows_len`]), on every worker of the pool and the calling thread: a call runs its
    /// kernels inside a rayon scope, on the calling thread where it is a worker and on any worker where it is
    /// not (a server's request thread), so each may be the one that takes it. A product's rows are its output's
    /// elements over its columns: the rows of every batch, as the GEMM folds them.
    fn reserve_int8_rows(&self, dims: &[usize]) {
        let longest = self
            .program
            .packed_b
            .iter()
            .filter(|e| !e.gather)
            .filter_map(|entry| {
                let Some(WeightPack::Int8(pack)) =
                    self.packs.get(entry.kernel).and_then(|p| p.as_deref())
                else {
                    return None;
                };
                let output = self.program.kernels.get(entry.kernel)?.buffers.first()?;
                let spec = self.program.buffers.get(*output)?;
                crate::cpu::par::int8_rows_len(pack, spec.numel.eval(dims) / entry.n.max(1))
            })
            .max();
        if let Some(len) = longest {
            crate::cpu::scratch::reserve(&[(&crate::cpu::scratch::INT8_ROWS, len)]);
        }
    }

    /// Releases the idle arenas; returns the bytes released.
    pub fn trim(&self) -> usize {
        self.pool.trim()
    }

    pub fn set_pool_limits(&self, limits: PoolLimits) {
        self.pool.set_limits(limits);
    }

    pub fn pool_limits(&self) -> PoolLimits {
        self.pool.limits()
    }

    pub fn pool_stats(&self) -> PoolStats {
        self.pool.stats()
    }

    /// Runs the program on validated inputs with dims already bound.
    /// `states` are the session's `#[state]` buffers (empty for a model without state), updated in place.
    pub fn run(
        &self,
        dims: &[usize],
        weights: &[Tensor],
        inputs: &[&Tensor],
        states: &mut [Tensor],
    ) -> Result<Vec<Tensor>> {
        let mut outputs = self.program.fresh_outputs(dims)?;
        self.execute(dims, weights, inputs, states, &mut outputs, None, None)?;
        Ok(outputs)
    }

    /// As [`Executor::run`], handing `observe` each kernel's index (in plan order) and its output, as the kernel
    /// leaves it, before the next kernel runs: what a drift check compares between plans.
    pub fn run_observed(
        &self,
        dims: &[usize],
        weights: &[Tensor],
        inputs: &[&Tensor],
        states: &mut [Tensor],
        observe: KernelObserver<'_>,
    ) -> Result<Vec<Tensor>> {
        let mut outputs = self.program.fresh_outputs(dims)?;
        self.execute(
            dims,
            weights,
            inputs,
            states,
            &mut outputs,
            None,
            Some(observe),
        )?;
        Ok(outputs)
    }

    /// As [`Executor::run`], writing into `outputs` when they already have the right shapes (a serving loop then
    /// allocates nothing per call); otherwise `outputs` is replaced by fresh tensors.
    /// When `times` is given, each kernel's wall time (seconds) is added to it.
    pub fn run_into(
        &self,
        dims: &[usize],
        weights: &[Tensor],
        inputs: &[&Tensor],
        states: &mut [Tensor],
        outputs: &mut Vec<Tensor>,
        times: Option<&mut [f64]>,
    ) -> Result<()> {
        self.program.fit_outputs(dims, outputs)?;
        self.execute(dims, weights, inputs, states, outputs, times, None)
    }

    /// Runs every kernel; `outputs` are f32 tensors of the program's output shapes at `dims`, `states` the
    /// session's buffers (checked against the program's state shapes by the caller).
    #[allow(clippy::too_many_arguments)]
    fn execute(
        &self,
        dims: &[usize],
        weights: &[Tensor],
        inputs: &[&Tensor],
        states: &mut [Tensor],
        outputs: &mut [Tensor],
        times: Option<&mut [f64]>,
        observe: Option<KernelObserver<'_>>,
    ) -> Result<()> {
        let p = self.program;
        if states.len() != p.states.len() {
            return Err(Error::NeedsSession {
                model: p.model.into(),
            });
        }
        let state_ptrs: Vec<*mut u8> = states
            .iter_mut()
            .map(|t| {
                t.as_f32_mut()
                    .map_or(std::ptr::null_mut(), |v| v.as_mut_ptr() as *mut u8)
            })
            .collect();
        let (offsets, arena_bytes) = p.layout(dims)?;
        let mut arena = self.pool.take(arena_bytes)?;
        if cfg!(debug_assertions) {
            // Debug builds (the test suite) prove that no kernel reads arena memory it did not write: such a read
            // would see NaN.
            arena.poison();
        }
        let base = arena.as_mut_ptr();
        let out_ptrs: Vec<*mut u8> = outputs
            .iter_mut()
            .map(|t| {
                t.as_f32_mut()
                    .map_or(std::ptr::null_mut(), |v| v.as_mut_ptr() as *mut u8)
            })
            .collect();
        let arange_end = p.buffers.iter().try_fold(0, |end, spec| match spec.kind {
            BufferKind::Arange(i) => Ok(end.max(p.arange(i, spec.numel.eval(dims), dims)?.end)),
            _ => Ok(end),
        })?;
        let iota = self.iota.at_least(arange_end)?;
        let mut ptrs = Vec::with_capacity(p.buffers.len());
        for spec in &p.buffers {
            let numel = spec.numel.eval(dims);
            let mut bytes = numel.saturating_mul(spec.dtype.size());
            if let BufferKind::Param(i) = spec.kind {
                // A weight released after packing (see `Executor::reads_only_packed`) is an empty tensor: only its
                // pack is read, and a slice of it must not claim memory it no longer has.
                bytes = bytes.min(weights[i].numel().saturating_mul(spec.dtype.size()));
            }
            let ptr = match spec.kind {
                BufferKind::Input(i) => inputs[i].data_ptr() as *mut u8,
                // A window of the shared table, which is at least `arange_end` long; kernels only read it.
                BufferKind::Arange(i) => {
                    iota.get(p.arange(i, numel, dims)?)
                        .map_or(std::ptr::null(), <[i64]>::as_ptr) as *mut u8
                }
                BufferKind::Param(i) => weights[i].data_ptr() as *mut u8,
                // The session's buffer, borrowed mutably for the call: read as the state, written in place by its
                // write kernel, which the plan orders before every reader of the new value and after every reader
                // of the old one (the front end refuses the latter in a call that writes).
                BufferKind::State(i) => state_ptrs[i],
                // SAFETY: offsets + sizes lie within the arena by construction of `layout`.
                BufferKind::Arena(s) => unsafe { base.add(offsets[s]) },
                BufferKind::Output(i) => out_ptrs[i],
            };
            ptrs.push((ptr, bytes));
        }
        let run_kernels = |mut times: Option<&mut [f64]>,
                           mut observe: Option<KernelObserver<'_>>| {
            for (i, call) in p.kernels.iter().enumerate() {
                // A value sized by a dim bound to 0 is empty, and so is everything made of it (`Graph::
                // zero_rule`): its kernel has nothing to compute.
                let empty = call
                    .buffers
                    .first()
                    .is_some_and(|&out| ptrs.get(out).is_some_and(|&(_, bytes)| bytes == 0));
                let ctx = Ctx {
                    dims,
                    ptrs: &ptrs,
                    packed_b: self.packs.get(i).and_then(|p| p.as_deref()),
                    attention: self.attention,
                };
                match times.as_deref_mut() {
                    _ if empty => {}
                    Some(times) => {
                        let start = std::time::Instant::now();
                        (p.functions[call.function])(&ctx, &call.buffers);
                        times[i] += start.elapsed().as_secs_f64();
                    }
                    None => (p.functions[call.function])(&ctx, &call.buffers),
                }
                if let (Some(observe), Some(&out)) = (observe.as_deref_mut(), call.buffers.first())
                {
                    observe(i, ctx.f32(out));
                }
            }
        };
        match observe {
            // The observer is the caller's closure, called on the caller's thread.
            Some(observe) => run_kernels(times, Some(observe)),
            None => crate::cpu::par::on_pool(|| run_kernels(times, None)),
        }
        self.pool.give_back(arena);
        // A value returned twice (`(y, y)`) is computed into its first output slot only; copy it to the others.
        for (i, o) in p.outputs.iter().enumerate() {
            if let Some(first) = p.outputs[..i].iter().position(|e| e.buffer == o.buffer) {
                let (head, tail) = outputs.split_at_mut(i);
                if let (Some(src), Some(dst)) = (head[first].as_f32(), tail[0].as_f32_mut()) {
                    dst.copy_from_slice(src);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nothing(_: &Ctx<'_>, _: &[usize]) {}

    static FOREIGN: EmbeddedProgram =
        EmbeddedProgram::new("M", "fused", 1, &[nothing], "{\"buffers\": 3}", "", "");
    static BAD_CALL: EmbeddedProgram = EmbeddedProgram::new(
        "M",
        "fused",
        1,
        &[nothing],
        r#"{"buffers":[],"slots":[],"kernels":[{"function":1,"buffers":[]}],"kernel_info":[],"outputs":[],"refusals":[]}"#,
        "",
        "",
    );

    #[test]
    fn tables_that_do_not_decode_are_a_typed_error() {
        for (program, what) in [(&FOREIGN, "invalid type"), (&BAD_CALL, "function 1 of 1")] {
            match program.decode() {
                Err(Error::PlanTables { model, plan, why }) => {
                    assert_eq!((model.as_str(), plan), ("M", "fused"));
                    assert!(why.contains(what), "{why}");
                }
                other => panic!("expected PlanTables, got {other:?}"),
            }
        }
    }
}
