//! Everything one shape (one binding of the dynamic dims, with one session's state buffers) needs on the GPU: the
//! arena with the CPU plan's slot layout, input and output buffers, the launch list built from the macro's tables,
//! and, from its second call, the CUDA graph replaying that list. Shapes whose launch lists differ only in their
//! arguments (a decode step's, one per `past`) share one graph of their [`Family`], updated to each.

use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaFunction, CudaStream};

use super::blas;
use super::buffers::DeviceBuffer;
use super::spec::{CudaProgram, LaunchRole};
use super::sys::{capture, enqueue, GemmStep, KernelStep, Replay, Step};
use crate::device::Precision;
use crate::error::{Error, Result};
use crate::exec::{BufferKind, Program};
use crate::tensor::Tensor;

/// One plan's loaded code: the function behind each entry of `code.launches`.
pub struct PlanCode {
    pub program: &'static Program,
    pub code: &'static CudaProgram,
    pub functions: Vec<CudaFunction>,
}

/// Fields drop in order: the graph before the buffers its launches point into.
pub struct ShapeState {
    replay: Option<Replay>,
    steps: Vec<Step>,
    /// Input and output buffers, by plan buffer.
    owned: Vec<Option<DeviceBuffer>>,
    /// Keeps the arena allocation alive: kernels reach it only through the pointers in `steps`.
    _arena: DeviceBuffer,
    /// Calls so far; the second captures the shape's own graph (tried once, whatever its outcome).
    calls: u32,
    /// What must be equal for another shape's graph to be updated to this one's launches: see [`structure`].
    pub structure: u64,
    /// The GPU model's call count at this shape's last call: the least recently used goes first when the cache is
    /// full.
    pub last_call: u64,
    /// Matmul kernels that run the generated GEMM although cuBLAS is loaded (a layout it cannot read).
    pub fallback_gemms: usize,
}

fn bad_table(what: String) -> Error {
    Error::Cuda {
        message: format!("inconsistent GPU launch table: {what}"),
    }
}

impl ShapeState {
    pub fn new(
        stream: &Arc<CudaStream>,
        plan: &PlanCode,
        weights: &[DeviceBuffer],
        states: &[u64],
        dims: &[usize],
        precision: Precision,
        use_blas: bool,
    ) -> Result<ShapeState> {
        let p = plan.program;
        let (offsets, arena_bytes) = p.layout(dims)?;
        let arena = DeviceBuffer::bytes(stream, arena_bytes)?;
        let arena_ptr = arena.ptr(stream);
        let mut owned = Vec::with_capacity(p.buffers.len());
        let mut ptrs = Vec::with_capacity(p.buffers.len());
        for (b, spec) in p.buffers.iter().enumerate() {
            let ptr = match spec.kind {
                BufferKind::Input(_) | BufferKind::Output(_) => {
                    let numel = spec.numel.eval(dims);
                    let buffer = match spec.kind {
                        // Whole numbers a half type could round are written as f32 in every storage, and come
                        // back as they are.
                        BufferKind::Output(_) if plan.code.f32_outputs.contains(&b) => {
                            DeviceBuffer::uninit(stream, spec.dtype, Precision::F32, numel)?
                        }
                        BufferKind::Output(_) => {
                            DeviceBuffer::uninit(stream, spec.dtype, precision, numel)?
                        }
                        _ => DeviceBuffer::zeros(stream, spec.dtype, precision, numel)?,
                    };
                    let ptr = buffer.ptr(stream);
                    owned.push(Some(buffer));
                    ptr
                }
                // Its values depend only on the dims, which this state is for: written once, here.
                BufferKind::Arange(i) => {
                    let numel = spec.numel.eval(dims);
                    let values = p.arange(i, numel, dims)?.map(|v| v as i64).collect();
                    let buffer = DeviceBuffer::from_tensor(
                        stream,
                        &Tensor::from_i64(&[numel], values)?,
                        precision,
                    )?;
                    let ptr = buffer.ptr(stream);
                    owned.push(Some(buffer));
                    ptr
                }
                BufferKind::Param(i) => {
                    owned.push(None);
                    let w = weights
                        .get(i)
                        .ok_or_else(|| bad_table(format!("weight {i} does not exist")))?;
                    w.ptr(stream)
                }
                // The session's buffer, updated in place by the write kernels.
                BufferKind::State(i) => {
                    owned.push(None);
                    *states
                        .get(i)
                        .ok_or_else(|| bad_table(format!("state {i} was not given")))?
                }
                BufferKind::Arena(s) => {
                    owned.push(None);
                    let offset = offsets
                        .get(s)
                        .ok_or_else(|| bad_table(format!("arena slot {s} does not exist")))?;
                    arena_ptr + *offset as u64
                }
            };
            ptrs.push(ptr);
        }
        let (steps, fallback_gemms) = steps(plan, &ptrs, dims, precision, use_blas)?;
        Ok(ShapeState {
            _arena: arena,
            owned,
            structure: structure(&steps),
            steps,
            replay: None,
            calls: 0,
            last_call: 0,
            fallback_gemms,
        })
    }

