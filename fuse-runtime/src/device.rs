//! Where a model runs, and the fallback chain that picks it.
//!
//! [`Device::cuda`] probes for the driver without panicking (no `libcuda`, no GPU, or a runtime built without the
//! `cuda` feature are [`Error::NoCudaDevice`]). [`CompiledModel::to_device`] moves a model there and fails with a
//! typed error when it cannot have it; [`CompiledModel::to_best_device`] walks the chain instead:
//!
//! 1. a CUDA device ([`Device::best`]), else the CPU;
//! 2. on it, per plan, the AOT fatbin `fuse_build` compiled, else NVRTC on the embedded source;
//! 3. if neither loads, the CPU.
//!
//! Each step is a `tracing` event (target `fuse::device`) and a line of [`CompiledModel::device_report`], e.g.
//! `fused plan: AOT fatbin for sm_90`, `fused plan: NVRTC JIT of embedded source (compute_90): no AOT fatbin:
//! nvcc was not found when the crate was built`, or `CPU: no CUDA device: libcuda.so (the NVIDIA driver) not
//! found`. Stale kernels ([`Error::StaleKernels`]) are never a reason to fall back: they are a broken build.
//!
//! ```
//! use fuse_runtime::{fused_model, Device, Tensor};
//!
//! #[fused_model]
//! mod m {
//!     pub struct Scale {}
//!     impl Scale {
//!         pub fn forward(&self, #[shape(n, 4)] x: Tensor) -> Tensor {
//!             (x * 2.0).relu()
//!         }
//!     }
//! }
//!
//! # fn main() -> fuse_runtime::Result<()> {
//! let model = m::Scale::random(0);
//! let device = model.compiled().to_best_device()?; // a GPU when there is one, else the CPU
//! println!("{device}\n{}", model.compiled().device_report());
//! let y = model.forward(&Tensor::randn(&[3, 4], 1))?; // runs where the model is
//! assert_eq!(y.shape(), &[3, 4]);
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::{Arc, RwLock};

use crate::cuda::GpuModel;
use crate::error::{Error, Result};
use crate::model::{CompiledModel, PlanMode};
use crate::tensor::Tensor;

/// How float tensors are stored on the GPU. Kernels compute in f32 either way; bf16 and f16 halve the bytes moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    #[default]
    F32,
    /// JIT-compiled with NVRTC (the AOT fatbins are f32); inputs and outputs stay f32 on the host.
    Bf16,
    /// IEEE half, JIT-compiled as bf16 is: 11 significant bits where bf16 keeps 8, so a half-precision checkpoint
    /// is stored exactly, but its range ends at 65504 (bf16 has f32's): a weight, state or input past it is
    /// refused ([`Error::OutsideStorageRange`]), and an intermediate result past it is stored as ±∞.
    F16,
}

/// How a model is placed on a GPU: the storage precision, and which steps of the fallback chain to skip (the
/// GPU tests use these to run every path: the AOT fatbin and NVRTC, cuBLAS and the generated GEMM).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GpuOptions {
    pub precision: Precision,
    /// Compile the embedded source with NVRTC even when an AOT fatbin for the GPU is there.
    pub jit: bool,
    /// Run every matmul on the generated GEMM kernel even when cuBLAS is installed.
    pub generated_gemm: bool,
}

/// An opened CUDA device.
#[derive(Clone)]
pub struct CudaDevice {
    ordinal: usize,
    name: String,
    arch: (u32, u32),
    #[cfg(feature = "cuda")]
    pub(crate) ctx: Arc<cudarc::driver::CudaContext>,
    /// Without the `cuda` feature no `CudaDevice` can be made.
    #[cfg(not(feature = "cuda"))]
    never: std::convert::Infallible,
}

impl CudaDevice {
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Compute capability, e.g. `(9, 0)`.
    pub fn arch(&self) -> (u32, u32) {
        self.arch
    }

    /// Device-to-device copy bandwidth in GB/s (bytes read plus written) over a buffer of `bytes`, averaged over
    /// `runs` copies: the ceiling a memory-bound kernel is measured against.
    pub fn copy_bandwidth(&self, bytes: usize, runs: usize) -> Result<f64> {
        #[cfg(feature = "cuda")]
        return crate::cuda::copy_bandwidth(self, bytes, runs);
        #[cfg(not(feature = "cuda"))]
        match (self.never, bytes, runs) {}
    }
}

