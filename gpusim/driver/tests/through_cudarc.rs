//! The simulated driver as fuse reaches it: through cudarc's safe layer, with the library found on
//! `LD_LIBRARY_PATH` (`scripts/gpu-sim.sh` builds it and sets `GPUSIM=1`). Without the simulator each test prints
//! `skipped: …` and passes; with a real GPU's driver first on the path they skip too, since the defective kernels
//! here are meant for the simulator's checks.

use std::sync::Arc;

use cudarc::cublas::{result as cublas, sys as cublas_sys, CudaBlas};
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUresult, CUstreamCaptureMode};
use cudarc::driver::{
    CudaContext, CudaModule, CudaStream, DriverError, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;

const CHECKS_PTX: &str = include_str!("kernels/checks.ptx");
const DEVICE_NAME: &str = "gpusim (simulated sm_90)";

/// The simulated device, or `None` after printing why the test is skipped.
fn simulator() -> Option<Arc<CudaContext>> {
    if std::env::var("GPUSIM").as_deref() != Ok("1") {
        eprintln!(
            "skipped: GPUSIM=1 is not set (scripts/gpu-sim.sh runs these tests on the simulator)"
        );
        return None;
    }
    // SAFETY: only opens and closes the library, as fuse's own probe does.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        eprintln!("skipped: no libcuda.so on the library path (scripts/gpu-sim.sh puts the simulator there)");
        return None;
    }
    let ctx = CudaContext::new(0).expect("the simulated device opens");
    let name = ctx.name().expect("device name");
    if name != DEVICE_NAME {
        eprintln!("skipped: the driver found is `{name}`, not the simulator");
        return None;
    }
    Some(ctx)
}

fn checks(ctx: &Arc<CudaContext>) -> Arc<CudaModule> {
    ctx.load_module(Ptx::from_src(CHECKS_PTX))
        .expect("nvcc's PTX loads")
}

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}[{i}]: {g} against {w}"
        );
    }
}

fn launch_axpy(
    stream: &Arc<CudaStream>,
    module: &Arc<CudaModule>,
    y: &mut cudarc::driver::CudaSlice<f32>,
    x: &cudarc::driver::CudaSlice<f32>,
    a: &f32,
    n: &i64,
) -> Result<(), DriverError> {
    let f = module.load_function("axpy").expect("axpy");
    let mut args = stream.launch_builder(&f);
    args.arg(y).arg(x).arg(a).arg(n);
    let blocks = (*n as u32).div_ceil(128);
    // SAFETY: axpy(float*, const float*, float, long long) with buffers of n elements.
    unsafe {
        args.launch(LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        })
    }
    .map(drop)
}

#[test]
fn a_correct_kernel_matches_the_host() {
    let Some(ctx) = simulator() else { return };
    let module = checks(&ctx);
    let stream = ctx.new_stream().expect("stream");
    let n = 1000usize;
    let (x, y0) = (values(n, 1), values(n, 2));
    let x_dev = stream.clone_htod(&x).expect("x");
    let mut y_dev = stream.clone_htod(&y0).expect("y");
    launch_axpy(&stream, &module, &mut y_dev, &x_dev, &0.75, &(n as i64)).expect("launch");
    let got = stream.clone_dtoh(&y_dev).expect("copy back");
    let want: Vec<f32> = x
        .iter()
        .zip(&y0)
        .map(|(x, y)| 0.75f32.mul_add(*x, *y))
        .collect();
    assert_close(&got, &want, 1e-6, "axpy");
}

#[test]
fn an_out_of_bounds_write_is_a_launch_error_naming_kernel_thread_and_address() {
    let Some(ctx) = simulator() else { return };
    let module = checks(&ctx);
    let stream = ctx.new_stream().expect("stream");
    let n = 100i64;
    let mut out = stream.alloc_zeros::<f32>(n as usize).expect("out");
    let base = {
        use cudarc::driver::DevicePtr;
        out.device_ptr(&stream).0
    };
    let f = module.load_function("write_past_end").expect("kernel");
    let mut args = stream.launch_builder(&f);
    args.arg(&mut out).arg(&n);
    // SAFETY: deliberately wrong (128 threads, 100 elements): the simulator must catch it.
    let e = unsafe {
        args.launch(LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        })
    }
    .expect_err("thread 100 writes past the end");
    assert_eq!(e.0, CUresult::CUDA_ERROR_ILLEGAL_ADDRESS, "{e}");
    let text = e.to_string();
    let first_bad = format!("0x{:x}", base + 4 * n as u64);
    for part in ["write_past_end", "thread (", "PTX line", &first_bad] {
        assert!(text.contains(part), "`{part}` missing from: {text}");
    }
}

