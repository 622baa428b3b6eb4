//! Stream operations. Each runs when it is enqueued (a stream's order is its call order, and there is one
//! device), unless its stream is being captured: then it is recorded, with its parameters copied as the driver
//! does, and runs on every `cuGraphLaunch` of the instantiated graph.

use std::sync::Arc;

use cudarc::driver::sys::CUresult;
use gpusim::memory::Fault;
use gpusim::{DeviceMemory, Kernel, LaunchConfig, SimError};

use crate::gemm::{self, GemmCall};
use crate::state::{self, State};

#[derive(Clone)]
pub enum Op {
    Launch {
        kernel: Arc<Kernel>,
        config: LaunchConfig,
        /// The packed parameter buffer, copied at enqueue (capture) time.
        params: Vec<u8>,
    },
    Copy {
        dst: u64,
        src: u64,
        len: usize,
    },
    Memset {
        dst: u64,
        value: u8,
        len: usize,
    },
    Gemm(GemmCall),
}

/// A failed operation: the code the driver returns and the message behind it.
#[derive(Debug, Clone, PartialEq)]
pub struct OpError {
    pub code: CUresult,
    pub message: String,
}

impl OpError {
    pub fn new(code: CUresult, message: impl Into<String>) -> OpError {
        OpError {
            code,
            message: message.into(),
        }
    }

    /// Records the message (see [`state::fail`]) and returns the code.
    pub fn report(self) -> CUresult {
        state::fail(self.code, self.message)
    }
}

/// The driver error code for a simulator failure: bad addresses are `CUDA_ERROR_ILLEGAL_ADDRESS` as on a GPU,
/// other checks `CUDA_ERROR_LAUNCH_FAILED`, bad PTX `CUDA_ERROR_INVALID_PTX`.
pub fn code_of(e: &SimError) -> CUresult {
    match e {
        SimError::OutOfBounds { .. } => CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
        SimError::Misaligned { .. } => CUresult::CUDA_ERROR_MISALIGNED_ADDRESS,
        SimError::Parse { .. } | SimError::UnsupportedInstruction { .. } => {
            CUresult::CUDA_ERROR_INVALID_PTX
        }
        SimError::NoSuchKernel(_) => CUresult::CUDA_ERROR_NOT_FOUND,
        SimError::InvalidLaunch { .. } => CUresult::CUDA_ERROR_INVALID_VALUE,
        _ => CUresult::CUDA_ERROR_LAUNCH_FAILED,
    }
}

pub fn memory_fault(what: &str, address: u64, len: usize, fault: Fault) -> OpError {
    match fault {
        Fault::OutOfBounds(detail) => OpError::new(
            CUresult::CUDA_ERROR_INVALID_VALUE,
            format!("{what}: [0x{address:x}, +{len}) is not inside one allocation: {detail}"),
        ),
        Fault::Uninitialized => OpError::new(
            CUresult::CUDA_ERROR_INVALID_VALUE,
            format!("{what}: [0x{address:x}, +{len}) holds bytes that were never written"),
        ),
    }
}

/// Copies device bytes, keeping "never written" as it was only where the whole source was written.
fn copy(memory: &mut DeviceMemory, dst: u64, src: u64, len: usize) -> Result<(), OpError> {
    let mut bytes = vec![0u8; len];
    memory
        .read(src, &mut bytes, false)
        .map_err(|f| memory_fault("device-to-device copy source", src, len, f))?;
    memory
        .write(dst, &bytes)
        .map_err(|f| memory_fault("device-to-device copy destination", dst, len, f))
}

impl Op {
    pub fn run(&self, memory: &mut DeviceMemory) -> Result<(), OpError> {
        match self {
            Op::Launch {
                kernel,
                config,
                params,
            } => {
                // A panic in the interpreter must not cross the C boundary (it would abort the process).
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    gpusim::launch(kernel, memory, *config, params)
                }));
                match outcome {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(OpError::new(
                        code_of(&e),
                        format!("launch of `{}` failed: {e}", kernel.name),
                    )),
                    Err(_) => Err(OpError::new(
                        CUresult::CUDA_ERROR_LAUNCH_FAILED,
                        format!("the simulator panicked running `{}`", kernel.name),
                    )),
                }
            }
            Op::Copy { dst, src, len } => copy(memory, *dst, *src, *len),
            Op::Memset { dst, value, len } => memory
                .write(*dst, &vec![*value; *len])
                .map_err(|f| memory_fault("memset", *dst, *len, f)),
            Op::Gemm(call) => gemm::run(call, memory),
        }
    }
}

/// Runs `op` on `stream` (a key of [`State::streams`]), or records it there when the stream is being captured.
pub fn enqueue(state: &mut State, stream: usize, op: Op) -> Result<(), OpError> {
    let capture = state
        .streams
        .get_mut(&stream)
        .and_then(|s| s.capture.as_mut());
    match capture {
        Some(capture) => {
            capture.ops.push(op);
            Ok(())
        }
        None => op.run(&mut state.memory),
    }
}