impl fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for CudaDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (major, minor) = self.arch;
        write!(
            f,
            "CUDA device {}: {} (sm_{major}{minor})",
            self.ordinal, self.name
        )
    }
}

/// Where a model runs.
#[derive(Clone, Debug)]
pub enum Device {
    Cpu,
    Cuda(CudaDevice),
}

fn no_device(reason: impl Into<String>) -> Error {
    Error::NoCudaDevice {
        reason: reason.into(),
    }
}

#[cfg(feature = "cuda")]
fn open(ordinal: usize) -> Result<CudaDevice> {
    use crate::cuda::{library_present, Library};
    use cudarc::driver::CudaContext;

    // cudarc panics on the first driver call when libcuda cannot be opened: probe first.
    if !library_present(Library::Driver) {
        return Err(no_device(format!("{} not found", Library::Driver.file())));
    }
    let count = CudaContext::device_count()
        .map_err(|e| no_device(format!("the driver found no usable GPU ({e})")))?;
    if ordinal >= count.max(0) as usize {
        return Err(no_device(format!(
            "device {ordinal} requested, {count} present"
        )));
    }
    let ctx = CudaContext::new(ordinal)
        .map_err(|e| no_device(format!("device {ordinal} could not be opened ({e})")))?;
    let query = |e| no_device(format!("device {ordinal} did not answer ({e})"));
    let (major, minor) = ctx.compute_capability().map_err(query)?;
    let name = ctx.name().map_err(query)?;
    Ok(CudaDevice {
        ordinal,
        name,
        arch: (major.max(0) as u32, minor.max(0) as u32),
        ctx,
    })
}

#[cfg(not(feature = "cuda"))]
fn open(_ordinal: usize) -> Result<CudaDevice> {
    Err(no_device(
        "fuse-runtime was built without its `cuda` feature",
    ))
}

impl Device {
    /// CUDA device `ordinal`, or [`Error::NoCudaDevice`] saying why there is none. Never panics.
    pub fn cuda(ordinal: usize) -> Result<Device> {
        open(ordinal).map(Device::Cuda)
    }

    /// The first CUDA device, else the CPU; each step is a `tracing` event.
    pub fn best() -> Device {
        Self::best_with_reason().0
    }

    /// [`Device::best`] and the report line for the choice (`CUDA device 0: ...` or `CPU: <why>`).
    pub fn best_with_reason() -> (Device, String) {
        match Device::cuda(0) {
            Ok(device) => {
                let line = device.to_string();
                tracing::info!(target: "fuse::device", "{line}");
                (device, line)
            }
            Err(e) => {
                let line = format!("CPU: {e}");
                tracing::warn!(target: "fuse::device", "{line}");
                (Device::Cpu, line)
            }
        }
    }

    pub fn is_cuda(&self) -> bool {
        matches!(self, Device::Cuda(_))
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("CPU"),
            Device::Cuda(d) => write!(f, "{d}"),
        }
    }
}

/// Timings of graph replays on the GPU ([`CompiledModel::gpu_timing`]).
#[derive(Clone, Copy, Debug)]
pub struct GpuTiming {
    /// The first call of the shape: allocation, upload, a direct run, graph capture, download.
    pub first_call_ms: f64,
    /// Device time per replay (wall clock over back-to-back replays, synchronised at both ends).
    pub device_ms: f64,
    /// Host time to enqueue one replay.
    pub host_us: f64,
}

/// What a GPU model's cache of shapes holds ([`CompiledModel::gpu_shapes`]): a shape is one binding of the dynamic
/// dims (with one session's states), with its arena and launch list, and from its second call its CUDA graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuShapes {
    /// Shapes held now (at most 16 per plan).
    pub shapes: usize,
    /// Shapes whose CUDA graph was captured.
    pub graphs: usize,
    /// Shapes dropped to make room since the model moved to the GPU (both plans): those called once go first.
    pub evicted: usize,
    /// Calls that ran the graph shared by shapes of one launch structure, updated to their own shape: every
    /// decode step from the second on. They capture their launches, which runs nothing, and launch one graph.
    pub family_calls: u64,
    /// Of those, the calls whose update the driver refused, so the shared graph was instantiated again.
    pub family_reinstantiations: u64,
}

