//! Modules (PTX text or fatbins), function lookup and attributes, and `cuLaunchKernel`.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::Arc;

use cudarc::driver::sys::{
    CUfunc_cache, CUfunction, CUfunction_attribute, CUmodule, CUresult, CUstream,
};
use gpusim::{LaunchConfig, Module};

use super::{code, put, ready, stream_key, with_state};
use crate::fatbin::{self, FATBIN_MAGIC, FILE_HEADER_BYTES, WRAPPER_MAGIC};
use crate::ops::{code_of, enqueue, Op};
use crate::state::{
    fail, from_handle, to_handle, Function, DEFAULT_SHARED_PER_BLOCK, OPTIN_SHARED_PER_BLOCK,
};

const ELF_MAGIC: u32 = 0x464c_457f;

/// The PTX text behind a `cuModuleLoadData` image: NUL-terminated PTX, a fatbin, or a fatbin wrapper.
///
/// # Safety
/// `image` must point at one of those, as the driver API requires.
unsafe fn ptx_of(image: *const c_void) -> Result<String, (CUresult, String)> {
    if image.is_null() {
        return Err((CUresult::CUDA_ERROR_INVALID_VALUE, "null image".into()));
    }
    // SAFETY: every image kind starts with at least 4 readable bytes (PTX text: ".ver" or a comment).
    let magic = unsafe { image.cast::<u32>().read_unaligned() };
    match magic {
        WRAPPER_MAGIC => {
            // struct { int magic; int version; const unsigned long long *data; void *filename_or_fatbins; }
            // SAFETY: a wrapper holds its data pointer at byte 8.
            let data = unsafe {
                image
                    .cast::<u8>()
                    .add(8)
                    .cast::<*const c_void>()
                    .read_unaligned()
            };
            // SAFETY: the wrapper's data is a fatbin.
            unsafe { ptx_of(data) }
        }
        FATBIN_MAGIC => {
            let mut header = [0u8; FILE_HEADER_BYTES];
            // SAFETY: a fatbin starts with its 16-byte file header.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    image.cast::<u8>(),
                    header.as_mut_ptr(),
                    FILE_HEADER_BYTES,
                )
            };
            let len = fatbin::total_len(&header).unwrap_or(FILE_HEADER_BYTES);
            // SAFETY: the header announces `len` bytes in total.
            let bytes = unsafe { std::slice::from_raw_parts(image.cast::<u8>(), len) };
            fatbin::extract_ptx(bytes)
                .map_err(|e| (CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU, e.to_string()))
        }
        ELF_MAGIC => Err((
            CUresult::CUDA_ERROR_NO_BINARY_FOR_GPU,
            "a cubin (SASS): the simulator runs PTX only".into(),
        )),
        _ => {
            // SAFETY: PTX text is NUL-terminated.
            let text = unsafe { CStr::from_ptr(image.cast::<c_char>()) };
            text.to_str().map(str::to_string).map_err(|e| {
                (
                    CUresult::CUDA_ERROR_INVALID_IMAGE,
                    format!("PTX is not UTF-8: {e}"),
                )
            })
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut CUmodule, image: *const c_void) -> CUresult {
    let call = "cuModuleLoadData";
    if let Err(c) = ready(call) {
        return c;
    }
    // SAFETY: the caller's contract.
    let ptx = match unsafe { ptx_of(image) } {
        Ok(p) => p,
        Err((c, m)) => return fail(c, format!("{call}: {m}")),
    };
    let parsed = std::panic::catch_unwind(|| Module::from_ptx(&ptx));
    let decoded = match parsed {
        Ok(Ok(m)) => m,
        Ok(Err(e)) => return fail(code_of(&e), format!("{call}: {e}")),
        Err(_) => {
            return fail(
                CUresult::CUDA_ERROR_INVALID_PTX,
                format!("{call}: the PTX parser panicked"),
            )
        }
    };
    with_state(call, |state| {
        let id = state.new_handle();
        state.modules.insert(id, Arc::new(decoded));
        // SAFETY: the caller passes a valid out-pointer (or null, refused).
        unsafe { put(module, to_handle(id), call) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleUnload(hmod: CUmodule) -> CUresult {
    let call = "cuModuleUnload";
    with_state(call, |state| {
        let id = from_handle(hmod);
        if state.modules.remove(&id).is_none() {
            return fail(
                CUresult::CUDA_ERROR_INVALID_HANDLE,
                format!("{call}: module 0x{id:x} does not exist"),
            );
        }
        state.functions.retain(|_, f| f.module != id);
        CUresult::CUDA_SUCCESS
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    hfunc: *mut CUfunction,
    hmod: CUmodule,
    name: *const c_char,
) -> CUresult {
    let call = "cuModuleGetFunction";
    with_state(call, |state| {
        if name.is_null() {
            return fail(
                CUresult::CUDA_ERROR_INVALID_VALUE,
                format!("{call}: null name"),
            );
        }
        // SAFETY: a NUL-terminated name, by the caller's contract.
        let name = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        let id = from_handle(hmod);
        let Some(module) = state.modules.get(&id) else {
            return fail(
                CUresult::CUDA_ERROR_INVALID_HANDLE,
                format!("{call}: module 0x{id:x} does not exist"),
            );
        };
        let kernel = match module.kernel(&name) {
            Ok(k) => k,
            Err(e) => return fail(CUresult::CUDA_ERROR_NOT_FOUND, format!("{call}: {e}")),
        };
        let max_dynamic_shared =
            DEFAULT_SHARED_PER_BLOCK.saturating_sub(kernel.static_shared_bytes);
        let f = state.new_handle();
        state.functions.insert(
            f,
            Function {
                module: id,
                kernel,
                max_dynamic_shared,
            },
        );
        // SAFETY: as above.
        unsafe { put(hfunc, to_handle(f), call) }
    })
}

fn function<'s>(
    state: &'s mut crate::state::State,
    f: CUfunction,
    call: &str,
) -> Result<&'s mut Function, CUresult> {
    let id = from_handle(f);
    state.functions.get_mut(&id).ok_or_else(|| {
        fail(
            CUresult::CUDA_ERROR_INVALID_HANDLE,
            format!("{call}: function 0x{id:x} does not exist"),
        )
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncGetAttribute(
    pi: *mut c_int,
    attrib: CUfunction_attribute,
    hfunc: CUfunction,
) -> CUresult {
    use CUfunction_attribute as A;
    let call = "cuFuncGetAttribute";
    with_state(call, |state| {
        let f = match function(state, hfunc, call) {
            Ok(f) => f,
            Err(c) => return c,
        };
        let value = match attrib {
            A::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK => 1024,
            A::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES => f.kernel.static_shared_bytes as c_int,
            A::CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES | A::CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES => 0,
            // Registers are not allocated by the simulator; this is what fits 1024 threads in 64 K.
            A::CU_FUNC_ATTRIBUTE_NUM_REGS => 64,
            A::CU_FUNC_ATTRIBUTE_PTX_VERSION | A::CU_FUNC_ATTRIBUTE_BINARY_VERSION => 90,
            A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES => f.max_dynamic_shared as c_int,
            other => {
                return fail(
                    CUresult::CUDA_ERROR_NOT_SUPPORTED,
                    format!("{call}: the simulator does not model {other:?}"),
                )
            }
        };
        // SAFETY: the caller passes a valid out-pointer (or null, refused).
        unsafe { put(pi, value, call) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuFuncSetAttribute(
    hfunc: CUfunction,
    attrib: CUfunction_attribute,
    value: c_int,
) -> CUresult {
    use CUfunction_attribute as A;
    let call = "cuFuncSetAttribute";
    with_state(call, |state| {
        let f = match function(state, hfunc, call) {
            Ok(f) => f,
            Err(c) => return c,
        };
        match attrib {
            A::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES => {
                let limit = OPTIN_SHARED_PER_BLOCK.saturating_sub(f.kernel.static_shared_bytes);
                match u32::try_from(value) {
                    Ok(v) if v <= limit => {
                        f.max_dynamic_shared = v;
                        CUresult::CUDA_SUCCESS
                    }
                    _ => fail(
                        CUresult::CUDA_ERROR_INVALID_VALUE,
                        format!(
                            "{call}: {value} bytes of dynamic shared memory for `{}` exceed the {limit} left by its \
                             static shared memory under the 227 KiB opt-in limit",
                            f.kernel.name
                        ),
                    ),
                }
            }
            // A hint only.
            A::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT => CUresult::CUDA_SUCCESS,
            other => fail(
                CUresult::CUDA_ERROR_NOT_SUPPORTED,
                format!("{call}: the simulator does not model setting {other:?}"),
            ),
        }
    })
}

/// A hint only.
#[no_mangle]
pub unsafe extern "C" fn cuFuncSetCacheConfig(
    hfunc: CUfunction,
    _config: CUfunc_cache,
) -> CUresult {
    let call = "cuFuncSetCacheConfig";
    with_state(call, |state| code(function(state, hfunc, call).map(drop)))
}

/// The launch limits an sm_90 driver enforces before running anything.
fn check_launch(f: &Function, grid: [u32; 3], block: [u32; 3], shared: u32) -> Result<(), String> {
    let name = &f.kernel.name;
    if grid.contains(&0) || block.contains(&0) {
        return Err(format!(
            "`{name}`: grid {grid:?} or block {block:?} has a zero dimension"
        ));
    }
    let threads = u64::from(block[0]) * u64::from(block[1]) * u64::from(block[2]);
    if threads > 1024 || block[0] > 1024 || block[1] > 1024 || block[2] > 64 {
        return Err(format!(
            "`{name}`: block {block:?} exceeds 1024 threads or (1024, 1024, 64)"
        ));
    }
    if grid[0] > i32::MAX as u32 || grid[1] > 65535 || grid[2] > 65535 {
        return Err(format!(
            "`{name}`: grid {grid:?} exceeds (2^31-1, 65535, 65535)"
        ));
    }
    if shared > f.max_dynamic_shared {
        return Err(format!(
            "`{name}`: {shared} bytes of dynamic shared memory exceed its limit of {} (raise it with \
             cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES))",
            f.max_dynamic_shared
        ));
    }
    Ok(())
}

/// The packed parameter buffer `gpusim::launch` takes, from `kernelParams` (one pointer per parameter).
///
/// # Safety
/// `params` must hold one valid pointer per kernel parameter, each to a value of that parameter's size.
unsafe fn pack(f: &Function, params: *mut *mut c_void) -> Result<Vec<u8>, String> {
    let infos = &f.kernel.params;
    let len = infos
        .iter()
        .map(|p| (p.offset + p.size) as usize)
        .max()
        .unwrap_or(0);
    let mut packed = vec![0u8; len];
    if infos.is_empty() {
        return Ok(packed);
    }
    if params.is_null() {
        return Err(format!(
            "`{}` takes {} parameters; kernelParams is null",
            f.kernel.name,
            infos.len()
        ));
    }
    for (i, p) in infos.iter().enumerate() {
        // SAFETY: the caller's contract: one pointer per parameter.
        let value = unsafe { *params.add(i) };
        if value.is_null() {
            return Err(format!(
                "`{}`: kernelParams[{i}] (`{}`) is null",
                f.kernel.name, p.name
            ));
        }
        let at = p.offset as usize;
        // SAFETY: the caller's contract: the value has the parameter's size.
        unsafe {
            std::ptr::copy_nonoverlapping(
                value.cast::<u8>(),
                packed[at..].as_mut_ptr(),
                p.size as usize,
            )
        };
    }
    Ok(packed)
}

#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernel(
    f: CUfunction,
    gridDimX: c_uint,
    gridDimY: c_uint,
    gridDimZ: c_uint,
    blockDimX: c_uint,
    blockDimY: c_uint,
    blockDimZ: c_uint,
    sharedMemBytes: c_uint,
    hStream: CUstream,
    kernelParams: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CUresult {
    let call = "cuLaunchKernel";
    with_state(call, |state| {
        let stream = match stream_key(state, hStream, call) {
            Ok(s) => s,
            Err(c) => return c,
        };
        if !extra.is_null() {
            return fail(
                CUresult::CUDA_ERROR_NOT_SUPPORTED,
                format!("{call}: the `extra` argument is not simulated"),
            );
        }
        let func = match function(state, f, call) {
            Ok(func) => func,
            Err(c) => return c,
        };
        let grid = [gridDimX, gridDimY, gridDimZ];
        let block = [blockDimX, blockDimY, blockDimZ];
        if let Err(m) = check_launch(func, grid, block, sharedMemBytes) {
            return fail(CUresult::CUDA_ERROR_INVALID_VALUE, format!("{call}: {m}"));
        }
        // SAFETY: the caller's contract.
        let params = match unsafe { pack(func, kernelParams) } {
            Ok(p) => p,
            Err(m) => return fail(CUresult::CUDA_ERROR_INVALID_VALUE, format!("{call}: {m}")),
        };
        let op = Op::Launch {
            kernel: func.kernel.clone(),
            config: LaunchConfig {
                grid,
                block,
                dynamic_shared_bytes: sharedMemBytes,
            },
            params,
        };
        code(enqueue(state, stream, op).map_err(|e| e.report()))
    })
}
