//! A model on one GPU: both plans' kernels, the weights uploaded once, and a state per shape (see `shape`).
//! One stream, one lock: calls from many threads are serialised on the device, which keeps the graph replay,
//! the arena reuse and cuBLAS's handle simple and correct.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaStream};

use super::buffers::DeviceBuffer;
use super::load::load;
use super::shape::{Family, PlanCode, ShapeState};
use super::spec::LaunchRole;
use super::states::DeviceStates;
use super::sys::{library_present, Library};
use crate::device::{CudaDevice, GpuOptions, GpuShapes, GpuTiming, Precision};
use crate::error::{Error, Result};
use crate::exec::Program;
use crate::model::{ModelSpec, PlanMode};
use crate::session::Session;
use crate::tensor::Tensor;

/// Shapes kept per plan (each holds an arena and perhaps a graph on the device); a new one past this drops the one
/// [`ShapeState::eviction_order`] puts first.
const MAX_SHAPES: usize = 16;

/// Fields drop in order: the shape states (graphs that launch the modules' kernels and cuBLAS's) go first.
pub(crate) struct GpuModel {
    state: Mutex<State>,
    blas: Option<CudaBlas>,
    fused: PlanCode,
    eager: PlanCode,
    weights: Vec<DeviceBuffer>,
    stream: Arc<CudaStream>,
    precision: Precision,
    device: CudaDevice,
}

/// A shape's key: the dims of the call, and the device addresses of the session states it reads and writes (none
/// for a model without state), which its launches and graph point into.
type ShapeKey = (Vec<usize>, Vec<u64>);

/// One plan's shapes, and the graphs shared by those of one launch structure.
#[derive(Default)]
struct ShapeCache {
    shapes: HashMap<ShapeKey, ShapeState>,
    families: HashMap<u64, Family>,
}

#[derive(Default)]
struct State {
    fused: ShapeCache,
    eager: ShapeCache,
    report: Vec<String>,
    /// Calls so far, the clock of [`ShapeState::last_call`].
    calls: u64,
    /// Shapes dropped to make room.
    evicted: usize,
}

fn failed(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Cuda {
        message: format!("{what}: {e}"),
    }
}