/// A model's placement: `None` runs on the CPU executors. Interior, so a model behind `&` (the generated
/// wrappers hand out `&CompiledModel`) can be moved.
#[derive(Default)]
pub(crate) struct Placement(RwLock<State>);

#[derive(Default)]
struct State {
    gpu: Option<Arc<GpuModel>>,
    report: Vec<String>,
}

impl Placement {
    pub(crate) fn gpu(&self) -> Option<Arc<GpuModel>> {
        self.0.read().ok().and_then(|s| s.gpu.clone())
    }

    fn set(&self, gpu: Option<Arc<GpuModel>>, report: Vec<String>) {
        if let Ok(mut s) = self.0.write() {
            *s = State { gpu, report };
        }
    }

    /// The GPU's report, or why the model is on the CPU (empty when it was never moved).
    fn report(&self) -> Vec<String> {
        let Ok(s) = self.0.read() else {
            return Vec::new();
        };
        match &s.gpu {
            Some(gpu) => gpu.report(),
            None => s.report.clone(),
        }
    }
}

/// What a CPU `forward` runs: the fused plan's kernels, the instruction set its kernels and GEMM tiles use, and the
/// worker threads.
fn cpu_line(model: &CompiledModel) -> String {
    use crate::cpu::gemm::Backend;

    let kernels = &model.executor(PlanMode::Fused).program().kernel_info;
    let count = |kind: &str| kernels.iter().filter(|k| k.kind == kind).count();
    let mut line = format!(
        "CPU: fused plan of {} kernel(s) (the eager plan has {})",
        kernels.len(),
        model.executor(PlanMode::Eager).program().kernels.len()
    );
    let (gemms, attention) = (count("matmul"), count("attention"));
    if gemms > 0 {
        line += &format!(", {gemms} of them GEMMs");
    }
    if attention > 0 {
        line += &format!(", {attention} fused attention");
    }
    line += match Backend::best() {
        Backend::Avx512 => "; AVX-512 kernels with fuse's 12×32 GEMM tile",
        Backend::Avx2 => "; AVX2 kernels with fuse's 6×16 GEMM tile",
        Backend::Portable => "; portable kernels, matrixmultiply for GEMMs (no AVX2 on this CPU)",
    };
    let (reduced, packed) = model.executor(PlanMode::Fused).reduced_gemms();
    // Attention's two products follow int8 and bf16 where the CPU multiplies bf16 natively.
    let bf16_attention = attention > 0
        && crate::cpu::attention::Products::for_precision(model.cpu_precision())
            != crate::cpu::attention::Products::F32;
    let others = if bf16_attention {
        "; fused attention's two products in bf16 with f32 sums, its softmax and every other op in f32"
    } else {
        "; every other op in f32"
    };
    match model.cpu_precision() {
        crate::CpuPrecision::Int8 => {
            let kernel = crate::cpu::gemm::int8::Int8Kernel::best().describe();
            line += &format!(
                "; int8 GEMMs ({kernel}) for {reduced} of the {packed} whose B is a weight, activations \
                 quantised per row{others}"
            );
        }
        crate::CpuPrecision::Bf16 => {
            let kernel = crate::cpu::gemm::bf16::Bf16Kernel::best().describe();
            line += &format!(
                "; bf16 GEMMs ({kernel}) for {reduced} of the {packed} whose B is a weight, activations \
                 rounded to bf16, f32 sums{others}"
            );
        }
        // f16 packs exist only where the CPU has F16C (`PackedB::new_f16`); elsewhere `reduced` is 0.
        crate::CpuPrecision::F16 => {
            line += &format!(
                "; f16 GEMMs (weights in f16 widened by F16C into the f32 tile) for {reduced} of the {packed} \
                 whose B is a weight, f32 activations and sums; every other op in f32"
            );
        }
        crate::CpuPrecision::F32 => {}
    }
    let gathers = model.executor(PlanMode::Fused).packed_gathers();
    if gathers > 0 {
        line += &format!(
            "; {gathers} embedding gather(s) read rows from a {} pack",
            model.cpu_precision()
        );
    }
    let released = model.released_weights();
    if released > 0 {
        line += &format!(
            "; {released} weight(s) held only packed, {:.1} MB of weights in all",
            model.weight_bytes() as f64 / 1e6
        );
    }
    let threads = rayon::current_num_threads();
    line += &format!("; {threads} worker thread(s)");
    line
}

