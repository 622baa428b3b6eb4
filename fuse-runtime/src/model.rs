//! What every `#[fused_model]` struct wraps: its weights and the two compiled plans (fused and eager), with
//! loading, input validation and the plan report.

use std::path::Path;

use crate::cpu::CpuPrecision;
use crate::device::Placement;
use crate::error::{Error, Result};
use crate::exec::{bind_inputs_with, EmbeddedProgram, Executor, InputSpec, PackCache};
use crate::pool::{PoolLimits, PoolStats};
use crate::report::PlanReport;
use crate::session::Session;
use crate::tensor::Tensor;
use crate::weights::{Checkpoint, ParamSpec};

/// Which compiled plan to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PlanMode {
    /// The fused plan: what `forward` runs.
    Fused,
    /// One kernel per op: the reference and benchmark baseline.
    Eager,
}

/// Everything the macro knows about a model at build time.
#[derive(Debug)]
pub struct ModelSpec {
    pub name: &'static str,
    pub dyn_dims: &'static [&'static str],
    pub inputs: &'static [InputSpec],
    pub params: &'static [ParamSpec],
    pub fused: &'static EmbeddedProgram,
    pub eager: &'static EmbeddedProgram,
    /// The `#[fused_model]` module's source, for tools that re-run the front end (tests, the reference).
    pub source: &'static str,
    /// The GPU code of both plans (see [`crate::cuda`]); `None` for a model with no GPU side.
    pub cuda: Option<&'static crate::cuda::CudaSpec>,
}

impl ModelSpec {
    /// Checks `inputs` against their declarations, binds the dynamic dims (from shapes and `#[dim]` arguments)
    /// and checks the slice bounds that depend on them: what every call does before it runs a kernel.
    pub fn bind(&'static self, inputs: &[&Tensor]) -> Result<Vec<usize>> {
        // Both plans come from one graph, so they carry the same sum dims and bounds.
        let program = self.fused.decode()?;
        let dims = bind_inputs_with(program, self.inputs, self.dyn_dims, inputs)?;
        program.check_slice_bounds(&dims)?;
        Ok(dims)
    }
}

/// What [`CompiledModel::profile_session`] measured: each kernel's mean wall time (ms, plan order, with its name)
/// and the mean time of the executor's whole call (ms). The call's time less the kernels' sum is what runs outside
/// kernels: the arena, the pointer table, the timer itself.
#[derive(Clone, Debug)]
pub struct Profile {
    pub kernels: Vec<KernelTime>,
    pub call_ms: f64,
}

/// One kernel's line of a [`Profile`]: its name, the ops fused into it (as the plan report lists them) and its
/// mean wall time in ms.
#[derive(Clone, Debug)]
pub struct KernelTime {
    pub name: &'static str,
    pub ops: &'static [String],
    pub ms: f64,
}

/// What a model keeps of a weight that only packs read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Holding {
    /// The f32 weight beside its f32 pack, for [`CompiledModel::weights`], a GPU copy and another precision: the
    /// default constructors (`from_weights`, `load`, `random`).
    F32Beside,
    /// The pack alone: a model made in a precision (`from_weights_in`, `load_in`, `try_random_in`) or given int8
    /// or bf16.
    PacksOnly,
}

/// A model with its weights, ready to run. `Send + Sync`: `forward` may be called from many threads at once.
pub struct CompiledModel {
    spec: &'static ModelSpec,
    weights: Vec<Tensor>,
    fused: Executor,
    eager: Executor,
    /// See [`CompiledModel::packed_weight_bytes`].
    packed_bytes: usize,
    /// Parameters whose f32 weight was dropped after packing: only their packs are read (see
    /// [`CompiledModel::with_cpu_precision`]). Each is an empty tensor in `weights`.
    released: Vec<usize>,
    /// Whether a weight that only packs read is released.
    holding: Holding,
    /// See [`CompiledModel::with_cpu_precision`].
    cpu_precision: CpuPrecision,
    /// Where `run` executes: the CPU executors above, or a GPU copy (see [`crate::device`]).
    pub(crate) placement: Placement,
}

