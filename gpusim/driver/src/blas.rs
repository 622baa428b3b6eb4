//! The exported cuBLAS entry points (`libcublas.so`): handles bound to streams, and the strided-batched GEMMs
//! fuse's runtime calls, run by [`crate::gemm`] as a stream operation (so stream capture records them like a
//! kernel, with α and β copied at call time as host pointer mode does).

use std::ffi::{c_int, c_longlong, c_void};

use cudarc::cublas::sys::{
    cublasComputeType_t, cublasGemmAlgo_t, cublasHandle_t, cublasMath_t, cublasOperation_t,
    cublasPointerMode_t, cublasStatus_t, cudaDataType, cudaStream_t,
};
use cudarc::driver::sys::CUresult;

use crate::gemm::{validate, GemmCall, Operand, Storage};
use crate::ops::{enqueue, Op};
use crate::state::{fail, from_handle, lock, to_handle, MutexGuardState, DEFAULT_STREAM};

/// The state and the key of the handle's stream, or the status to return.
fn handle_stream(
    handle: cublasHandle_t,
    call: &str,
) -> Result<(MutexGuardState, usize), cublasStatus_t> {
    let state = lock();
    if !state.initialised {
        fail(
            CUresult::CUDA_ERROR_NOT_INITIALIZED,
            format!("{call}: the driver is not initialised (cuInit with GPUSIM=1)"),
        );
        return Err(cublasStatus_t::CUBLAS_STATUS_NOT_INITIALIZED);
    }
    let id = from_handle(handle);
    match state.blas_handles.get(&id).copied() {
        Some(stream) => Ok((state, stream)),
        None => {
            fail(
                CUresult::CUDA_ERROR_INVALID_HANDLE,
                format!("{call}: cuBLAS handle 0x{id:x} does not exist"),
            );
            Err(cublasStatus_t::CUBLAS_STATUS_NOT_INITIALIZED)
        }
    }
}