fn plan_code(
    ctx: &Arc<CudaContext>,
    program: &'static Program,
    code: &'static super::spec::CudaProgram,
    options: GpuOptions,
    arch: (u32, u32),
    report: &mut Vec<String>,
) -> Result<PlanCode> {
    // Every kernel must have what `shape` will launch for it; a gap is a writer bug, refused before any call.
    for (ki, k) in code.kernels.iter().enumerate() {
        let has = |role| {
            code.launches
                .iter()
                .any(|l| l.kernel == ki && l.role == role)
        };
        let complete = match &k.gemm {
            Some(g) => {
                has(LaunchRole::GemmFallback) && (!g.epilogue || has(LaunchRole::GemmEpilogue))
            }
            None => has(LaunchRole::Kernel),
        };
        if !complete {
            return Err(Error::Cuda {
                message: format!(
                    "the {} plan of `{}` has no GPU launch for kernel {ki}",
                    program.mode, program.model
                ),
            });
        }
    }
    let loaded = load(ctx, program, code, options, arch)?;
    tracing::info!(target: "fuse::device", model = program.model, plan = program.mode, "{}", loaded.how);
    report.push(format!("{} plan: {}", program.mode, loaded.how));
    let functions = code
        .launches
        .iter()
        .map(|l| {
            loaded
                .module
                .load_function(&l.symbol)
                .map_err(|e| failed(&format!("finding kernel `{}`", l.symbol), e))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(PlanCode {
        program,
        code,
        functions,
    })
}

impl GpuModel {
    pub(crate) fn new(
        spec: &'static ModelSpec,
        weights: &[Tensor],
        device: &CudaDevice,
        options: GpuOptions,
    ) -> Result<GpuModel> {
        let precision = options.precision;
        let cuda = spec.cuda.ok_or_else(|| Error::Cuda {
            message: format!("model `{}` was compiled without GPU code", spec.name),
        })?;
        let ctx = device.ctx.clone();
        ctx.bind_to_thread()
            .map_err(|e| failed("binding the CUDA context", e))?;
        let mut report = vec![format!("{device}")];
        let arch = device.arch();
        let (fused, fused_code) = (spec.fused.decode()?, cuda.fused.decode(spec.name, "fused")?);
        let (eager, eager_code) = (spec.eager.decode()?, cuda.eager.decode(spec.name, "eager")?);
        let fused = plan_code(&ctx, fused, fused_code, options, arch, &mut report)?;
        let eager = plan_code(&ctx, eager, eager_code, options, arch, &mut report)?;
        let stream = ctx
            .new_stream()
            .map_err(|e| failed("creating a CUDA stream", e))?;
        let blas = if options.generated_gemm {
            report.push("GEMM: generated kernel (requested)".into());
            None
        } else if library_present(Library::Cublas) {
            match CudaBlas::new(stream.clone()) {
                Ok(b) => {
                    report.push("GEMM: cuBLAS, then the generated epilogue kernel".into());
                    Some(b)
                }
                Err(e) => {
                    report.push(format!(
                        "GEMM: generated kernel (cuBLAS failed to start: {e})"
                    ));
                    None
                }
            }
        } else {
            report.push(format!(
                "GEMM: generated kernel ({} not found)",
                Library::Cublas.file()
            ));
            None
        };
        report.push(format!(
            "storage {precision:?}; a CUDA graph is captured per shape on its second call, and shapes that differ only in the dims' values (decode steps) share one, updated to each"
        ));
        let weights = weights
            .iter()
            .map(|w| DeviceBuffer::from_tensor(&stream, w, precision))
            .collect::<Result<Vec<_>>>()?;
        for line in &report {
            tracing::info!(target: "fuse::device", model = spec.name, "{line}");
        }
        Ok(GpuModel {
            device: device.clone(),
            stream,
            blas,
            precision,
            weights,
            fused,
            eager,
            state: Mutex::new(State {
                report,
                ..State::default()
            }),
        })
    }

    pub(crate) fn device(&self) -> CudaDevice {
        self.device.clone()
    }

    pub(crate) fn report(&self) -> Vec<String> {
        self.state
            .lock()
            .map(|s| s.report.clone())
            .unwrap_or_default()
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, State>> {
        self.state.lock().map_err(|_| Error::Cuda {
            message: "an earlier call on this GPU model panicked".into(),
        })
    }

    fn plan(&self, mode: PlanMode) -> &PlanCode {
        match mode {
            PlanMode::Fused => &self.fused,
            PlanMode::Eager => &self.eager,
        }
    }

    /// The shape's state, made on first use, and its family; `states` are the session's state buffers on the
    /// device.
    fn shape<'s>(
        &self,
        state: &'s mut State,
        mode: PlanMode,
        dims: &[usize],
        states: &[u64],
    ) -> Result<(&'s mut ShapeState, &'s mut Family)> {
        let key = (dims.to_vec(), states.to_vec());
        let plan = self.plan(mode);
        let State {
            fused,
            eager,
            report,
            calls,
            evicted,
        } = state;
        let ShapeCache { shapes, families } = match mode {
            PlanMode::Fused => fused,
            PlanMode::Eager => eager,
        };
        if !shapes.contains_key(&key) {
            let full = shapes.len() >= MAX_SHAPES;
            let first = shapes
                .iter()
                .filter(|_| full)
                .min_by_key(|(_, s)| s.eviction_order())
                .map(|(k, _)| k.clone());
            if let Some(first) = first {
                // Nothing may still run on buffers about to be freed.
                self.stream
                    .synchronize()
                    .map_err(|e| failed("synchronising", e))?;
                if let Some(gone) = shapes.remove(&first) {
                    // A family's graph lives while a shape of its structure is held.
                    if !shapes.values().any(|s| s.structure == gone.structure) {
                        families.remove(&gone.structure);
                    }
                }
                *evicted += 1;
            }
            let st = ShapeState::new(
                &self.stream,
                plan,
                &self.weights,
                states,
                dims,
                self.precision,
                self.blas.is_some(),
            )?;
            if st.fallback_gemms > 0 {
                // Without the dims: one line per plan, however many shapes are run.
                let line = format!(
                    "{} plan: {} matmul(s) use the generated GEMM (a layout cuBLAS cannot read)",
                    plan.program.mode, st.fallback_gemms
                );
                tracing::info!(target: "fuse::device", ?dims, "{line}");
                state_note(report, line);
            }
            shapes.insert(key.clone(), st);
        }
        let st = shapes.get_mut(&key).ok_or_else(|| Error::Cuda {
            message: "shape state vanished".into(),
        })?;
        st.last_call = *calls;
        let structure = st.structure;
        Ok((st, families.entry(structure).or_default()))
    }

    /// What the shape cache of `mode` holds now.
    pub(crate) fn shapes(&self, mode: PlanMode) -> Result<GpuShapes> {
        let state = self.lock()?;
        let cache = match mode {
            PlanMode::Fused => &state.fused,
            PlanMode::Eager => &state.eager,
        };
        Ok(GpuShapes {
            shapes: cache.shapes.len(),
            graphs: cache.shapes.values().filter(|s| s.has_replay()).count(),
            evicted: state.evicted,
            family_calls: cache.families.values().map(|f| f.updated).sum(),
            family_reinstantiations: cache.families.values().map(|f| f.reinstantiated).sum(),
        })
    }

    fn program(&self, mode: PlanMode) -> &'static Program {
        self.plan(mode).program
    }

    /// One call: upload the inputs, run (replay) the plan, download the outputs into `outputs` (reused when their
    /// shapes fit, as on the CPU).
    pub(crate) fn run(
        &self,
        mode: PlanMode,
        dims: &[usize],
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
    ) -> Result<()> {
        let p = self.program(mode);
        if !p.states.is_empty() {
            return Err(Error::NeedsSession {
                model: p.model.into(),
            });
        }
        self.run_with_states(mode, dims, inputs, outputs, &[])
    }

    /// [`GpuModel::run`] for a model with state: the session's states move to this GPU on its first call here
    /// (uploaded from its host copy) and stay, updated in place by the write kernels.
    pub(crate) fn run_session(
        &self,
        mode: PlanMode,
        dims: &[usize],
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        session: &mut Session,
    ) -> Result<()> {
        let owner = Arc::as_ptr(&self.stream) as usize;
        if session.device.as_ref().is_none_or(|d| d.owner != owner) {
            // From the host copy, brought up to date first if another GPU model holds the current states; zeros
            // (a new or reset session) are made on the device rather than copied there.
            session.sync_host()?;
            let (host, zeroed) = (session.host_states(), session.host_zeroed());
            let states = DeviceStates::new(&self.stream, owner, host, self.precision, zeroed)?;
            session.device = Some(states);
        }
        let device = session.device.as_mut().ok_or_else(|| Error::Cuda {
            message: "the session's device states vanished".into(),
        })?;
        // From here the kernels may write the states: the host copy is stale even if the call fails midway.
        device.host_current = false;
        let ptrs = device.ptrs();
        self.run_with_states(mode, dims, inputs, outputs, &ptrs)
    }

    fn run_with_states(
        &self,
        mode: PlanMode,
        dims: &[usize],
        inputs: &[&Tensor],
        outputs: &mut Vec<Tensor>,
        states: &[u64],
    ) -> Result<()> {
        let p = self.program(mode);
        self.device
            .ctx
            .bind_to_thread()
            .map_err(|e| failed("binding the CUDA context", e))?;
        let mut guard = self.lock()?;
        let state = &mut *guard;
        state.calls += 1;
        let note = {
            let (st, family) = self.shape(state, mode, dims, states)?;
            st.upload(&self.stream, p, inputs)?;
            st.execute(&self.stream, self.blas.as_ref(), family)?
        };
        if let Some(line) = note {
            tracing::warn!(target: "fuse::device", model = p.model, "{line}");
            state_note(&mut state.report, line);
        }
        p.fit_outputs(dims, outputs)?;
        let (st, _) = self.shape(state, mode, dims, states)?;
        st.download(&self.stream, p, outputs)
    }

    /// Times `runs` graph replays of the plan at these inputs (after the first call, and the second, which captures
    /// the graph).
    pub(crate) fn time(
        &self,
        mode: PlanMode,
        dims: &[usize],
        inputs: &[&Tensor],
        runs: usize,
    ) -> Result<GpuTiming> {
        let start = Instant::now();
        let mut outputs = Vec::new();
        self.run(mode, dims, inputs, &mut outputs)?;
        let first_call_ms = start.elapsed().as_secs_f64() * 1e3;
        self.run(mode, dims, inputs, &mut outputs)?;
        let runs = runs.max(1);
        let sync = || {
            self.stream
                .synchronize()
                .map_err(|e| failed("synchronising", e))
        };
        let mut guard = self.lock()?;
        let (st, _) = self.shape(&mut guard, mode, dims, &[])?;
        if !st.has_replay() {
            return Err(Error::Cuda {
                message: "no CUDA graph was captured for this shape; see the device report".into(),
            });
        }
        let replay = || st.replay().unwrap_or(Ok(()));
        replay()?;
        sync()?;
        // Host cost of enqueuing a replay: launches back to back, the device catching up behind.
        let t = Instant::now();
        for _ in 0..runs {
            replay()?;
        }
        let host_us = t.elapsed().as_secs_f64() * 1e6 / runs as f64;
        sync()?;
        let t = Instant::now();
        for _ in 0..runs {
            replay()?;
        }
        sync()?;
        let device_ms = t.elapsed().as_secs_f64() * 1e3 / runs as f64;
        Ok(GpuTiming {
            first_call_ms,
            device_ms,
            host_us,
        })
    }
}

fn state_note(report: &mut Vec<String>, line: String) {
    if !report.contains(&line) {
        report.push(line);
    }
}

/// Device-to-device copy bandwidth over `bytes` (read plus written), GB/s: the roofline for memory-bound kernels.
pub(crate) fn copy_bandwidth(device: &CudaDevice, bytes: usize, runs: usize) -> Result<f64> {
    let stream = device
        .ctx
        .new_stream()
        .map_err(|e| failed("creating a CUDA stream", e))?;
    let alloc = |e| failed(&format!("allocating {bytes} bytes"), e);
    let src = stream.alloc_zeros::<u8>(bytes.max(1)).map_err(alloc)?;
    let mut dst = stream.alloc_zeros::<u8>(bytes.max(1)).map_err(alloc)?;
    let copy = |dst: &mut cudarc::driver::CudaSlice<u8>| {
        stream
            .memcpy_dtod(&src, dst)
            .map_err(|e| failed("copying", e))
    };
    copy(&mut dst)?;
    stream
        .synchronize()
        .map_err(|e| failed("synchronising", e))?;
    let t = Instant::now();
    for _ in 0..runs.max(1) {
        copy(&mut dst)?;
    }
    stream
        .synchronize()
        .map_err(|e| failed("synchronising", e))?;
    let seconds = t.elapsed().as_secs_f64() / runs.max(1) as f64;
    Ok(2.0 * bytes as f64 / seconds / 1e9)
}