impl CompiledModel {
    /// Wraps weights in declaration order after checking each against its declared shape.
    pub fn from_weights(spec: &'static ModelSpec, weights: Vec<Tensor>) -> Result<Self> {
        Self::from_checked(spec, weights, CpuPrecision::F32, Holding::F32Beside)
    }

    /// A CPU model over `weights` (checked as by [`CompiledModel::from_weights`]) with its GEMMs whose B is a
    /// weight in `precision` (f32 too) from the start: each weight is packed in that precision, and its f32 copy
    /// dropped where only packs read it, before the next is packed. It holds those matrices only packed, so
    /// [`CompiledModel::weights`], a GPU copy and another precision are [`Error::WeightsReleased`].
    pub fn from_weights_in(
        spec: &'static ModelSpec,
        weights: Vec<Tensor>,
        precision: CpuPrecision,
    ) -> Result<Self> {
        Self::from_checked(spec, weights, precision, Holding::PacksOnly)
    }

    fn from_checked(
        spec: &'static ModelSpec,
        weights: Vec<Tensor>,
        precision: CpuPrecision,
        holding: Holding,
    ) -> Result<Self> {
        if weights.len() != spec.params.len() {
            return Err(Error::WeightCount {
                expected: spec.params.len(),
                found: weights.len(),
            });
        }
        for (p, w) in spec.params.iter().zip(&weights) {
            if w.dtype() != crate::DType::F32 {
                return Err(Error::WeightTensorDType {
                    name: p.name.into(),
                    expected: crate::DType::F32,
                    found: w.dtype(),
                });
            }
            if w.shape() != p.shape {
                return Err(Error::WeightTensorShape {
                    name: p.name.into(),
                    expected: p.shape.to_vec(),
                    found: w.shape().to_vec(),
                });
            }
        }
        let mut weights = weights.into_iter();
        Self::assemble(spec, precision, holding, |_| {
            weights.next().ok_or(Error::WeightCount {
                expected: spec.params.len(),
                found: 0,
            })
        })
    }

    /// The model over weights checked (or generated) against `spec`, parameter `i` made by `weight(i)`, in
    /// order. Each is packed in `precision` as it comes, and (`PacksOnly`) released when only packs read it, so
    /// a checkpoint read through this never has all its f32 weights in memory at once. Reserves the kernels'
    /// per-thread scratch and starts the worker pool here, so the first `forward` costs what every later one
    /// does.
    fn assemble(
        spec: &'static ModelSpec,
        precision: CpuPrecision,
        holding: Holding,
        mut weight: impl FnMut(usize) -> Result<Tensor>,
    ) -> Result<Self> {
        let (fused, eager) = (spec.fused.decode()?, spec.eager.decode()?);
        crate::cpu::reserve_scratch();
        let mut model = CompiledModel {
            spec,
            weights: Vec::with_capacity(spec.params.len()),
            fused: Executor::new(fused),
            eager: Executor::new(eager),
            packed_bytes: 0,
            released: Vec::new(),
            holding,
            cpu_precision: precision,
            placement: Placement::default(),
        };
        let mut packs = model.begin_packing();
        for i in 0..spec.params.len() {
            let w = weight(i)?;
            model.weights.push(w);
            model.pack_param(i, &mut packs)?;
        }
        model.packed_bytes = packs.bytes();
        Ok(model)
    }

    /// Drops every pack, before [`CompiledModel::pack_param`] packs each parameter again in `cpu_precision`.
    fn begin_packing(&mut self) -> PackCache {
        self.fused.begin_packing(self.cpu_precision);
        self.eager.begin_packing(self.cpu_precision);
        self.released.clear();
        PackCache::default()
    }

    /// The weights are in place and never change after: packs the GEMMs' B operands that read parameter `i`
    /// now, once, instead of on every call (both plans share the pack of one view), and (`PacksOnly`) drops its
    /// f32 weight when nothing else reads it.
    fn pack_param(&mut self, i: usize, packs: &mut PackCache) -> Result<()> {
        let precision = self.cpu_precision;
        let w = self.weights.get(i).ok_or(Error::WeightCount {
            expected: self.spec.params.len(),
            found: self.weights.len(),
        })?;
        self.fused.pack_param(i, w, packs, precision)?;
        self.eager.pack_param(i, w, packs, precision)?;
        let only_packed = self.fused.reads_only_packed(i) && self.eager.reads_only_packed(i);
        if self.holding == Holding::PacksOnly && only_packed {
            self.weights[i] = Tensor::from_f32(&[0], Vec::new())?;
            self.released.push(i);
        }
        Ok(())
    }

