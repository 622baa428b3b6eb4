//! Initialisation, the one device, the primary context and error strings.

use std::ffi::{c_char, c_int, c_uint};

use cudarc::driver::sys::{CUcontext, CUdevice, CUdevice_attribute, CUresult, CUuuid};

use super::{code, put, ready};
use crate::fatbin::DEVICE_ARCH;
use crate::state::{
    self, fail, from_handle, intern, lock, to_handle, CURRENT_CONTEXT, DEFAULT_SHARED_PER_BLOCK,
    DEVICE_NAME, OPTIN_SHARED_PER_BLOCK, PRIMARY_CONTEXT, TOTAL_MEMORY,
};

/// The driver version reported: CUDA 13.0, what the PyPI nvcc and NVRTC are.
const DRIVER_VERSION: c_int = 13000;

fn check_device(dev: CUdevice, call: &str) -> Result<(), CUresult> {
    if dev == 0 {
        Ok(())
    } else {
        Err(fail(
            CUresult::CUDA_ERROR_INVALID_DEVICE,
            format!("{call}: device {dev} does not exist (the simulator has device 0 only)"),
        ))
    }
}

/// Succeeds only when `GPUSIM=1` is set, so this library is never taken for a GPU by accident.
#[no_mangle]
pub unsafe extern "C" fn cuInit(_Flags: c_uint) -> CUresult {
    if std::env::var("GPUSIM").as_deref() != Ok("1") {
        return fail(
            CUresult::CUDA_ERROR_NO_DEVICE,
            "this libcuda.so is the gpusim simulator; set GPUSIM=1 to use it",
        );
    }
    lock().initialised = true;
    CUresult::CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(driverVersion: *mut c_int) -> CUresult {
    // SAFETY: the caller passes a valid out-pointer (or null, refused).
    unsafe { put(driverVersion, DRIVER_VERSION, "cuDriverGetVersion") }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> CUresult {
    if let Err(c) = ready("cuDeviceGetCount") {
        return c;
    }
    // SAFETY: as in cuDriverGetVersion.
    unsafe { put(count, 1, "cuDeviceGetCount") }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut CUdevice, ordinal: c_int) -> CUresult {
    if let Err(c) = ready("cuDeviceGet").and_then(|_| check_device(ordinal, "cuDeviceGet")) {
        return c;
    }
    // SAFETY: as in cuDriverGetVersion.
    unsafe { put(device, 0, "cuDeviceGet") }
}

/// The attributes of an H100-like sm_90 part that cudarc and fuse may ask for; any other is a named error
/// rather than an invented value.
fn attribute(a: CUdevice_attribute) -> Option<c_int> {
    use CUdevice_attribute as A;
    Some(match a {
        A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR => (DEVICE_ARCH / 10) as c_int,
        A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR => (DEVICE_ARCH % 10) as c_int,
        A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT => 132,
        A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK => DEFAULT_SHARED_PER_BLOCK as c_int,
        A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN => OPTIN_SHARED_PER_BLOCK as c_int,
        A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR => 228 << 10,
        A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK => 64 << 10,
        A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR => 64 << 10,
        A::CU_DEVICE_ATTRIBUTE_WARP_SIZE => 32,
        A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK => 1024,
        A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR => 2048,
        A::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR => 32,
        A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X | A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y => 1024,
        A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z => 64,
        A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X => i32::MAX,
        A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y | A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z => 65535,
        A::CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY => 64 << 10,
        A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE => 50 << 20,
        A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING => 1,
        A::CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS => 1,
        A::CU_DEVICE_ATTRIBUTE_INTEGRATED => 0,
        A::CU_DEVICE_ATTRIBUTE_ECC_ENABLED => 0,
        A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID
        | A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID
        | A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID => 0,
        // Stream-ordered allocation is not offered: cudarc then uses cuMemAlloc/cuMemFree, which the
        // simulator runs at once.
        A::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED => 0,
        A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY => 0,
        _ => return None,
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    pi: *mut c_int,
    attrib: CUdevice_attribute,
    dev: CUdevice,
) -> CUresult {
    let call = "cuDeviceGetAttribute";
    if let Err(c) = ready(call).and_then(|_| check_device(dev, call)) {
        return c;
    }
    match attribute(attrib) {
        // SAFETY: as in cuDriverGetVersion.
        Some(v) => unsafe { put(pi, v, call) },
        None => fail(
            CUresult::CUDA_ERROR_NOT_SUPPORTED,
            format!("{call}: the simulator does not model {attrib:?}"),
        ),
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult {
    let call = "cuDeviceGetName";
    if let Err(c) = ready(call).and_then(|_| check_device(dev, call)) {
        return c;
    }
    if name.is_null() || len <= 0 {
        return fail(
            CUresult::CUDA_ERROR_INVALID_VALUE,
            format!("{call}: no buffer"),
        );
    }
    let bytes = DEVICE_NAME.as_bytes();
    let n = bytes.len().min(len as usize - 1);
    // SAFETY: `name` holds `len` bytes (the caller's contract); n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), name.cast::<u8>(), n);
        name.add(n).write(0);
    }
    CUresult::CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: CUdevice) -> CUresult {
    let call = "cuDeviceTotalMem_v2";
    if let Err(c) = ready(call).and_then(|_| check_device(dev, call)) {
        return c;
    }
    // SAFETY: as in cuDriverGetVersion.
    unsafe { put(bytes, TOTAL_MEMORY as usize, call) }
}

#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut CUuuid, dev: CUdevice) -> CUresult {
    let call = "cuDeviceGetUuid_v2";
    if let Err(c) = ready(call).and_then(|_| check_device(dev, call)) {
        return c;
    }
    let mut bytes = [0 as c_char; 16];
    for (b, s) in bytes.iter_mut().zip(b"gpusim-sm90-dev0") {
        *b = *s as c_char;
    }
    // SAFETY: as in cuDriverGetVersion.
    unsafe { put(uuid, CUuuid { bytes }, call) }
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: CUdevice) -> CUresult {
    let call = "cuDevicePrimaryCtxRetain";
    if let Err(c) = ready(call).and_then(|_| check_device(dev, call)) {
        return c;
    }
    // SAFETY: as in cuDriverGetVersion.
    unsafe { put(pctx, to_handle(PRIMARY_CONTEXT), call) }
}

#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: CUdevice) -> CUresult {
    let call = "cuDevicePrimaryCtxRelease_v2";
    code(ready(call).and_then(|_| check_device(dev, call)))
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut CUcontext) -> CUresult {
    if let Err(c) = ready("cuCtxGetCurrent") {
        return c;
    }
    let current = CURRENT_CONTEXT.with(|c| c.get());
    // SAFETY: as in cuDriverGetVersion.
    unsafe { put(pctx, to_handle(current), "cuCtxGetCurrent") }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> CUresult {
    let call = "cuCtxSetCurrent";
    if let Err(c) = ready(call) {
        return c;
    }
    let id = from_handle(ctx);
    if id != 0 && id != PRIMARY_CONTEXT {
        return fail(
            CUresult::CUDA_ERROR_INVALID_CONTEXT,
            format!("{call}: context 0x{id:x} does not exist"),
        );
    }
    CURRENT_CONTEXT.with(|c| c.set(id));
    CUresult::CUDA_SUCCESS
}

/// Everything has already run (operations run at enqueue); only capture rules apply.
#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> CUresult {
    let call = "cuCtxSynchronize";
    match ready(call) {
        Ok(mut state) => match state.forbid_during_capture(call) {
            Ok(()) => CUresult::CUDA_SUCCESS,
            Err((c, m)) => fail(c, m),
        },
        Err(c) => c,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(
    leastPriority: *mut c_int,
    greatestPriority: *mut c_int,
) -> CUresult {
    if let Err(c) = ready("cuCtxGetStreamPriorityRange") {
        return c;
    }
    // SAFETY: null is allowed for either; otherwise valid by the caller's contract.
    unsafe {
        if !leastPriority.is_null() {
            leastPriority.write(0);
        }
        if !greatestPriority.is_null() {
            greatestPriority.write(-5);
        }
    }
    CUresult::CUDA_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: CUresult, pStr: *mut *const c_char) -> CUresult {
    let name = intern(&format!("{error:?}"));
    // SAFETY: as in cuDriverGetVersion.
    unsafe { put(pStr, name, "cuGetErrorName") }
}

/// The latest detailed message the simulator recorded for this code (naming the call, kernel, thread and
/// address), else the code's name.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: CUresult, pStr: *mut *const c_char) -> CUresult {
    let text =
        state::latest_message(error).unwrap_or_else(|| intern(&format!("{error:?} (gpusim)")));
    // SAFETY: as in cuDriverGetVersion.
    unsafe { put(pStr, text, "cuGetErrorString") }
}
