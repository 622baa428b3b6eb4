//! The one simulated device: every handle the driver and BLAS stand-ins hand out, behind one `Mutex`, and the
//! messages behind `cuGetErrorString`.
//!
//! Handles (contexts, modules, functions, streams, events, graphs, cuBLAS handles) are small integers cast to
//! the C pointer types, never reused, so a stale handle is `CUDA_ERROR_INVALID_HANDLE`, not someone else's object.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, CStr, CString};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::ThreadId;
use std::time::Instant;

use cudarc::driver::sys::{CUresult, CUstreamCaptureMode};
use gpusim::{DeviceMemory, Kernel, Module};

use crate::ops::Op;

/// The only context: the device's primary context.
pub const PRIMARY_CONTEXT: usize = 0x100;
/// `cudaStreamLegacy` and `cudaStreamPerThread`: both are the default stream here.
const LEGACY_STREAM: usize = 0x1;
const PER_THREAD_STREAM: usize = 0x2;
/// The default stream's key in [`State::streams`].
pub const DEFAULT_STREAM: usize = 0;
const FIRST_HANDLE: usize = 0x1000;

/// What the simulated device presents.
pub const DEVICE_NAME: &str = "gpusim (simulated sm_90)";
/// Memory the device claims to have; allocations are host memory, so this is only what `cuMemGetInfo` reports.
pub const TOTAL_MEMORY: u64 = 16 << 30;
pub const DEFAULT_SHARED_PER_BLOCK: u32 = 48 << 10;
pub const OPTIN_SHARED_PER_BLOCK: u32 = 227 << 10;

pub struct Function {
    pub module: usize,
    pub kernel: Arc<Kernel>,
    /// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`: launches above it fail, as on the GPU.
    pub max_dynamic_shared: u32,
}

/// A stream being captured: its operations go here instead of running.
pub struct Capture {
    pub ops: Vec<Op>,
    pub mode: CUstreamCaptureMode,
    pub thread: ThreadId,
    /// Set when a call that capture forbids was made; `cuStreamEndCapture` then fails with it.
    pub invalidated: Option<String>,
}

#[derive(Default)]
pub struct Stream {
    pub capture: Option<Capture>,
}

pub struct State {
    pub initialised: bool,
    pub memory: DeviceMemory,
    pub modules: HashMap<usize, Arc<Module>>,
    pub functions: HashMap<usize, Function>,
    pub streams: HashMap<usize, Stream>,
    /// When each event was last recorded (`None`: created, never recorded).
    pub events: HashMap<usize, Option<Instant>>,
    /// Captured graphs and their instantiations; both own a copy of the operations.
    pub graphs: HashMap<usize, Arc<Vec<Op>>>,
    pub execs: HashMap<usize, Arc<Vec<Op>>>,
    /// cuBLAS handles and the stream each is bound to.
    pub blas_handles: HashMap<usize, usize>,
    next_handle: usize,
}

impl State {
    fn new() -> State {
        let mut streams = HashMap::new();
        streams.insert(DEFAULT_STREAM, Stream::default());
        State {
            initialised: false,
            memory: DeviceMemory::new(),
            modules: HashMap::new(),
            functions: HashMap::new(),
            streams,
            events: HashMap::new(),
            graphs: HashMap::new(),
            execs: HashMap::new(),
            blas_handles: HashMap::new(),
            next_handle: FIRST_HANDLE,
        }
    }

    pub fn new_handle(&mut self) -> usize {
        self.next_handle += 1;
        self.next_handle
    }

    /// The key of a stream handle, or `None` for one that does not exist.
    pub fn stream_key(&self, handle: usize) -> Option<usize> {
        let key = match handle {
            LEGACY_STREAM | PER_THREAD_STREAM => DEFAULT_STREAM,
            other => other,
        };
        self.streams.contains_key(&key).then_some(key)
    }

    /// Whether a call that capture forbids (a synchronous copy, a synchronisation, an allocation) may run now on
    /// this thread. If not, every capture that the call would disturb is invalidated, as the driver does, and
    /// the error names the call.
    pub fn forbid_during_capture(&mut self, call: &str) -> Result<(), (CUresult, String)> {
        let me = std::thread::current().id();
        let mut hit = false;
        for capture in self.streams.values_mut().filter_map(|s| s.capture.as_mut()) {
            let applies = match capture.mode {
                CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL => true,
                CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL => capture.thread == me,
                CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED => false,
            };
            if applies {
                hit = true;
                capture
                    .invalidated
                    .get_or_insert_with(|| format!("{call} was called during stream capture"));
            }
        }
        if hit {
            Err((
                CUresult::CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
                format!("{call} is not allowed while a stream is being captured (the capture is invalidated)"),
            ))
        } else {
            Ok(())
        }
    }
}

static STATE: OnceLock<Mutex<State>> = OnceLock::new();

pub type MutexGuardState = MutexGuard<'static, State>;