fn shared_memory_kernel(
    ctx: &Arc<CudaContext>,
    name: &str,
) -> (Result<(), DriverError>, Vec<f32>, Vec<f32>) {
    let module = checks(ctx);
    let stream = ctx.new_stream().expect("stream");
    let input = values(128, 7);
    let in_dev = stream.clone_htod(&input).expect("in");
    let mut out = stream.alloc_zeros::<f32>(128).expect("out");
    let f = module.load_function(name).expect("kernel");
    let mut args = stream.launch_builder(&f);
    args.arg(&mut out).arg(&in_dev);
    // SAFETY: (float*, const float*) of 128 elements, one block of 128 threads.
    let r = unsafe {
        args.launch(LaunchConfig {
            grid_dim: (1, 1, 1),
            block_dim: (128, 1, 1),
            shared_mem_bytes: 0,
        })
    }
    .map(drop);
    let got = stream.clone_dtoh(&out).expect("copy back");
    (r, got, input)
}

#[test]
fn a_missing_syncthreads_is_reported_as_a_shared_memory_race() {
    let Some(ctx) = simulator() else { return };
    let (r, _, _) = shared_memory_kernel(&ctx, "missing_syncthreads");
    let text = r.expect_err("the race must be caught").to_string();
    assert!(
        text.contains("race") && text.contains("missing_syncthreads"),
        "{text}"
    );
    // The same exchange with the barrier is clean and right.
    let (r, got, input) = shared_memory_kernel(&ctx, "rotate_with_syncthreads");
    r.expect("no race with __syncthreads");
    let want: Vec<f32> = (0..128).map(|t| input[(t + 1) % 128]).collect();
    assert_eq!(got, want);
}

#[test]
fn a_barrier_only_some_threads_reach_is_reported() {
    let Some(ctx) = simulator() else { return };
    let (r, _, _) = shared_memory_kernel(&ctx, "divergent_barrier");
    let text = r
        .expect_err("the divergent barrier must be caught")
        .to_string();
    assert!(
        text.contains("barrier") && text.contains("divergent_barrier"),
        "{text}"
    );
}

#[test]
fn graph_replay_gives_what_direct_launches_give_with_the_captured_arguments() {
    let Some(ctx) = simulator() else { return };
    let module = checks(&ctx);
    let stream = ctx.new_stream().expect("stream");
    let n = 300usize;
    let (x, y0) = (values(n, 3), values(n, 4));
    let x_dev = stream.clone_htod(&x).expect("x");
    let nn = n as i64;

    // Direct: y = 0.5·x + y, twice.
    let mut direct = stream.clone_htod(&y0).expect("y");
    for _ in 0..2 {
        launch_axpy(&stream, &module, &mut direct, &x_dev, &0.5, &nn).expect("launch");
    }
    let want = stream.clone_dtoh(&direct).expect("direct result");

    // Captured once with a = 0.5, then the host value changes: the graph keeps the captured one.
    let mut y = stream.clone_htod(&y0).expect("y");
    let mut a = 0.5f32;
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .expect("begin capture");
    launch_axpy(&stream, &module, &mut y, &x_dev, &a, &nn).expect("captured launch");
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .expect("end capture")
        .expect("a graph");
    a = 100.0;
    assert_eq!(
        stream.clone_dtoh(&y).expect("y"),
        y0,
        "capture must not run the kernel"
    );
    graph.launch().expect("replay 1");
    graph.launch().expect("replay 2");
    assert_eq!(
        stream.clone_dtoh(&y).expect("replayed"),
        want,
        "a = {a} must not reach the graph"
    );
}