    /// The model computing its CPU GEMMs whose B is a weight in `precision` (see [`CpuPrecision`]): the weights
    /// are packed again, once, for it (in int8: quantised per output channel). f32 is what every model starts
    /// with unless it was made in another (`from_weights_in`, `load_in`, `try_random_in`). Only the CPU
    /// executors change; a GPU placement keeps its own precision.
    ///
    /// In int8, bf16 and f16 the model then holds each matrix that only GEMMs read once, in that precision: the f32
    /// weight of a parameter that no kernel of either plan reads other than through its pack is released (a tied
    /// embedding table too, its rows gathered from the output layer's pack, and in bf16 and f16 any embedding
    /// table; norm weights, biases, an int8 model's untied tables and a matrix read otherwise stay in f32). A
    /// quarter (int8) or half (bf16, f16) of those bytes stays resident;
    /// see [`CompiledModel::weight_bytes`]. Afterwards the f32 weights are
    /// gone: [`CompiledModel::weights`], moving the model to a GPU and another `with_cpu_precision` are
    /// [`Error::WeightsReleased`] (load the model again for those).
    pub fn with_cpu_precision(mut self, precision: CpuPrecision) -> Result<Self> {
        if precision == self.cpu_precision {
            return Ok(self);
        }
        self.dense_weights("packing them in another precision")?;
        self.cpu_precision = precision;
        if precision != CpuPrecision::F32 {
            self.holding = Holding::PacksOnly;
        }
        let mut packs = self.begin_packing();
        for i in 0..self.weights.len() {
            self.pack_param(i, &mut packs)?;
        }
        self.packed_bytes = packs.bytes();
        Ok(self)
    }

    /// The f32 weights, or [`Error::WeightsReleased`] naming what needed them.
    fn dense_weights(&self, needed_for: &'static str) -> Result<&[Tensor]> {
        match self.released.first() {
            None => Ok(&self.weights),
            Some(&i) => Err(Error::WeightsReleased {
                model: self.spec.name.into(),
                precision: self.cpu_precision.to_string(),
                count: self.released.len(),
                first: self.spec.params.get(i).map_or("?", |p| p.name).into(),
                needed_for,
            }),
        }
    }

    /// The f32 weights a GPU copy uploads.
    #[cfg(feature = "cuda")]
    pub(crate) fn gpu_weights(&self) -> Result<&[Tensor]> {
        self.dense_weights("moving the model to a GPU")
    }

    /// How many parameters are held only packed (see [`CompiledModel::with_cpu_precision`]).
    pub fn released_weights(&self) -> usize {
        self.released.len()
    }

    /// Bytes of weights this model holds for its CPU executors: the f32 weights it keeps plus the packs
    /// ([`CompiledModel::packed_weight_bytes`]).
    pub fn weight_bytes(&self) -> usize {
        let dense: usize = self.weights.iter().map(|w| 4 * w.numel()).sum();
        dense + self.packed_bytes
    }

    /// What [`CompiledModel::with_cpu_precision`] chose.
    pub fn cpu_precision(&self) -> CpuPrecision {
        self.cpu_precision
    }

    /// Bytes of the weight copies packed at load for the CPU GEMMs (each distinct weight view once, shared by
    /// both plans). In a model made by `from_weights`, `load` or `random` they sit beside
    /// [`CompiledModel::weights`]: about one more copy of every matrix a GEMM reads as B. In a model made in a
    /// precision (`*_in`) or given int8, bf16 or f16 they replace the f32 copies they stand for.
    pub fn packed_weight_bytes(&self) -> usize {
        self.packed_bytes
    }

    /// Loads every parameter from a safetensors file by its checkpoint name.
    pub fn load(spec: &'static ModelSpec, path: &Path) -> Result<Self> {
        Self::load_holding(spec, path, CpuPrecision::F32, Holding::F32Beside)
    }