/// The simulator state. A panic while it was held leaves it usable: every operation leaves it consistent.
pub fn lock() -> MutexGuard<'static, State> {
    STATE
        .get_or_init(|| Mutex::new(State::new()))
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

thread_local! {
    /// `cuCtxSetCurrent`'s binding, per thread as in CUDA.
    pub static CURRENT_CONTEXT: Cell<usize> = const { Cell::new(0) };
}

pub fn to_handle<T>(id: usize) -> *mut T {
    id as *mut T
}

pub fn from_handle<T>(handle: *mut T) -> usize {
    handle as usize
}

/// Error texts handed out by `cuGetErrorString`/`cuGetErrorName`; each distinct text is kept for the life of the
/// process (the C API returns pointers that must stay valid), so the set is bounded by the distinct errors.
struct Messages {
    interned: HashSet<&'static CStr>,
    /// The latest detailed message for each error code.
    latest: HashMap<u32, &'static CStr>,
}

static MESSAGES: OnceLock<Mutex<Messages>> = OnceLock::new();

fn messages() -> MutexGuard<'static, Messages> {
    MESSAGES
        .get_or_init(|| {
            Mutex::new(Messages {
                interned: HashSet::new(),
                latest: HashMap::new(),
            })
        })
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A `'static` C string with this text (NULs replaced).
pub fn intern(text: &str) -> *const c_char {
    let c = CString::new(text.replace('\0', " ")).unwrap_or_default();
    let mut m = messages();
    if let Some(found) = m.interned.get(c.as_c_str()) {
        return found.as_ptr();
    }
    let leaked: &'static CStr = Box::leak(c.into_boxed_c_str());
    m.interned.insert(leaked);
    leaked.as_ptr()
}

/// Records `message` as what `cuGetErrorString(code)` returns from now on, prints it to stderr the first time it
/// is seen, and returns `code`.
pub fn fail(code: CUresult, message: impl Into<String>) -> CUresult {
    let message = format!("gpusim: {}", message.into());
    let first_time = {
        let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
        !messages().interned.contains(c.as_c_str())
    };
    if first_time {
        eprintln!("{message}");
    }
    let ptr = intern(&message);
    // SAFETY: `intern` returns a pointer into a leaked, NUL-terminated `CStr`.
    let text = unsafe { CStr::from_ptr(ptr) };
    LATEST_HERE.with(|latest| latest.borrow_mut().insert(code as u32, text));
    messages().latest.insert(code as u32, text);
    code
}

thread_local! {
    /// The latest detailed message for each error code on this thread. A caller reads its error's text on the
    /// thread that got the error, and two threads failing with the same code at once (two tests' launches) must
    /// not be given each other's text, as the process-wide `Messages::latest` alone gave them.
    static LATEST_HERE: RefCell<HashMap<u32, &'static CStr>> = RefCell::new(HashMap::new());
}

/// The latest detailed message recorded for `code`: this thread's, else the process's (an error read on another
/// thread than the one that got it).
pub fn latest_message(code: CUresult) -> Option<*const c_char> {
    let here = LATEST_HERE.with(|latest| latest.borrow().get(&(code as u32)).copied());
    here.or_else(|| messages().latest.get(&(code as u32)).copied())
        .map(|c| c.as_ptr())
}

/// The driver's answer to a call made before `cuInit` (or without `GPUSIM=1`).
pub fn not_initialised(call: &str) -> CUresult {
    fail(
        CUresult::CUDA_ERROR_NOT_INITIALIZED,
        format!("{call}: cuInit has not succeeded (set GPUSIM=1 to use the simulated GPU)"),
    )
}

#[cfg(test)]
mod message_tests {
    use super::*;

    /// Two threads failing with the same code, one after the other, each read their own text back: the second's
    /// failure does not replace the first's (two tests' launches failing at once were given each other's text).
    #[test]
    fn each_thread_reads_the_text_of_its_own_failure() {
        let code = CUresult::CUDA_ERROR_LAUNCH_FAILED;
        let (first_failed, second_failed) = (
            Arc::new(std::sync::Barrier::new(2)),
            Arc::new(std::sync::Barrier::new(2)),
        );
        let text = |ptr: Option<*const c_char>| {
            // SAFETY: `latest_message` returns interned, NUL-terminated, never-freed texts.
            ptr.map(|p| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        };
        let (a1, a2) = (first_failed.clone(), second_failed.clone());
        let first = std::thread::spawn(move || {
            fail(code, "the first thread's launch");
            a1.wait();
            a2.wait();
            text(latest_message(code))
        });
        first_failed.wait();
        let second = std::thread::spawn(move || {
            fail(code, "the second thread's launch");
            text(latest_message(code))
        });
        let second_read = second.join().ok().flatten();
        second_failed.wait();
        let first_read = first.join().ok().flatten();
        assert_eq!(
            first_read.as_deref(),
            Some("gpusim: the first thread's launch")
        );
        assert_eq!(
            second_read.as_deref(),
            Some("gpusim: the second thread's launch")
        );
    }
}