#[cfg(feature = "cuda")]
fn gpu_model(model: &CompiledModel, device: &CudaDevice, options: GpuOptions) -> Result<GpuModel> {
    GpuModel::new(model.spec(), model.gpu_weights()?, device, options)
}

#[cfg(not(feature = "cuda"))]
fn gpu_model(_: &CompiledModel, device: &CudaDevice, _: GpuOptions) -> Result<GpuModel> {
    match device.never {}
}

impl CompiledModel {
    /// Runs every later call on `device` (f32 storage). Asking for CUDA and not getting it is an error, never a
    /// silent CPU run; the model then stays where it was.
    pub fn to_device(&self, device: Device) -> Result<()> {
        self.to_device_with(device, Precision::F32)
    }

    /// [`CompiledModel::to_device`] with a storage precision for the GPU (the CPU always computes in f32).
    pub fn to_device_with(&self, device: Device, precision: Precision) -> Result<()> {
        let options = GpuOptions {
            precision,
            ..GpuOptions::default()
        };
        self.to_device_with_options(device, options)
    }

    /// [`CompiledModel::to_device`] with every GPU option (see [`GpuOptions`]).
    pub fn to_device_with_options(&self, device: Device, options: GpuOptions) -> Result<()> {
        match device {
            Device::Cpu => {
                self.placement
                    .set(None, vec!["CPU: requested (to_device(Device::Cpu))".into()]);
                Ok(())
            }
            Device::Cuda(d) => {
                let gpu = gpu_model(self, &d, options)?;
                self.placement.set(Some(Arc::new(gpu)), Vec::new());
                Ok(())
            }
        }
    }

    /// Walks the fallback chain (see the [module docs](crate::device)) and returns where the model ended up.
    /// Only a broken build ([`Error::StaleKernels`]) is an error.
    pub fn to_best_device(&self) -> Result<Device> {
        let (device, line) = Device::best_with_reason();
        let Device::Cuda(d) = &device else {
            self.placement.set(None, vec![line]);
            return Ok(Device::Cpu);
        };
        match gpu_model(self, d, GpuOptions::default()) {
            Ok(gpu) => {
                self.placement.set(Some(Arc::new(gpu)), Vec::new());
                Ok(device)
            }
            Err(e @ Error::StaleKernels { .. }) => Err(e),
            Err(e) => {
                let why = format!("CPU: no GPU code could be loaded: {e}");
                tracing::warn!(target: "fuse::device", model = self.spec().name, "{why}");
                self.placement.set(None, vec![line, why]);
                Ok(Device::Cpu)
            }
        }
    }

    /// Where calls run now.
    pub fn device(&self) -> Device {
        self.placement
            .gpu()
            .map_or(Device::Cpu, |g| Device::Cuda(g.device()))
    }

    /// How the model got where it is, one step per line: the device, where each plan's GPU code came from (AOT
    /// fatbin or NVRTC, and why), the GEMM path, and shapes that could not be captured as CUDA graphs. On the CPU:
    /// why it is there (never moved, requested, or each step of a fallback), then what runs (the fused plan's
    /// kernels, the instruction set of its kernels and GEMM tiles, the worker threads).
    pub fn device_report(&self) -> String {
        let mut lines = self.placement.report();
        if self.placement.gpu().is_none() {
            if lines.is_empty() {
                lines.push(
                    "CPU: the model was never moved to a GPU (to_device or to_best_device moves it)"
                        .into(),
                );
            }
            lines.push(cpu_line(self));
        }
        lines.join("\n")
    }

    /// What the GPU's cache of shapes of `mode` holds; an error when the model is on the CPU.
    pub fn gpu_shapes(&self, mode: PlanMode) -> Result<GpuShapes> {
        let gpu = self.placement.gpu().ok_or_else(|| Error::NoCudaDevice {
            reason: "the model is on the CPU; call to_device first".into(),
        })?;
        gpu.shapes(mode)
    }

    /// Times graph replays of `mode` on the GPU at these inputs; an error when the model is on the CPU.
    pub fn gpu_timing(&self, mode: PlanMode, inputs: &[&Tensor], runs: usize) -> Result<GpuTiming> {
        let gpu = self.placement.gpu().ok_or_else(|| Error::NoCudaDevice {
            reason: "the model is on the CPU; call to_device first".into(),
        })?;
        let dims = self.spec().bind(inputs)?;
        gpu.time(mode, &dims, inputs, runs)
    }
}
