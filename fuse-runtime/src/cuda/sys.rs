//! Every `unsafe` of the GPU path, in one file: probing for the CUDA libraries, the one launch site
//! ([`enqueue`]: a generated kernel or a cuBLAS GEMM), and CUDA graphs: captured, instantiated, updated, launched.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::cublas::{result as cublas, sys as cublas_sys, CudaBlas};
use cudarc::driver::sys::{self, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{result, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};

use super::blas::BlasCall;
use crate::device::Precision;
use crate::error::{Error, Result};

/// The CUDA libraries the GPU path opens at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Library {
    Driver,
    Nvrtc,
    Cublas,
}

impl Library {
    pub fn file(self) -> &'static str {
        match self {
            Library::Driver => "libcuda.so (the NVIDIA driver)",
            Library::Nvrtc => "libnvrtc.so (NVRTC)",
            Library::Cublas => "libcublas.so (cuBLAS)",
        }
    }
}

/// Whether the library can be opened. cudarc panics on the first call into a library it cannot open, so every
/// path probes first.
pub fn library_present(lib: Library) -> bool {
    // SAFETY: each probe only `dlopen`s the vendor library under its usual names and closes it again: the
    // library's initialisers run, as they would for any use of it, and no symbol is called.
    unsafe {
        match lib {
            Library::Driver => cudarc::driver::sys::is_culib_present(),
            Library::Nvrtc => cudarc::nvrtc::sys::is_culib_present(),
            Library::Cublas => cudarc::cublas::sys::is_culib_present(),
        }
    }
}

/// One generated kernel with its arguments, in the launch ABI of `fuse_kernels::back::cuda`: every dynamic dim
/// as `long long`, then `out`, then one pointer per read.
pub struct KernelStep {
    pub symbol: &'static str,
    pub func: CudaFunction,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub dims: Vec<i64>,
    pub ptrs: Vec<u64>,
}

/// One cuBLAS call of a matmul kernel; pointers are the buffers' starts, offsets are in [`BlasCall`].
pub struct GemmStep {
    pub call: BlasCall,
    /// cuBLAS's A (our B), its B (our A), and the output.
    pub first: u64,
    pub second: u64,
    pub out: u64,
    pub precision: Precision,
}

pub enum Step {
    Kernel(KernelStep),
    Gemm(GemmStep),
}

fn failed(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Cuda {
        message: format!("{what}: {e}"),
    }
}