    /// A CPU model loaded as by [`CompiledModel::load`], with its GEMMs whose B is a weight in `precision` (f32
    /// too) from the start: each parameter is read from the file, widened to f32, packed and dropped where only
    /// packs read it, before the next is read, so neither the file's bytes nor all the f32 weights are ever held.
    /// As for [`CompiledModel::from_weights_in`], the matrices are then held only packed.
    pub fn load_in(spec: &'static ModelSpec, path: &Path, precision: CpuPrecision) -> Result<Self> {
        Self::load_holding(spec, path, precision, Holding::PacksOnly)
    }

    fn load_holding(
        spec: &'static ModelSpec,
        path: &Path,
        precision: CpuPrecision,
        holding: Holding,
    ) -> Result<Self> {
        let checkpoint = Checkpoint::open(path, spec.params)?;
        Self::assemble(spec, precision, holding, |i| {
            checkpoint.read(&spec.params[i])
        })
    }

    /// Seeded random weights (per-parameter scale chosen by the compiler), for examples and tests.
    ///
    /// # Panics
    /// When the weights do not fit in memory, with [`CompiledModel::try_random`]'s error: a panic a test or an
    /// example can show, never an abort. Use `try_random` where that is possible.
    pub fn random(spec: &'static ModelSpec, seed: u64) -> Self {
        Self::try_random(spec, seed).unwrap_or_else(|e| {
            panic!(
                "{}::random: {e} (try_random returns this as an error)",
                spec.name
            )
        })
    }

    /// [`CompiledModel::random`], or [`Error::OutOfMemory`] when the weights do not fit in what the process may
    /// still use (checked for all of them before any is allocated) or the allocator refuses them.
    pub fn try_random(spec: &'static ModelSpec, seed: u64) -> Result<Self> {
        Self::random_holding(spec, seed, CpuPrecision::F32, Holding::F32Beside)
    }

    /// A CPU model with [`CompiledModel::try_random`]'s values and its GEMMs whose B is a weight in `precision`
    /// (f32 too) from the start, each weight packed (and dropped where only packs read it) as it is made; as for
    /// [`CompiledModel::from_weights_in`], the matrices are then held only packed. In f32 all the weights are
    /// checked against the memory left before any is made (their packs are as large); in int8, bf16 and f16 each
    /// weight and pack is checked as it is allocated.
    pub fn try_random_in(
        spec: &'static ModelSpec,
        seed: u64,
        precision: CpuPrecision,
    ) -> Result<Self> {
        Self::random_holding(spec, seed, precision, Holding::PacksOnly)
    }

    fn random_holding(
        spec: &'static ModelSpec,
        seed: u64,
        precision: CpuPrecision,
        holding: Holding,
    ) -> Result<Self> {
        if precision == CpuPrecision::F32 {
            crate::weights::check_random_weights_fit(spec.params)?;
        }
        Self::assemble(spec, precision, holding, |i| {
            crate::weights::random_weight(spec.params, i, seed)
        })
    }