    pub fn upload(
        &mut self,
        stream: &Arc<CudaStream>,
        p: &Program,
        inputs: &[&Tensor],
    ) -> Result<()> {
        for (spec, buffer) in p.buffers.iter().zip(&mut self.owned) {
            if let (BufferKind::Input(i), Some(buffer)) = (spec.kind, buffer) {
                let t = inputs
                    .get(i)
                    .ok_or_else(|| bad_table(format!("input {i} was not given")))?;
                buffer.upload(stream, t)?;
            }
        }
        Ok(())
    }

    /// Replays the shape's graph; or, on its first call, its family's graph updated to its launches once the
    /// family has had a shape before (decode steps: each has a new `past`, so each is a new shape, called once);
    /// or runs the steps one by one and, on the shape's second call, captures them. Returns a note when capture
    /// failed.
    pub fn execute(
        &mut self,
        stream: &Arc<CudaStream>,
        blas: Option<&CudaBlas>,
        family: &mut Family,
    ) -> Result<Option<String>> {
        if let Some(replay) = &self.replay {
            replay.launch()?;
            return Ok(None);
        }
        self.calls = self.calls.saturating_add(1);
        if self.steps.is_empty() {
            // Every value empty (a dim bound to 0): nothing to launch, so no graph to capture.
            return Ok(None);
        }
        let mut note = None;
        if self.calls == 1 {
            family.shapes = family.shapes.saturating_add(1);
            if family.shapes > 1 && family.failed.is_none() {
                match family.update_to(stream, blas, &self.steps) {
                    Ok(replay) => return replay.launch().map(|()| None),
                    Err(e) => {
                        note = Some(format!(
                            "a CUDA graph shared by shapes could not be made ({e}); shapes launch their kernels one by one until their second call"
                        ));
                        family.failed = Some(e.to_string());
                    }
                }
            }
        }
        for step in &self.steps {
            enqueue(stream, blas, step)?;
        }
        if self.calls != 2 {
            return Ok(note);
        }
        // Captured after a direct run, so cuBLAS has made its workspace and picked its kernels outside capture.
        match capture(stream, blas, &self.steps).and_then(|g| Replay::instantiate(stream, &g)) {
            Ok(replay) => {
                self.replay = Some(replay);
                Ok(note)
            }
            Err(e) => Ok(Some(format!(
                "CUDA graph capture failed ({e}); this shape launches its kernels one by one"
            ))),
        }
    }

    pub fn has_replay(&self) -> bool {
        self.replay.is_some()
    }

    /// Which shape a full cache drops first: one called only once (a decode step, whose `past` will not come
    /// again) before one called again, and among those the least recently used.
    pub fn eviction_order(&self) -> (bool, u64) {
        (self.calls > 1, self.last_call)
    }

    /// Enqueues only the replay (benchmarks); `None` when there is no graph.
    pub fn replay(&self) -> Option<Result<()>> {
        self.replay.as_ref().map(Replay::launch)
    }

    /// Copies the outputs into `outputs`, which have the program's output shapes at these dims.
    pub fn download(
        &self,
        stream: &Arc<CudaStream>,
        p: &Program,
        outputs: &mut [Tensor],
    ) -> Result<()> {
        for (o, t) in p.outputs.iter().zip(outputs) {
            let buffer = self
                .owned
                .get(o.buffer)
                .and_then(Option::as_ref)
                .ok_or_else(|| bad_table(format!("output buffer {} is not an output", o.buffer)))?;
            let out = t
                .as_f32_mut()
                .ok_or_else(|| bad_table("an output is not f32".into()))?;
            buffer.download(stream, out)?;
        }
        // Copies into pageable memory already complete before returning; this makes "the call is over when
        // `run` returns" explicit, which the freeing of shape states relies on.
        stream.synchronize().map_err(|e| Error::Cuda {
            message: format!("synchronising after the download: {e}"),
        })
    }
}

