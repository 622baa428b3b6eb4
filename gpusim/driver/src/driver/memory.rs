//! Device memory: allocations are the simulator's allocation table; copies and memsets are stream operations
//! (host copies run at once, which is what a pageable-memory copy looks like to the host anyway).

use std::ffi::{c_uchar, c_void};

use cudarc::driver::sys::{CUdeviceptr, CUresult, CUstream};
use gpusim::memory::Fault;
use gpusim::DeviceMemory;

use super::{code, put, stream_key, with_state};
use crate::ops::{enqueue, memory_fault, Op};
use crate::state::{fail, State, TOTAL_MEMORY};

fn forbid(state: &mut State, call: &str) -> Result<(), CUresult> {
    state
        .forbid_during_capture(call)
        .map_err(|(c, m)| fail(c, m))
}

/// Host copies cannot be captured here: a graph would have to keep the host pointer, which fuse never does.
fn refuse_if_capturing(state: &State, stream: usize, call: &str) -> Result<(), CUresult> {
    match state.streams.get(&stream).and_then(|s| s.capture.as_ref()) {
        Some(_) => Err(fail(
            CUresult::CUDA_ERROR_NOT_SUPPORTED,
            format!("{call}: host copies in a captured stream are not simulated"),
        )),
        None => Ok(()),
    }
}

/// What an allocation, a free or a host copy checks first: on a stream, that it exists and is not being
/// captured; on none (the synchronous forms), that no capture is under way at all.
fn host_side_allowed(
    state: &mut State,
    stream: Option<CUstream>,
    call: &str,
) -> Result<(), CUresult> {
    match stream {
        Some(s) => stream_key(state, s, call).and_then(|k| refuse_if_capturing(state, k, call)),
        None => forbid(state, call),
    }
}

fn alloc(out: *mut CUdeviceptr, bytes: usize, stream: Option<CUstream>, call: &str) -> CUresult {
    with_state(call, |state| {
        if let Err(c) = host_side_allowed(state, stream, call) {
            return c;
        }
        if bytes as u64 > TOTAL_MEMORY.saturating_sub(state.memory.allocated_bytes()) {
            return fail(
                CUresult::CUDA_ERROR_OUT_OF_MEMORY,
                format!("{call}: {bytes} bytes exceed the simulated device's free memory"),
            );
        }
        match state.memory.alloc(bytes) {
            // SAFETY: the caller passes a valid out-pointer (or null, refused).
            Ok(ptr) => unsafe { put(out, ptr, call) },
            Err(e) => fail(CUresult::CUDA_ERROR_OUT_OF_MEMORY, format!("{call}: {e}")),
        }
    })
}