    pub fn spec(&self) -> &'static ModelSpec {
        self.spec
    }

    /// The f32 weights in declaration order, or [`Error::WeightsReleased`] when the model holds some only packed
    /// (made with `*_in`, or given int8, bf16 or f16: see [`CompiledModel::with_cpu_precision`]).
    pub fn weights(&self) -> Result<&[Tensor]> {
        self.dense_weights("reading the weights")
    }

    /// Every dim of the model from `sizes` given by name (`[("batch", 8)]`), sums of dims derived from their terms.
    /// A name the model does not have, a name given twice with two sizes, a sum of dims given a size its terms do
    /// not add up to, or a size of 0 where the rule of empty values refuses it, is an error; a dim left out is an
    /// error where `required` says so (by symbol), else a size that keeps every difference of dims (`seq - 2`)
    /// at least 1, so that a dim nothing asked for cannot refuse the call.
    fn dims_by_name(
        &self,
        sizes: &[(&str, usize)],
        required: impl Fn(usize) -> bool,
    ) -> Result<Vec<usize>> {
        let known = self.spec.dyn_dims;
        if let Some((dim, _)) = sizes.iter().find(|(d, _)| !known.contains(d)) {
            return Err(Error::UnknownDim {
                dim: (*dim).into(),
                known: known.iter().map(|d| (*d).into()).collect(),
            });
        }
        let program = self.spec.fused.decode()?;
        // A dim whose empty values make only empty values (an empty batch) or that a concat extends (a cache
        // passed in), or that sizes no value (a `#[dim]` that only offsets views), may be 0, as in a call: the
        // plan lists them. One that may be 0 only where other dims are is checked with the sums, as a call is.
        let may_be_zero = |s: usize| program.may_be_zero(s);
        let unasked = 1 + program.sum_dims.iter().map(|d| d.less).max().unwrap_or(0);
        let given = |name: &str| -> Result<Option<usize>> {
            let mut found = sizes.iter().filter(|(d, _)| *d == name).map(|&(_, n)| n);
            let first = found.next();
            match (first, found.find(|&n| Some(n) != first)) {
                (Some(first), Some(second)) => Err(Error::DimSizeConflict {
                    dim: name.into(),
                    first,
                    second,
                }),
                _ => Ok(first),
            }
        };
        let mut dims = known
            .iter()
            .enumerate()
            .map(|(s, &name)| match given(name)? {
                // A sum of dims (`past + seq`) is computed from its terms below.
                _ if program.is_sum_dim(s) => Ok(1),
                Some(0) if may_be_zero(s) => Ok(0),
                Some(0) => Err(Error::ZeroDim {
                    dim: name.into(),
                    unless: Vec::new(),
                }),
                Some(n) => Ok(n),
                None if required(s) => Err(Error::MissingDim { dim: name.into() }),
                None => Ok(unasked),
            })
            .collect::<Result<Vec<usize>>>()?;
        crate::exec::derive_dims(program, known, &mut dims)?;
        // A sum given by name must be what its terms add up to.
        for (s, &name) in known
            .iter()
            .enumerate()
            .filter(|&(s, _)| program.is_sum_dim(s))
        {
            match given(name)? {
                Some(n) if n != dims[s] => {
                    return Err(Error::DimSizeConflict {
                        dim: name.into(),
                        first: n,
                        second: dims[s],
                    })
                }
                _ => {}
            }
        }
        Ok(dims)
    }

    /// Allocates, now, the memory a CPU `forward` with these dynamic dimension sizes needs (its arena, and on every
    /// thread of the pool and the calling one the scratch into which an int8 model's products quantise their rows),
    /// so that the first such call — or a first call at a larger size — costs what later ones do. Sizes are by
    /// name, e.g. `[("batch", 8), ("seq", 128)]`; a call with smaller sizes uses the same memory. Optional:
    /// without it the first call allocates. The sizes are checked wherever the model runs; on a GPU nothing is
    /// allocated here (each shape gets its device arena and CUDA graph on its first call).
    pub fn reserve(&self, sizes: &[(&str, usize)]) -> Result<()> {
        let dims = self.dims_by_name(sizes, |_| true)?;
        if self.placement.gpu().is_some() {
            return Ok(());
        }
        self.fused.reserve(&dims)
    }

    /// Releases the arenas the CPU plans keep idle between calls (see [`PoolLimits`]); returns the bytes released.
    /// Later calls allocate again.
    pub fn trim(&self) -> usize {
        self.fused.trim() + self.eager.trim()
    }

    /// Bounds what each CPU plan (fused and eager) keeps idle between calls; applies at once.
    /// [`PoolLimits::default`] keeps at most 4 arenas and 1 GiB beyond the one that fits recent calls, and
    /// releases arenas more than 4× larger than recent calls needed.
    pub fn set_pool_limits(&self, limits: PoolLimits) {
        self.fused.set_pool_limits(limits);
        self.eager.set_pool_limits(limits);
    }

    pub fn pool_limits(&self) -> PoolLimits {
        self.fused.pool_limits()
    }

    /// What the CPU plans keep idle now (fused and eager together).
    pub fn pool_stats(&self) -> PoolStats {
        let (f, e) = (self.fused.pool_stats(), self.eager.pool_stats());
        PoolStats {
            idle_arenas: f.idle_arenas + e.idle_arenas,
            idle_bytes: f.idle_bytes + e.idle_bytes,
        }
    }

    /// Validates `inputs` and runs the chosen plan. A model with `#[state]` fields runs with a session instead
    /// ([`CompiledModel::run_session`]).
    pub fn run(&self, mode: PlanMode, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let dims = self.spec.bind(inputs)?;
        if let Some(gpu) = self.placement.gpu() {
            let mut outputs = Vec::new();
            gpu.run(mode, &dims, inputs, &mut outputs)?;
            return Ok(outputs);
        }
        self.executor(mode)
            .run(&dims, &self.weights, inputs, &mut [])
    }

    /// Zeroed state buffers for a stream of calls of this model (a decoder's KV cache), at the dims its state
    /// shapes name, by name: `[("batch", 2)]`. Allocated once here; every call with the session updates them in
    /// place. A model serves any number of sessions at once.
    pub fn session(&self, sizes: &[(&str, usize)]) -> Result<Session> {
        let program = self.spec.fused.decode()?;
        // Only the dims the state shapes name must be given; the others do not size anything here.
        let used = |s: usize| {
            program
                .states
                .iter()
                .any(|st| st.dims.iter().any(|m| m.syms.contains(&s)))
        };
        let dims = self.dims_by_name(sizes, used)?;
        Session::new(program.model, program, &dims)
    }

    /// [`CompiledModel::run`] for a model with state: the session's buffers are read and updated in place.
    pub fn run_session(
        &self,
        mode: PlanMode,
        session: &mut Session,
        inputs: &[&Tensor],
    ) -> Result<Vec<Tensor>> {
        let dims = self.bind_session(mode, session, inputs)?;
        if let Some(gpu) = self.placement.gpu() {
            let mut outputs = Vec::new();
            gpu.run_session(mode, &dims, inputs, &mut outputs, session)?;
            return Ok(outputs);
        }
        self.executor(mode)
            .run(&dims, &self.weights, inputs, session.host_states_mut()?)
    }

    /// [`CompiledModel::run_session`] returning the single output.
    pub fn run_one_session(
        &self,
        mode: PlanMode,
        session: &mut Session,
        inputs: &[&Tensor],
    ) -> Result<Tensor> {
        self.run_session(mode, session, inputs)?
            .into_iter()
            .next()
            .ok_or(Error::InputCount {
                expected: 1,
                found: 0,
            })
    }

    /// [`CompiledModel::run_observed`] for a model with state.
    pub fn run_observed_session(
        &self,
        mode: PlanMode,
        session: &mut Session,
        inputs: &[&Tensor],
        observe: &mut dyn FnMut(usize, &[f32]),
    ) -> Result<Vec<Tensor>> {
        let dims = self.bind_session(mode, session, inputs)?;
        self.executor(mode).run_observed(
            &dims,
            &self.weights,
            inputs,
            session.host_states_mut()?,
            observe,
        )
    }

    /// Binds the dims and checks the session against them.
    fn bind_session(
        &self,
        mode: PlanMode,
        session: &Session,
        inputs: &[&Tensor],
    ) -> Result<Vec<usize>> {
        let dims = self.spec.bind(inputs)?;
        session.check(self.executor(mode).program(), &dims)?;
        Ok(dims)
    }

    /// Runs the chosen plan on the CPU (wherever the model is placed), handing `observe` each kernel's index in
    /// plan order and its output buffer right after the kernel ran (kernel outputs are f32: masks are 0/1). The
    /// drift check (`fuse_tests::drift`) compares the fused and eager plans kernel by kernel with it.
    pub fn run_observed(
        &self,
        mode: PlanMode,
        inputs: &[&Tensor],
        observe: &mut dyn FnMut(usize, &[f32]),
    ) -> Result<Vec<Tensor>> {
        let dims = self.spec.bind(inputs)?;
        self.executor(mode)
            .run_observed(&dims, &self.weights, inputs, &mut [], observe)
    }

    /// As [`CompiledModel::run`], reusing `outputs` when their shapes fit: no allocation per call.
    pub fn run_into(
        &self,
        mode: PlanMode,
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
    ) -> Result<()> {
        let dims = self.spec.bind(inputs)?;
        if let Some(gpu) = self.placement.gpu() {
            return gpu.run(mode, &dims, inputs, outputs);
        }
        self.executor(mode)
            .run_into(&dims, &self.weights, inputs, &mut [], outputs, None)
    }

    pub(crate) fn executor(&self, mode: PlanMode) -> &Executor {
        match mode {
            PlanMode::Fused => &self.fused,
            PlanMode::Eager => &self.eager,
        }
    }

    /// Mean wall time of each kernel over `runs` calls, in milliseconds, with the kernel names.
    pub fn profile(
        &self,
        mode: PlanMode,
        inputs: &[&Tensor],
        runs: usize,
    ) -> Result<Vec<(&'static str, f64)>> {
        let dims = self.spec.bind(inputs)?;
        let profile = self.profile_bound(mode, &dims, inputs, &mut [], runs)?;
        Ok(profile.kernels.iter().map(|k| (k.name, k.ms)).collect())
    }

    /// [`CompiledModel::profile`] for a model with state, with the call's whole time beside the kernels'. Every
    /// run repeats the same call on `session`: its write kernels write the same values at the same place each
    /// time, so the state after the profile is the state after one call.
    pub fn profile_session(
        &self,
        mode: PlanMode,
        session: &mut Session,
        inputs: &[&Tensor],
        runs: usize,
    ) -> Result<Profile> {
        let dims = self.bind_session(mode, session, inputs)?;
        self.profile_bound(mode, &dims, inputs, session.host_states_mut()?, runs)
    }

    fn profile_bound(
        &self,
        mode: PlanMode,
        dims: &[usize],
        inputs: &[&Tensor],
        states: &mut [Tensor],
        runs: usize,
    ) -> Result<Profile> {
        let exec = self.executor(mode);
        let program = exec.program();
        let runs = runs.max(1);
        let mut times = vec![0.0; program.kernels.len()];
        // Outputs are reused across runs so page faults of fresh allocations do not land on the last kernel.
        let mut outputs = Vec::new();
        exec.run_into(dims, &self.weights, inputs, states, &mut outputs, None)?;
        let start = std::time::Instant::now();
        for _ in 0..runs {
            exec.run_into(
                dims,
                &self.weights,
                inputs,
                states,
                &mut outputs,
                Some(&mut times),
            )?;
        }
        let call_ms = start.elapsed().as_secs_f64() * 1e3 / runs as f64;
        Ok(Profile {
            kernels: program
                .kernel_info
                .iter()
                .zip(times)
                .map(|(k, t)| KernelTime {
                    name: k.name.as_str(),
                    ops: &k.ops,
                    ms: t * 1e3 / runs as f64,
                })
                .collect(),
            call_ms,
        })
    }

    /// Runs and returns the single output (models whose `forward` returns one tensor).
    pub fn run_one(&self, mode: PlanMode, inputs: &[&Tensor]) -> Result<Tensor> {
        self.run(mode, inputs)?
            .into_iter()
            .next()
            .ok_or(Error::InputCount {
                expected: 1,
                found: 0,
            })
    }

    pub fn report(&self, mode: PlanMode) -> PlanReport {
        PlanReport::new(self.spec, self.executor(mode).program())
    }
}

#[cfg(test)]
mod tests {
    use crate::weights::{try_random_weights, Init, ParamSpec};
    use crate::Error;

    const INIT: Init = Init {
        mean: 0.5,
        std: 0.1,
    };

    #[test]
    fn weights_past_memory_or_usize_are_errors() {
        // 4 TiB of f32.
        let huge = [ParamSpec {
            name: "w",
            shape: &[1 << 20, 1 << 20],
            init: INIT,
        }];
        match try_random_weights(&huge, 0) {
            Err(Error::OutOfMemory { bytes, .. }) => assert_eq!(bytes, Some(1 << 42)),
            other => panic!("expected OutOfMemory, got {other:?}"),
        }
        let overflowing = [ParamSpec {
            name: "w",
            shape: &[1 << 40, 1 << 40],
            init: INIT,
        }];
        assert!(matches!(
            try_random_weights(&overflowing, 0),
            Err(Error::OutOfMemory { bytes: None, .. })
        ));
    }
}
