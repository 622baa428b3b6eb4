//! The state a model keeps between calls (`#[state]` fields, e.g. a decoder's KV cache) belongs to a [`Session`]
//! the caller owns, not to the model: one loaded model serves many sessions at once, each call borrowing its
//! session mutably while the plan's write kernels update the state in place. On a GPU the states move to the
//! device on the session's first call there and stay (`cuda/states.rs`); [`Session::states`] brings them back.

use crate::error::{Error, Result};
use crate::exec::Program;
use crate::tensor::Tensor;

/// The `#[state]` buffers of one model for one stream of calls, zeroed when made. Make it with
/// `model.session(&[("batch", 2)])` (the dims its state shapes name), pass it to every `forward`.
pub struct Session {
    pub(crate) model: &'static str,
    /// The host copy: current unless `device` says otherwise.
    states: Vec<Tensor>,
    /// The host copy is all zeros (a new or reset session): a GPU makes its copy with a memset, not an upload.
    host_zeroed: bool,
    /// The states on a GPU, after a call of a model placed there.
    #[cfg(feature = "cuda")]
    pub(crate) device: Option<crate::cuda::DeviceStates>,
}

impl Session {
    /// Zeroed states of `program`'s shapes at `dims` (every dim of the model, sums derived).
    pub(crate) fn new(model: &'static str, program: &Program, dims: &[usize]) -> Result<Self> {
        let states = program
            .states
            .iter()
            .map(|s| {
                let shape: Vec<usize> = s.dims.iter().map(|m| m.eval(dims)).collect();
                let numel = s
                    .dims
                    .iter()
                    .try_fold(1usize, |acc, m| acc.checked_mul(m.checked_eval(dims)?))
                    .ok_or(Error::OutOfMemory {
                        what: "a state",
                        bytes: None,
                        available: None,
                    })?;
                Tensor::from_f32(&shape, crate::arena::zeroed_f32("a state", numel)?)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Session {
            model,
            states,
            host_zeroed: true,
            #[cfg(feature = "cuda")]
            device: None,
        })
    }

    /// The states, in the order the model declares its `#[state]` fields (sub-models depth first). When the last
    /// call ran on a GPU, they are copied back from it first (an error if that copy fails).
    pub fn states(&mut self) -> Result<&[Tensor]> {
        self.sync_host()?;
        Ok(&self.states)
    }

    /// The host states, current, for a CPU call that will write them: any GPU copy is dropped (it would be
    /// stale), and the next GPU call uploads them again.
    pub(crate) fn host_states_mut(&mut self) -> Result<&mut [Tensor]> {
        self.sync_host()?;
        #[cfg(feature = "cuda")]
        {
            self.device = None;
        }
        self.host_zeroed = false;
        Ok(&mut self.states)
    }

    /// The host copy as it is, current or not: for uploading it (when it is current) and for its shapes.
    #[cfg(feature = "cuda")]
    pub(crate) fn host_states(&self) -> &[Tensor] {
        &self.states
    }

    /// Whether the host copy is known to be all zeros.
    #[cfg(feature = "cuda")]
    pub(crate) fn host_zeroed(&self) -> bool {
        self.host_zeroed
    }

    /// Brings the host copy up to date with the GPU copy, if a GPU call has written it since.
    pub(crate) fn sync_host(&mut self) -> Result<()> {
        #[cfg(feature = "cuda")]
        if let Some(device) = &mut self.device {
            if !device.host_current {
                self.host_zeroed = false;
                device.download(&mut self.states)?;
                device.host_current = true;
            }
        }
        Ok(())
    }

    /// Bytes the states hold.
    pub fn bytes(&self) -> usize {
        self.states.iter().map(|t| t.numel() * 4).sum()
    }

    /// Zeroes every state: the session starts over (a new prompt) without allocating. A session whose states are
    /// on a GPU is zeroed there, and its host copy refreshed only if asked for; should zeroing there fail, the GPU
    /// copy is dropped and the host's is zeroed instead.
    pub fn reset(&mut self) {
        #[cfg(feature = "cuda")]
        if let Some(device) = &mut self.device {
            if device.zero().is_ok() {
                device.host_current = false;
                return;
            }
            self.device = None;
        }
        for t in &mut self.states {
            if let Some(v) = t.as_f32_mut() {
                v.fill(0.0);
            }
        }
        self.host_zeroed = true;
    }

    /// A copy of this session and its states, e.g. to run two plans from the same state (on the host: a GPU call
    /// with the copy uploads it).
    pub fn try_clone(&mut self) -> Result<Session> {
        self.sync_host()?;
        let states = self
            .states
            .iter()
            .map(|t| {
                let data = t.as_f32().map(<[f32]>::to_vec).unwrap_or_default();
                Tensor::from_f32(t.shape(), data)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Session {
            model: self.model,
            states,
            host_zeroed: self.host_zeroed,
            #[cfg(feature = "cuda")]
            device: None,
        })
    }

    /// Checks that this session belongs to `program`'s model and that its states have the shapes this call's dims
    /// give them.
    pub(crate) fn check(&self, program: &Program, dims: &[usize]) -> Result<()> {
        if self.model != program.model || self.states.len() != program.states.len() {
            return Err(Error::SessionMismatch {
                model: program.model.into(),
                session_model: self.model.into(),
            });
        }
        for (spec, t) in program.states.iter().zip(&self.states) {
            let expected: Vec<usize> = spec.dims.iter().map(|m| m.eval(dims)).collect();
            if t.shape() != expected.as_slice() {
                return Err(Error::StateShape {
                    state: spec.name.clone(),
                    expected,
                    found: t.shape().to_vec(),
                });
            }
        }
        Ok(())
    }
}