fn free(ptr: CUdeviceptr, stream: Option<CUstream>, call: &str) -> CUresult {
    with_state(call, |state| {
        if let Err(c) = host_side_allowed(state, stream, call) {
            return c;
        }
        match state.memory.free(ptr) {
            Ok(()) => CUresult::CUDA_SUCCESS,
            Err(e) => fail(CUresult::CUDA_ERROR_INVALID_VALUE, format!("{call}: {e}")),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult {
    alloc(dptr, bytesize, None, "cuMemAlloc_v2")
}

#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(
    dptr: *mut CUdeviceptr,
    bytesize: usize,
    hStream: CUstream,
) -> CUresult {
    alloc(dptr, bytesize, Some(hStream), "cuMemAllocAsync")
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: CUdeviceptr) -> CUresult {
    free(dptr, None, "cuMemFree_v2")
}

#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: CUdeviceptr, hStream: CUstream) -> CUresult {
    free(dptr, Some(hStream), "cuMemFreeAsync")
}

#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> CUresult {
    let call = "cuMemGetInfo_v2";
    with_state(call, |state| {
        let used = state.memory.allocated_bytes();
        // SAFETY: the caller passes valid out-pointers (or null, refused).
        unsafe {
            let r = put(free, TOTAL_MEMORY.saturating_sub(used) as usize, call);
            if r != CUresult::CUDA_SUCCESS {
                return r;
            }
            put(total, TOTAL_MEMORY as usize, call)
        }
    })
}

/// What both directions of a host copy share: the capture and stream checks, nothing to do for 0 bytes, a null
/// host pointer refused; then `copy` on the device memory, a fault reported against `device`.
fn host_copy(
    host: *const c_void,
    device: CUdeviceptr,
    len: usize,
    stream: Option<CUstream>,
    call: &str,
    copy: impl FnOnce(&mut DeviceMemory) -> Result<(), Fault>,
) -> CUresult {
    with_state(call, |state| {
        if let Err(c) = host_side_allowed(state, stream, call) {
            return c;
        }
        if len == 0 {
            return CUresult::CUDA_SUCCESS;
        }
        if host.is_null() {
            return fail(
                CUresult::CUDA_ERROR_INVALID_VALUE,
                format!("{call}: null host pointer"),
            );
        }
        match copy(&mut state.memory) {
            Ok(()) => CUresult::CUDA_SUCCESS,
            Err(f) => memory_fault(call, device, len, f).report(),
        }
    })
}

/// Host → device, at once.
///
/// # Safety
/// `src` must be valid for `len` bytes.
unsafe fn htod(
    dst: CUdeviceptr,
    src: *const c_void,
    len: usize,
    stream: Option<CUstream>,
    call: &str,
) -> CUresult {
    host_copy(src, dst, len, stream, call, |memory| {
        // SAFETY: the caller's contract; `host_copy` refused a null pointer and calls this only for len > 0.
        let data = unsafe { std::slice::from_raw_parts(src.cast::<u8>(), len) };
        memory.write(dst, data)
    })
}

/// Device → host, at once.
///
/// # Safety
/// `dst` must be valid for `len` bytes of writes.
unsafe fn dtoh(
    dst: *mut c_void,
    src: CUdeviceptr,
    len: usize,
    stream: Option<CUstream>,
    call: &str,
) -> CUresult {
    host_copy(dst.cast_const(), src, len, stream, call, |memory| {
        // SAFETY: the caller's contract; `host_copy` refused a null pointer and calls this only for len > 0.
        let out = unsafe { std::slice::from_raw_parts_mut(dst.cast::<u8>(), len) };
        // A download of bytes no copy, memset or kernel ever wrote is a defect the GPU would hide behind garbage.
        memory.read(src, out, true)
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(
    dstDevice: CUdeviceptr,
    srcHost: *const c_void,
    ByteCount: usize,
) -> CUresult {
    // SAFETY: forwarded caller contract.
    unsafe { htod(dstDevice, srcHost, ByteCount, None, "cuMemcpyHtoD_v2") }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dstDevice: CUdeviceptr,
    srcHost: *const c_void,
    ByteCount: usize,
    hStream: CUstream,
) -> CUresult {
    // SAFETY: forwarded caller contract.
    unsafe {
        htod(
            dstDevice,
            srcHost,
            ByteCount,
            Some(hStream),
            "cuMemcpyHtoDAsync_v2",
        )
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(
    dstHost: *mut c_void,
    srcDevice: CUdeviceptr,
    ByteCount: usize,
) -> CUresult {
    // SAFETY: forwarded caller contract.
    unsafe { dtoh(dstHost, srcDevice, ByteCount, None, "cuMemcpyDtoH_v2") }
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dstHost: *mut c_void,
    srcDevice: CUdeviceptr,
    ByteCount: usize,
    hStream: CUstream,
) -> CUresult {
    // SAFETY: forwarded caller contract.
    unsafe {
        dtoh(
            dstHost,
            srcDevice,
            ByteCount,
            Some(hStream),
            "cuMemcpyDtoHAsync_v2",
        )
    }
}

/// A device-side operation on `stream` (`None`: the blocking variant on the default stream).
fn device_op(op: Op, stream: Option<CUstream>, call: &str) -> CUresult {
    with_state(call, |state| {
        let key = match stream {
            Some(s) => stream_key(state, s, call),
            None => forbid(state, call).map(|()| crate::state::DEFAULT_STREAM),
        };
        code(key.and_then(|k| enqueue(state, k, op).map_err(|e| e.report())))
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoD_v2(
    dstDevice: CUdeviceptr,
    srcDevice: CUdeviceptr,
    ByteCount: usize,
) -> CUresult {
    let op = Op::Copy {
        dst: dstDevice,
        src: srcDevice,
        len: ByteCount,
    };
    device_op(op, None, "cuMemcpyDtoD_v2")
}

#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    dstDevice: CUdeviceptr,
    srcDevice: CUdeviceptr,
    ByteCount: usize,
    hStream: CUstream,
) -> CUresult {
    let op = Op::Copy {
        dst: dstDevice,
        src: srcDevice,
        len: ByteCount,
    };
    device_op(op, Some(hStream), "cuMemcpyDtoDAsync_v2")
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8_v2(dstDevice: CUdeviceptr, uc: c_uchar, N: usize) -> CUresult {
    device_op(
        Op::Memset {
            dst: dstDevice,
            value: uc,
            len: N,
        },
        None,
        "cuMemsetD8_v2",
    )
}

#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async(
    dstDevice: CUdeviceptr,
    uc: c_uchar,
    N: usize,
    hStream: CUstream,
) -> CUresult {
    let op = Op::Memset {
        dst: dstDevice,
        value: uc,
        len: N,
    };
    device_op(op, Some(hStream), "cuMemsetD8Async")
}