/// The graph shared by the shapes of one launch structure. A new shape of the structure records its launches
/// (a capture runs nothing) and updates the family's instantiation to them, rather than launching its kernels one
/// by one or instantiating a graph of its own: a decode step costs one capture, one update and one launch.
#[derive(Default)]
pub struct Family {
    replay: Option<Replay>,
    /// Shapes of this structure run so far: the second makes the family's graph.
    shapes: u32,
    /// Calls that ran the family's graph, updated to their shape (the first, which made it, included).
    pub updated: u64,
    /// Updates the driver refused, each followed by a new instantiation.
    pub reinstantiated: u64,
    /// Why capture or instantiation failed: the family then stops trying.
    failed: Option<String>,
}

impl Family {
    /// The family's graph, updated to `steps` (or made from them).
    fn update_to(
        &mut self,
        stream: &Arc<CudaStream>,
        blas: Option<&CudaBlas>,
        steps: &[Step],
    ) -> Result<&Replay> {
        let graph = capture(stream, blas, steps)?;
        let refused = match &mut self.replay {
            Some(replay) => replay.update(&graph).err(),
            None => None,
        };
        if let Some(why) = &refused {
            // cuBLAS may pick other kernels for other strides; the structure cannot see that.
            tracing::info!(target: "fuse::device", "{why}; instantiating the graph again");
            self.reinstantiated += 1;
        }
        if self.replay.is_none() || refused.is_some() {
            self.replay = Some(Replay::instantiate(stream, &graph)?);
        }
        self.updated += 1;
        self.replay
            .as_ref()
            .ok_or_else(|| bad_table("a family graph vanished".into()))
    }
}

/// A digest of what a graph update cannot change: each step's kernel, grid and block, or its GEMM's problem
/// (cuBLAS chooses its kernels by the sizes). Pointers and dims are left out: they are what changes.
fn structure(steps: &[Step]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for step in steps {
        match step {
            Step::Kernel(k) => (k.symbol, k.grid, k.block).hash(&mut h),
            Step::Gemm(g) => {
                let c = &g.call;
                (
                    c.m,
                    c.n,
                    c.k,
                    c.batch,
                    c.trans_first,
                    c.trans_second,
                    g.precision,
                )
                    .hash(&mut h);
            }
        }
    }
    h.finish()
}

/// The launch list of a plan at `dims`, and how many matmuls need the generated GEMM although cuBLAS is there.
fn steps(
    plan: &PlanCode,
    ptrs: &[u64],
    dims: &[usize],
    precision: Precision,
    use_blas: bool,
) -> Result<(Vec<Step>, usize)> {
    let code = plan.code;
    let dims_i64: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    let launch = |kernel: usize, role: LaunchRole, params: &[u64]| -> Result<Step> {
        let i = code
            .launches
            .iter()
            .position(|l| l.kernel == kernel && l.role == role)
            .ok_or_else(|| bad_table(format!("kernel {kernel} has no {role:?} launch")))?;
        let (l, func) = (&code.launches[i], &plan.functions[i]);
        Ok(Step::Kernel(KernelStep {
            symbol: l.symbol.as_str(),
            func: func.clone(),
            grid: l.grid.dims(dims),
            block: l.block,
            dims: dims_i64.clone(),
            ptrs: params.to_vec(),
        }))
    };
    let mut out = Vec::new();
    let mut fallbacks = 0;
    for (ki, kernel) in code.kernels.iter().enumerate() {
        // A value sized by a dim bound to 0 is empty, and so is everything made of it: no launch (a grid of no
        // blocks is not one).
        let output = kernel
            .buffers
            .first()
            .and_then(|&b| plan.program.buffers.get(b));
        if output.is_some_and(|b| b.numel.eval(dims) == 0) {
            continue;
        }
        let params = kernel
            .buffers
            .iter()
            .map(|&b| ptrs.get(b).copied())
            .collect::<Option<Vec<u64>>>()
            .ok_or_else(|| bad_table(format!("kernel {ki} names a buffer the plan lacks")))?;
        let Some(g) = &kernel.gemm else {
            out.push(launch(ki, LaunchRole::Kernel, &params)?);
            continue;
        };
        let calls = if use_blas { blas::plan(g, dims) } else { None };
        let operands = (params.get(1 + g.b), params.get(1 + g.a), params.first());
        match (calls, operands) {
            (Some(calls), (Some(&first), Some(&second), Some(&result))) => {
                out.extend(calls.into_iter().map(|call| {
                    Step::Gemm(GemmStep {
                        call,
                        first,
                        second,
                        out: result,
                        precision,
                    })
                }));
                if g.epilogue {
                    out.push(launch(ki, LaunchRole::GemmEpilogue, &params)?);
                }
            }
            _ => {
                fallbacks += usize::from(use_blas);
                out.push(launch(ki, LaunchRole::GemmFallback, &params)?);
            }
        }
    }
    Ok((out, fallbacks))
}