fn status(r: Result<(), cublasStatus_t>) -> cublasStatus_t {
    match r {
        Ok(()) => cublasStatus_t::CUBLAS_STATUS_SUCCESS,
        Err(s) => s,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cublasCreate_v2(handle: *mut cublasHandle_t) -> cublasStatus_t {
    let mut state = lock();
    if !state.initialised {
        fail(
            CUresult::CUDA_ERROR_NOT_INITIALIZED,
            "cublasCreate_v2: the driver is not initialised (cuInit with GPUSIM=1)",
        );
        return cublasStatus_t::CUBLAS_STATUS_NOT_INITIALIZED;
    }
    if handle.is_null() {
        return cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE;
    }
    let id = state.new_handle();
    state.blas_handles.insert(id, DEFAULT_STREAM);
    // SAFETY: non-null out-pointer, valid by the caller's contract.
    unsafe { handle.write(to_handle(id)) };
    cublasStatus_t::CUBLAS_STATUS_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cublasDestroy_v2(handle: cublasHandle_t) -> cublasStatus_t {
    status(
        handle_stream(handle, "cublasDestroy_v2").map(|(mut state, _)| {
            state.blas_handles.remove(&from_handle(handle));
        }),
    )
}

#[no_mangle]
pub unsafe extern "C" fn cublasSetStream_v2(
    handle: cublasHandle_t,
    streamId: cudaStream_t,
) -> cublasStatus_t {
    let call = "cublasSetStream_v2";
    status(handle_stream(handle, call).and_then(|(mut state, _)| {
        let Some(key) = state.stream_key(from_handle(streamId)) else {
            fail(
                CUresult::CUDA_ERROR_INVALID_HANDLE,
                format!("{call}: the stream does not exist"),
            );
            return Err(cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE);
        };
        state.blas_handles.insert(from_handle(handle), key);
        Ok(())
    }))
}

/// The workspace is not needed: the GEMM runs on the host.
#[no_mangle]
pub unsafe extern "C" fn cublasSetWorkspace_v2(
    handle: cublasHandle_t,
    _workspace: *mut c_void,
    _workspaceSizeInBytes: usize,
) -> cublasStatus_t {
    status(handle_stream(handle, "cublasSetWorkspace_v2").map(drop))
}

/// Every math mode computes the same here: f32 with f32 accumulation.
#[no_mangle]
pub unsafe extern "C" fn cublasSetMathMode(
    handle: cublasHandle_t,
    _mode: cublasMath_t,
) -> cublasStatus_t {
    status(handle_stream(handle, "cublasSetMathMode").map(drop))
}

#[no_mangle]
pub unsafe extern "C" fn cublasGetPointerMode_v2(
    handle: cublasHandle_t,
    mode: *mut cublasPointerMode_t,
) -> cublasStatus_t {
    status(
        handle_stream(handle, "cublasGetPointerMode_v2").and_then(|_| {
            if mode.is_null() {
                return Err(cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE);
            }
            // SAFETY: non-null out-pointer, valid by the caller's contract.
            unsafe { mode.write(cublasPointerMode_t::CUBLAS_POINTER_MODE_HOST) };
            Ok(())
        }),
    )
}

/// Only host pointer mode (α and β as host values) is simulated.
#[no_mangle]
pub unsafe extern "C" fn cublasSetPointerMode_v2(
    handle: cublasHandle_t,
    mode: cublasPointerMode_t,
) -> cublasStatus_t {
    let call = "cublasSetPointerMode_v2";
    status(handle_stream(handle, call).and_then(|_| match mode {
        cublasPointerMode_t::CUBLAS_POINTER_MODE_HOST => Ok(()),
        other => {
            fail(
                CUresult::CUDA_ERROR_NOT_SUPPORTED,
                format!("{call}: {other:?} is not simulated"),
            );
            Err(cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED)
        }
    }))
}

fn storage(t: cudaDataType, call: &str) -> Result<Storage, cublasStatus_t> {
    match t {
        cudaDataType::CUDA_R_32F => Ok(Storage::F32),
        cudaDataType::CUDA_R_16F => Ok(Storage::F16),
        cudaDataType::CUDA_R_16BF => Ok(Storage::Bf16),
        other => {
            fail(
                CUresult::CUDA_ERROR_NOT_SUPPORTED,
                format!("{call}: data type {other:?} is not simulated"),
            );
            Err(cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED)
        }
    }
}

fn transpose(op: cublasOperation_t, call: &str) -> Result<bool, cublasStatus_t> {
    match op {
        cublasOperation_t::CUBLAS_OP_N => Ok(false),
        // Real data: the conjugate transpose is the transpose.
        cublasOperation_t::CUBLAS_OP_T | cublasOperation_t::CUBLAS_OP_C => Ok(true),
        other => {
            fail(
                CUresult::CUDA_ERROR_NOT_SUPPORTED,
                format!("{call}: {other:?} is not simulated"),
            );
            Err(cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED)
        }
    }
}

/// Validates the call as cuBLAS does, then runs it on (or records it into) the handle's stream.
fn submit(handle: cublasHandle_t, call: GemmCall, name: &str) -> Result<(), cublasStatus_t> {
    let (mut state, stream) = handle_stream(handle, name)?;
    if let Err(e) = validate(&call) {
        fail(e.code, format!("{name}: {}", e.message));
        return Err(cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE);
    }
    enqueue(&mut state, stream, Op::Gemm(call)).map_err(|e| {
        fail(e.code, format!("{name}: {}", e.message));
        cublasStatus_t::CUBLAS_STATUS_EXECUTION_FAILED
    })
}

/// Reads a host scalar (host pointer mode).
///
/// # Safety
/// `p` must be null or point at a readable `T`.
unsafe fn scalar<T: Copy>(p: *const T, name: &str) -> Result<T, cublasStatus_t> {
    if p.is_null() {
        fail(
            CUresult::CUDA_ERROR_INVALID_VALUE,
            format!("{name}: null alpha or beta"),
        );
        return Err(cublasStatus_t::CUBLAS_STATUS_INVALID_VALUE);
    }
    // SAFETY: the caller's contract.
    Ok(unsafe { p.read() })
}

#[no_mangle]
pub unsafe extern "C" fn cublasSgemmStridedBatched(
    handle: cublasHandle_t,
    transa: cublasOperation_t,
    transb: cublasOperation_t,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f32,
    A: *const f32,
    lda: c_int,
    strideA: c_longlong,
    B: *const f32,
    ldb: c_int,
    strideB: c_longlong,
    beta: *const f32,
    C: *mut f32,
    ldc: c_int,
    strideC: c_longlong,
    batchCount: c_int,
) -> cublasStatus_t {
    let name = "cublasSgemmStridedBatched";
    let operand = |ptr: u64, ld: c_int, stride: c_longlong| Operand {
        ptr,
        storage: Storage::F32,
        ld: i64::from(ld),
        stride,
    };
    status((|| {
        let call = GemmCall {
            trans_a: transpose(transa, name)?,
            trans_b: transpose(transb, name)?,
            m: m.into(),
            n: n.into(),
            k: k.into(),
            // SAFETY: host scalars, by the caller's contract.
            alpha: unsafe { scalar(alpha, name) }?,
            // SAFETY: as above.
            beta: unsafe { scalar(beta, name) }?,
            a: operand(A as u64, lda, strideA),
            b: operand(B as u64, ldb, strideB),
            c: operand(C as u64, ldc, strideC),
            batch: batchCount.into(),
        };
        submit(handle, call, name)
    })())
}

#[no_mangle]
pub unsafe extern "C" fn cublasGemmStridedBatchedEx(
    handle: cublasHandle_t,
    transa: cublasOperation_t,
    transb: cublasOperation_t,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const c_void,
    A: *const c_void,
    Atype: cudaDataType,
    lda: c_int,
    strideA: c_longlong,
    B: *const c_void,
    Btype: cudaDataType,
    ldb: c_int,
    strideB: c_longlong,
    beta: *const c_void,
    C: *mut c_void,
    Ctype: cudaDataType,
    ldc: c_int,
    strideC: c_longlong,
    batchCount: c_int,
    computeType: cublasComputeType_t,
    _algo: cublasGemmAlgo_t,
) -> cublasStatus_t {
    use cublasComputeType_t as Ct;
    let name = "cublasGemmStridedBatchedEx";
    status((|| {
        // f32 compute (with or without permission for reduced-precision tensor cores): α and β are f32.
        match computeType {
            Ct::CUBLAS_COMPUTE_32F
            | Ct::CUBLAS_COMPUTE_32F_PEDANTIC
            | Ct::CUBLAS_COMPUTE_32F_FAST_16F
            | Ct::CUBLAS_COMPUTE_32F_FAST_16BF
            | Ct::CUBLAS_COMPUTE_32F_FAST_TF32 => {}
            other => {
                fail(
                    CUresult::CUDA_ERROR_NOT_SUPPORTED,
                    format!("{name}: compute type {other:?} is not simulated"),
                );
                return Err(cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED);
            }
        }
        let operand = |ptr: u64,
                       t: cudaDataType,
                       ld: c_int,
                       stride: c_longlong|
         -> Result<Operand, cublasStatus_t> {
            Ok(Operand {
                ptr,
                storage: storage(t, name)?,
                ld: i64::from(ld),
                stride,
            })
        };
        let call = GemmCall {
            trans_a: transpose(transa, name)?,
            trans_b: transpose(transb, name)?,
            m: m.into(),
            n: n.into(),
            k: k.into(),
            // SAFETY: host f32 scalars under f32 compute, by the caller's contract.
            alpha: unsafe { scalar(alpha.cast::<f32>(), name) }?,
            // SAFETY: as above.
            beta: unsafe { scalar(beta.cast::<f32>(), name) }?,
            a: operand(A as u64, Atype, lda, strideA)?,
            b: operand(B as u64, Btype, ldb, strideB)?,
            c: operand(C as u64, Ctype, ldc, strideC)?,
            batch: batchCount.into(),
        };
        submit(handle, call, name)
    })())
}
