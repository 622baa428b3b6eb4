//! The exported driver API (`libcuda.so`). Every function has exactly the signature cudarc's `driver::sys`
//! bindings (CUDA 13.0) give it; every failure is a `CUresult` with a message behind `cuGetErrorString`.

pub mod device;
pub mod memory;
pub mod module;
pub mod stream;

use cudarc::driver::sys::{CUresult, CUstream};

use crate::state::{fail, from_handle, lock, not_initialised, State};

/// The state, or the `CUDA_ERROR_NOT_INITIALIZED` to return when `cuInit` has not succeeded.
fn ready(call: &str) -> Result<std::sync::MutexGuard<'static, State>, CUresult> {
    let state = lock();
    if state.initialised {
        Ok(state)
    } else {
        Err(not_initialised(call))
    }
}

/// Runs an exported function's body on the state, or returns `CUDA_ERROR_NOT_INITIALIZED` before `cuInit`.
fn with_state(call: &str, body: impl FnOnce(&mut State) -> CUresult) -> CUresult {
    match ready(call) {
        Ok(mut state) => body(&mut state),
        Err(c) => c,
    }
}

/// [`with_state`] for a body that acts on a stream: also `CUDA_ERROR_INVALID_HANDLE` for a stream that does not
/// exist; the body gets the stream's key.
fn with_stream(
    call: &str,
    stream: CUstream,
    body: impl FnOnce(&mut State, usize) -> CUresult,
) -> CUresult {
    with_state(call, |state| match stream_key(state, stream, call) {
        Ok(key) => body(state, key),
        Err(c) => c,
    })
}

/// The key of a stream handle, or `CUDA_ERROR_INVALID_HANDLE` naming the call.
fn stream_key(state: &State, stream: CUstream, call: &str) -> Result<usize, CUresult> {
    let handle = from_handle(stream);
    state.stream_key(handle).ok_or_else(|| {
        fail(
            CUresult::CUDA_ERROR_INVALID_HANDLE,
            format!("{call}: stream 0x{handle:x} does not exist"),
        )
    })
}

/// Writes `value` through an out-pointer, refusing a null one.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
unsafe fn put<T>(out: *mut T, value: T, call: &str) -> CUresult {
    if out.is_null() {
        return fail(
            CUresult::CUDA_ERROR_INVALID_VALUE,
            format!("{call}: null output pointer"),
        );
    }
    // SAFETY: non-null, and valid by the caller's contract.
    unsafe { out.write(value) };
    CUresult::CUDA_SUCCESS
}

/// Turns a `Result` of an exported function's body into its return code.
fn code(r: Result<(), CUresult>) -> CUresult {
    match r {
        Ok(()) => CUresult::CUDA_SUCCESS,
        Err(c) => c,
    }
}
