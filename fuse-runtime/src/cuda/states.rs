//! A session's `#[state]` buffers on a GPU: uploaded from the session's host copy on its first call with a model
//! placed there, then updated in place by the plan's write kernels call after call (a decoder's KV cache stays on
//! the device for a whole generation). The host copy is brought up to date only when something asks for it.

use std::sync::Arc;

use cudarc::driver::CudaStream;

use super::buffers::DeviceBuffer;
use crate::device::Precision;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

pub(crate) struct DeviceStates {
    /// The GPU model these live with (the address of its stream): another model, or the same one moved to another
    /// device, uploads its own.
    pub(crate) owner: usize,
    buffers: Vec<DeviceBuffer>,
    stream: Arc<CudaStream>,
    /// Whether the session's host states hold what these hold; false once a GPU call may have written them.
    pub(crate) host_current: bool,
}

impl DeviceStates {
    /// The host states on the device, stored in `precision` like every other buffer of the model: copied there,
    /// or, when `zeroed` says the host states are zeros (a new or reset session), made as zeros without an upload.
    pub(crate) fn new(
        stream: &Arc<CudaStream>,
        owner: usize,
        host: &[Tensor],
        precision: Precision,
        zeroed: bool,
    ) -> Result<DeviceStates> {
        let buffers = host
            .iter()
            .map(|t| match zeroed {
                true => DeviceBuffer::zeros(stream, t.dtype(), precision, t.numel()),
                false => DeviceBuffer::from_tensor(stream, t, precision),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(DeviceStates {
            owner,
            buffers,
            stream: stream.clone(),
            host_current: true,
        })
    }

    /// The device address of each state, in the session's order.
    pub(crate) fn ptrs(&self) -> Vec<u64> {
        self.buffers.iter().map(|b| b.ptr(&self.stream)).collect()
    }

    /// Zeroes every state on the device (a session starting over keeps its device buffers).
    pub(crate) fn zero(&mut self) -> Result<()> {
        for buffer in &mut self.buffers {
            buffer.zero(&self.stream)?;
        }
        Ok(())
    }

    /// Copies every state into `host` (f32, the same shapes); returns once the copies are complete.
    pub(crate) fn download(&self, host: &mut [Tensor]) -> Result<()> {
        for (buffer, t) in self.buffers.iter().zip(host) {
            let out = t.as_f32_mut().ok_or_else(|| Error::Cuda {
                message: "a session state is not f32".into(),
            })?;
            buffer.download(&self.stream, out)?;
        }
        self.stream.synchronize().map_err(|e| Error::Cuda {
            message: format!("synchronising after downloading a session's states: {e}"),
        })
    }
}