/// Captures `launches` axpy launches with `a` on `stream` into a graph that is not instantiated.
fn capture_raw(
    stream: &Arc<CudaStream>,
    module: &Arc<CudaModule>,
    y: &mut cudarc::driver::CudaSlice<f32>,
    x: &cudarc::driver::CudaSlice<f32>,
    a: f32,
    launches: usize,
) -> cudarc::driver::sys::CUgraph {
    let n = x.len() as i64;
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .expect("begin capture");
    for _ in 0..launches {
        launch_axpy(stream, module, y, x, &a, &n).expect("captured launch");
    }
    // SAFETY: the stream is live and being captured.
    unsafe { cudarc::driver::result::stream::end_capture(stream.cu_stream()) }.expect("end capture")
}

#[test]
fn an_instantiated_graph_is_updated_to_a_graph_of_the_same_structure_only() {
    use cudarc::driver::sys::{self, CUgraphExecUpdateResult as R};
    let Some(ctx) = simulator() else { return };
    let module = checks(&ctx);
    let stream = ctx.new_stream().expect("stream");
    let n = 200usize;
    let (x, y0) = (values(n, 5), values(n, 6));
    let x_dev = stream.clone_htod(&x).expect("x");
    let (mut first, mut second) = (
        stream.clone_htod(&y0).expect("y"),
        stream.clone_htod(&y0).expect("y"),
    );
    let graph = capture_raw(&stream, &module, &mut first, &x_dev, 0.5, 1);
    // SAFETY: a graph just captured; the instantiation is launched on a live stream and destroyed below.
    let exec =
        unsafe { cudarc::driver::result::graph::instantiate(graph, CUgraphInstantiate_flags(0)) }
            .expect("instantiate");
    // Another buffer and another `a`: the update points the instantiation at them.
    let update = capture_raw(&stream, &module, &mut second, &x_dev, 2.0, 1);
    let mut info = sys::CUgraphExecUpdateResultInfo {
        result: R::CU_GRAPH_EXEC_UPDATE_ERROR,
        errorNode: std::ptr::null_mut(),
        errorFromNode: std::ptr::null_mut(),
    };
    // SAFETY: live handles and a valid out-pointer.
    let status = unsafe { sys::cuGraphExecUpdate_v2(exec, update, &mut info) };
    assert_eq!(
        (status, info.result),
        (CUresult::CUDA_SUCCESS, R::CU_GRAPH_EXEC_UPDATE_SUCCESS)
    );
    // SAFETY: as above.
    unsafe { cudarc::driver::result::graph::launch(exec, stream.cu_stream()) }.expect("replay");
    let want: Vec<f32> = x
        .iter()
        .zip(&y0)
        .map(|(x, y)| 2.0f32.mul_add(*x, *y))
        .collect();
    assert_close(
        &stream.clone_dtoh(&second).expect("second"),
        &want,
        1e-6,
        "updated replay",
    );
    assert_eq!(
        stream.clone_dtoh(&first).expect("first"),
        y0,
        "the old buffer is no longer written"
    );

    // Two launches where the instantiation has one: refused, and the instantiation is unchanged.
    let longer = capture_raw(&stream, &module, &mut first, &x_dev, 1.0, 2);
    // SAFETY: as above.
    let status = unsafe { sys::cuGraphExecUpdate_v2(exec, longer, &mut info) };
    assert_eq!(status, CUresult::CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
    assert_eq!(info.result, R::CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
    // SAFETY: as above.
    unsafe { cudarc::driver::result::graph::launch(exec, stream.cu_stream()) }.expect("replay");
    let twice: Vec<f32> = x
        .iter()
        .zip(&want)
        .map(|(x, y)| 2.0f32.mul_add(*x, *y))
        .collect();
    assert_close(
        &stream.clone_dtoh(&second).expect("second"),
        &twice,
        1e-6,
        "after a refused update",
    );
    // SAFETY: each handle is destroyed once, after its last use.
    unsafe {
        for g in [graph, update, longer] {
            cudarc::driver::result::graph::destroy(g).expect("destroy graph");
        }
        cudarc::driver::result::graph::exec_destroy(exec).expect("destroy exec");
    }
}

#[test]
fn a_synchronisation_inside_capture_invalidates_it() {
    let Some(ctx) = simulator() else { return };
    let stream = ctx.new_stream().expect("stream");
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .expect("begin capture");
    let e = stream
        .synchronize()
        .expect_err("not allowed while capturing");
    assert_eq!(e.0, CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    match stream.end_capture(CUgraphInstantiate_flags(0)) {
        Err(e) => assert_eq!(e.0, CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED),
        Ok(_) => panic!("the capture was invalidated, yet it ended with a graph"),
    }
}

/// Column-major reference: C = A·B with A m×k (lda = m), B k×n (ldb = k).
fn host_gemm(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    let mut c = vec![0f32; m * n];
    for j in 0..n {
        for i in 0..m {
            c[i + j * m] = (0..k)
                .map(|l| f64::from(a[i + l * m]) * f64::from(b[l + j * k]))
                .sum::<f64>() as f32;
        }
    }
    c
}

#[test]
fn cublas_strided_batched_gemm_runs_directly_and_in_a_graph() {
    let Some(ctx) = simulator() else { return };
    let stream = ctx.new_stream().expect("stream");
    let blas = CudaBlas::new(stream.clone()).expect("cuBLAS stand-in");
    let (m, n, k, batch) = (7usize, 5usize, 33usize, 3usize);
    let a = values(m * k * batch, 5);
    let b = values(k * n * batch, 6);
    let a_dev = stream.clone_htod(&a).expect("a");
    let b_dev = stream.clone_htod(&b).expect("b");
    let mut c_dev = stream.alloc_zeros::<f32>(m * n * batch).expect("c");
    let run = |c: &mut cudarc::driver::CudaSlice<f32>| {
        use cudarc::driver::{DevicePtr, DevicePtrMut};
        let (pa, _ra) = a_dev.device_ptr(&stream);
        let (pb, _rb) = b_dev.device_ptr(&stream);
        let (pc, _rc) = c.device_ptr_mut(&stream);
        let (alpha, beta) = (1.0f32, 0.0f32);
        // SAFETY: every operand holds `batch` matrices of the sizes given, contiguous (lda = m, ldb = k).
        unsafe {
            cublas::gemm_strided_batched_ex(
                *blas.handle(),
                cublas_sys::cublasOperation_t::CUBLAS_OP_N,
                cublas_sys::cublasOperation_t::CUBLAS_OP_N,
                m as i32,
                n as i32,
                k as i32,
                &alpha as *const f32 as *const _,
                pa as *const _,
                cublas_sys::cudaDataType::CUDA_R_32F,
                m as i32,
                (m * k) as i64,
                pb as *const _,
                cublas_sys::cudaDataType::CUDA_R_32F,
                k as i32,
                (k * n) as i64,
                &beta as *const f32 as *const _,
                pc as *mut _,
                cublas_sys::cudaDataType::CUDA_R_32F,
                m as i32,
                (m * n) as i64,
                batch as i32,
                cublas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                cublas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
    };
    run(&mut c_dev).expect("gemm");
    let got = stream.clone_dtoh(&c_dev).expect("c");
    for i in 0..batch {
        let want = host_gemm(&a[i * m * k..][..m * k], &b[i * k * n..][..k * n], m, n, k);
        assert_close(
            &got[i * m * n..][..m * n],
            &want,
            1e-5,
            &format!("batch {i}"),
        );
    }
    let mut replayed = stream.alloc_zeros::<f32>(m * n * batch).expect("c");
    stream
        .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        .expect("begin capture");
    run(&mut replayed).expect("captured gemm");
    let graph = stream
        .end_capture(CUgraphInstantiate_flags(0))
        .expect("end capture")
        .expect("a graph");
    assert!(
        stream
            .clone_dtoh(&replayed)
            .expect("c")
            .iter()
            .all(|v| *v == 0.0),
        "capture ran the GEMM"
    );
    graph.launch().expect("replay");
    assert_eq!(stream.clone_dtoh(&replayed).expect("c"), got);
}

#[test]
fn an_nvcc_fatbin_loads_through_its_compressed_ptx() {
    let Some(ctx) = simulator() else { return };
    let Ok(nvcc) = std::env::var("NVCC") else {
        eprintln!("skipped: NVCC is not set (scripts/gpu-sim.sh exports it)");
        return;
    };
    let dir = std::env::temp_dir().join(format!("gpusim-fatbin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kernels/checks.cu");
    let fatbin = dir.join("checks.fatbin");
    // fuse-build's flags: SASS for sm_90 and (compressed) compute_90 PTX.
    let status = std::process::Command::new(&nvcc)
        .args([
            "-fatbin",
            "-O3",
            "-gencode=arch=compute_90,code=sm_90",
            "-gencode=arch=compute_90,code=compute_90",
        ])
        .arg(source)
        .arg("-o")
        .arg(&fatbin)
        .status()
        .expect("nvcc runs");
    assert!(status.success(), "nvcc failed");
    let bytes = std::fs::read(&fatbin).expect("fatbin");
    let _ = std::fs::remove_dir_all(&dir);
    let module = ctx
        .load_module(Ptx::from_binary(bytes))
        .expect("the fatbin loads");
    let stream = ctx.new_stream().expect("stream");
    let n = 77usize;
    let (x, y0) = (values(n, 8), values(n, 9));
    let x_dev = stream.clone_htod(&x).expect("x");
    let mut y = stream.clone_htod(&y0).expect("y");
    launch_axpy(&stream, &module, &mut y, &x_dev, &-2.0, &(n as i64)).expect("launch");
    let want: Vec<f32> = x
        .iter()
        .zip(&y0)
        .map(|(x, y)| (-2.0f32).mul_add(*x, *y))
        .collect();
    assert_close(
        &stream.clone_dtoh(&y).expect("y"),
        &want,
        1e-6,
        "axpy from the fatbin",
    );
}

#[test]
fn an_unsupported_call_is_an_error_naming_it() {
    let Some(_ctx) = simulator() else { return };
    // SAFETY: takes no arguments; the simulator answers without doing anything.
    let r = unsafe { cudarc::driver::sys::cuProfilerStart() };
    assert_eq!(r, CUresult::CUDA_ERROR_NOT_SUPPORTED);
    let text = DriverError(r).to_string();
    assert!(text.contains("cuProfilerStart"), "{text}");
}

#[test]
fn reads_of_never_written_device_memory_are_reported() {
    let Some(ctx) = simulator() else { return };
    let module = checks(&ctx);
    let stream = ctx.new_stream().expect("stream");
    let n = 64usize;
    // SAFETY: f32 has no invalid bit patterns; the point is that nothing writes `x` before the kernel reads it.
    let x = unsafe { stream.alloc::<f32>(n) }.expect("x");
    let mut y = stream.alloc_zeros::<f32>(n).expect("y");
    let e = launch_axpy(&stream, &module, &mut y, &x, &1.0, &(n as i64))
        .expect_err("x was never written");
    assert!(e.to_string().contains("never-written"), "{e}");
    // SAFETY: as above.
    let z = unsafe { stream.alloc::<f32>(n) }.expect("z");
    let e = stream
        .clone_dtoh(&z)
        .expect_err("downloading never-written bytes");
    assert!(e.to_string().contains("never written"), "{e}");
}

/// Run by `scripts/gpu-sim.sh` with `GPUSIM=0` and the stand-in on the library path: without the variable the
/// library must say there is no device, so it is never taken for a GPU.
#[test]
fn without_gpusim_1_the_stand_in_reports_no_device() {
    if std::env::var("GPUSIM").as_deref() != Ok("0") {
        eprintln!("skipped: runs with GPUSIM=0 (scripts/gpu-sim.sh does)");
        return;
    }
    // SAFETY: only opens and closes the library.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        eprintln!("skipped: no libcuda.so on the library path");
        return;
    }
    match CudaContext::new(0) {
        Err(e) => {
            assert_eq!(e.0, CUresult::CUDA_ERROR_NO_DEVICE, "{e}");
            assert!(e.to_string().contains("GPUSIM=1"), "{e}");
        }
        Ok(ctx) => {
            let name = ctx.name().unwrap_or_default();
            assert_ne!(name, DEVICE_NAME, "the simulator answered without GPUSIM=1");
            eprintln!("skipped: a real driver ({name}) is first on the library path");
        }
    }
}