/// Enqueues one step on `stream` (the stream `blas` is bound to). The only launch site of the runtime.
///
/// # Safety
/// Sound because of how [`super::shape`] builds every step, from the tables the macro emitted for the plan:
/// - **Arguments match the kernel.** `dims` has one value per dynamic dim of the graph and `ptrs` is `out`
///   followed by one pointer per read, from `fuse_kernels::back::cuda::param_buffers` of the same plan whose
///   source defined `func`, whose plan hash was checked against the model's at load.
/// - **Every pointer is live and large enough.** Each points into an allocation of the shape's state (arena,
///   input and output buffers) or the uploaded weights, sized from the plan's buffer sizes and arena layout at
///   the very `dims` passed here; the state is only freed after the stream has drained (every call ends with a
///   synchronous download), and weights outlive every state.
/// - **No data race.** All work goes to one stream, serialised by the GPU model's lock; the memory plan never
///   gives a kernel an output that overlaps a buffer it reads (the epilogue rewrites `out` element by element).
/// - **GEMM bounds.** [`BlasCall`]s come from [`super::blas::plan`] on the same accesses the kernels read
///   through, so every element cuBLAS touches is one the generated GEMM would touch.
pub fn enqueue(stream: &CudaStream, blas: Option<&CudaBlas>, step: &Step) -> Result<()> {
    match step {
        Step::Kernel(k) => {
            let mut args = stream.launch_builder(&k.func);
            for d in &k.dims {
                args.arg(d);
            }
            for p in &k.ptrs {
                args.arg(p);
            }
            let cfg = LaunchConfig {
                grid_dim: (k.grid[0], k.grid[1], k.grid[2]),
                block_dim: (k.block[0], k.block[1], k.block[2]),
                shared_mem_bytes: 0,
            };
            // SAFETY: see the function's `# Safety` section.
            unsafe { args.launch(cfg) }
                .map(drop)
                .map_err(|e| failed(&format!("launching {}", k.symbol), e))
        }
        Step::Gemm(g) => {
            let Some(blas) = blas else {
                return Err(failed("cuBLAS GEMM", "no cuBLAS handle"));
            };
            let c = &g.call;
            let (ty, size) = match g.precision {
                Precision::F32 => (cublas_sys::cudaDataType::CUDA_R_32F, 4u64),
                Precision::Bf16 => (cublas_sys::cudaDataType::CUDA_R_16BF, 2u64),
                Precision::F16 => (cublas_sys::cudaDataType::CUDA_R_16F, 2u64),
            };
            let op = |t: bool| {
                if t {
                    cublas_sys::cublasOperation_t::CUBLAS_OP_T
                } else {
                    cublas_sys::cublasOperation_t::CUBLAS_OP_N
                }
            };
            let at = |base: u64, offset: usize| (base + offset as u64 * size) as *const c_void;
            let (alpha, beta) = (1.0f32, 0.0f32);
            // SAFETY: see the function's `# Safety` section; alpha and beta are host f32 (the handle's default
            // pointer mode), as CUBLAS_COMPUTE_32F requires, and live across the call.
            unsafe {
                cublas::gemm_strided_batched_ex(
                    *blas.handle(),
                    op(c.trans_first),
                    op(c.trans_second),
                    c.m,
                    c.n,
                    c.k,
                    &alpha as *const f32 as *const c_void,
                    at(g.first, c.first_offset),
                    ty,
                    c.ld_first,
                    c.stride_first,
                    at(g.second, c.second_offset),
                    ty,
                    c.ld_second,
                    c.stride_second,
                    &beta as *const f32 as *const c_void,
                    at(g.out, c.out_offset) as *mut c_void,
                    ty,
                    c.ldc,
                    c.stride_out,
                    c.batch,
                    cublas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    cublas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
            .map_err(|e| failed("cuBLAS GEMM", e))
        }
    }
}

/// A graph captured from the stream, not instantiated: made into a [`Replay`], or the parameters a [`Replay`] is
/// updated to.
pub struct Captured(sys::CUgraph);

impl Drop for Captured {
    fn drop(&mut self) {
        // SAFETY: the graph was made by `cuStreamEndCapture` and is destroyed only here; an instantiation made
        // from it, or updated from it, does not need it afterwards.
        if let Err(e) = unsafe { result::graph::destroy(self.0) } {
            tracing::warn!(target: "fuse::device", "destroying a captured CUDA graph: {e}");
        }
    }
}

/// Records `steps` on `stream` into a graph without running them. The capture ends whatever happened, or the
/// stream would stay unusable.
pub fn capture(
    stream: &Arc<CudaStream>,
    blas: Option<&CudaBlas>,
    steps: &[Step],
) -> Result<Captured> {
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .map_err(|e| failed("beginning capture", e))?;
    let enqueued = steps.iter().try_for_each(|s| enqueue(stream, blas, s));
    // SAFETY: the stream is live and was put in capture mode above, on this thread.
    let graph = match unsafe { result::stream::end_capture(stream.cu_stream()) } {
        Ok(g) if g.is_null() => Err(failed("ending capture", "no graph was captured")),
        Ok(g) => Ok(Captured(g)),
        Err(e) => Err(failed("ending capture", e)),
    };
    // A graph captured from a failed enqueue is destroyed here, by its drop.
    enqueued?;
    graph
}

/// An instantiated CUDA graph, launched as one unit on its stream.
pub struct Replay {
    exec: sys::CUgraphExec,
    stream: Arc<CudaStream>,
}

// SAFETY: CUDA graph objects are not internally synchronised but may be used from any thread as long as calls on
// one graph are serialised. A `Replay` is only reachable through the GPU model's mutex, which serialises them.
unsafe impl Send for Replay {}

impl Drop for Replay {
    fn drop(&mut self) {
        // The handle belongs to the stream's context (a failure to bind shows in the call below).
        let _ = self.stream.context().bind_to_thread();
        // SAFETY: made by `cuGraphInstantiate` and destroyed only here. Launches already enqueued finish first:
        // the driver defers the release of an instantiation that is still running.
        if let Err(e) = unsafe { result::graph::exec_destroy(self.exec) } {
            tracing::warn!(target: "fuse::device", "destroying a CUDA graph: {e}");
        }
    }
}

impl Replay {
    pub fn instantiate(stream: &Arc<CudaStream>, graph: &Captured) -> Result<Replay> {
        // SAFETY: a live graph, captured on this stream's context.
        let exec = unsafe { result::graph::instantiate(graph.0, CUgraphInstantiate_flags(0)) }
            .map_err(|e| failed("instantiating the CUDA graph", e))?;
        Ok(Replay {
            exec,
            stream: stream.clone(),
        })
    }

    pub fn launch(&self) -> Result<()> {
        self.stream
            .context()
            .bind_to_thread()
            .map_err(|e| failed("binding the CUDA context", e))?;
        // SAFETY: a live instantiation whose launches point into buffers alive until the stream drains (see
        // [`enqueue`]: it was captured from such steps). A shape's own graph holds its own steps; a family's is
        // launched only right after it was made from, or updated to, the launching shape's steps
        // (`shape::Family::update_to`), never with an earlier shape's pointers.
        unsafe { result::graph::launch(self.exec, self.stream.cu_stream()) }
            .map_err(|e| failed("replaying the CUDA graph", e))
    }

    /// Gives this instantiation the parameters of `graph`'s nodes (pointers, dims, grids), when `graph` has the
    /// same nodes (the driver judges). On refusal the instantiation is unchanged and the error says why.
    pub fn update(&mut self, graph: &Captured) -> Result<()> {
        let mut info = sys::CUgraphExecUpdateResultInfo {
            result: sys::CUgraphExecUpdateResult::CU_GRAPH_EXEC_UPDATE_ERROR,
            errorNode: std::ptr::null_mut(),
            errorFromNode: std::ptr::null_mut(),
        };
        // SAFETY: both handles are live and `info` is a valid out-pointer for the call's duration. Launches of
        // the instantiation already enqueued keep their old parameters; only later ones see the new.
        let status = unsafe { sys::cuGraphExecUpdate_v2(self.exec, graph.0, &mut info) };
        match status {
            sys::CUresult::CUDA_SUCCESS => Ok(()),
            code => Err(failed(
                "updating the CUDA graph",
                format!("{code:?} ({:?})", info.result),
            )),
        }
    }
}
