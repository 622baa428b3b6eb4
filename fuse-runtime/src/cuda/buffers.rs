//! Device buffers in the storage type of the plan: float values as f32, bf16 or f16 (converted on the host on the way
//! in and out), ids as i64, the arena as bytes. Lengths are checked before every copy, since cudarc asserts them.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DeviceRepr, DriverError, ValidAsZeroBits};
use half::{bf16, f16};

use crate::device::Precision;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

pub enum DeviceBuffer {
    F32(CudaSlice<f32>),
    Bf16(CudaSlice<bf16>),
    F16(CudaSlice<f16>),
    I64(CudaSlice<i64>),
    Bytes(CudaSlice<u8>),
}

fn failed(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Cuda {
        message: format!("{what}: {e}"),
    }
}

impl DeviceBuffer {
    /// A zeroed buffer of `numel` elements of a plan value of type `dtype`.
    pub fn zeros(
        stream: &Arc<CudaStream>,
        dtype: DType,
        precision: Precision,
        numel: usize,
    ) -> Result<Self> {
        Self::allocate(stream, dtype, precision, numel, true)
    }

    /// A buffer of `numel` elements left as the allocator gives it: for outputs, which the plan's kernels write
    /// in full before anything reads them (the simulated GPU reports a read of never-written memory, so a gap
    /// in that promise fails `scripts/gpu-sim.sh` instead of being hidden by zeros).
    pub fn uninit(
        stream: &Arc<CudaStream>,
        dtype: DType,
        precision: Precision,
        numel: usize,
    ) -> Result<Self> {
        Self::allocate(stream, dtype, precision, numel, false)
    }

    fn allocate(
        stream: &Arc<CudaStream>,
        dtype: DType,
        precision: Precision,
        numel: usize,
        zeroed: bool,
    ) -> Result<Self> {
        fn slice<T: DeviceRepr + ValidAsZeroBits>(
            stream: &Arc<CudaStream>,
            n: usize,
            zeroed: bool,
        ) -> std::result::Result<CudaSlice<T>, DriverError> {
            if zeroed {
                stream.alloc_zeros(n)
            } else {
                // SAFETY: f32, bf16, f16 and i64 have no invalid bit patterns, and device memory is only ever read
                // through copies and kernels, never as a Rust reference.
                unsafe { stream.alloc(n) }
            }
        }
        // cudarc allocates at least one element: a zero-length allocation is not a valid pointer to launch with.
        let n = numel.max(1);
        let alloc = |e| failed(&format!("allocating {numel} elements on the GPU"), e);
        Ok(match (dtype, precision) {
            (DType::I64, _) => DeviceBuffer::I64(slice(stream, n, zeroed).map_err(alloc)?),
            (_, Precision::F32) => DeviceBuffer::F32(slice(stream, n, zeroed).map_err(alloc)?),
            (_, Precision::Bf16) => DeviceBuffer::Bf16(slice(stream, n, zeroed).map_err(alloc)?),
            (_, Precision::F16) => DeviceBuffer::F16(slice(stream, n, zeroed).map_err(alloc)?),
        })
    }

    /// The arena, left as the allocator gives it: the memory plan writes every slot before a kernel reads it
    /// (checked as for [`DeviceBuffer::uninit`]).
    pub fn bytes(stream: &Arc<CudaStream>, len: usize) -> Result<Self> {
        // SAFETY: as in `uninit`; u8 has no invalid bit patterns.
        let slice = unsafe { stream.alloc::<u8>(len.max(1)) }
            .map_err(|e| failed(&format!("allocating a {len}-byte arena on the GPU"), e))?;
        Ok(DeviceBuffer::Bytes(slice))
    }

    /// A weight, uploaded once.
    pub fn from_tensor(stream: &Arc<CudaStream>, t: &Tensor, precision: Precision) -> Result<Self> {
        let mut buffer = Self::zeros(stream, t.dtype(), precision, t.numel())?;
        buffer.upload(stream, t)?;
        Ok(buffer)
    }

    /// Sets every element to zero (a memset on the stream).
    pub fn zero(&mut self, stream: &Arc<CudaStream>) -> Result<()> {
        let fill = |e| failed("zeroing a GPU buffer", e);
        match self {
            DeviceBuffer::F32(s) => stream.memset_zeros(s).map_err(fill),
            DeviceBuffer::Bf16(s) => stream.memset_zeros(s).map_err(fill),
            DeviceBuffer::F16(s) => stream.memset_zeros(s).map_err(fill),
            DeviceBuffer::I64(s) => stream.memset_zeros(s).map_err(fill),
            DeviceBuffer::Bytes(s) => stream.memset_zeros(s).map_err(fill),
        }
    }

    /// The device address of element 0.
    pub fn ptr(&self, stream: &CudaStream) -> u64 {
        match self {
            DeviceBuffer::F32(s) => s.device_ptr(stream).0,
            DeviceBuffer::Bf16(s) => s.device_ptr(stream).0,
            DeviceBuffer::F16(s) => s.device_ptr(stream).0,
            DeviceBuffer::I64(s) => s.device_ptr(stream).0,
            DeviceBuffer::Bytes(s) => s.device_ptr(stream).0,
        }
    }

    fn len(&self) -> usize {
        match self {
            DeviceBuffer::F32(s) => s.len(),
            DeviceBuffer::Bf16(s) => s.len(),
            DeviceBuffer::F16(s) => s.len(),
            DeviceBuffer::I64(s) => s.len(),
            DeviceBuffer::Bytes(s) => s.len(),
        }
    }

    /// Copies a host tensor in, converting f32 to the storage type.
    pub fn upload(&mut self, stream: &Arc<CudaStream>, t: &Tensor) -> Result<()> {
        if t.numel() > self.len() {
            return Err(failed(
                "uploading a tensor",
                format!("{} elements into a buffer of {}", t.numel(), self.len()),
            ));
        }
        if t.numel() == 0 {
            // An empty input (a cache passed in at a decoder's first step): nothing to copy.
            return Ok(());
        }
        let copy = |e| failed("copying to the GPU", e);
        match (self, t.as_f32(), t.as_i64()) {
            (DeviceBuffer::F32(d), Some(src), _) => stream.memcpy_htod(src, d).map_err(copy),
            (DeviceBuffer::Bf16(d), Some(src), _) => {
                stream.memcpy_htod(&rounded(src, BF16)?, d).map_err(copy)
            }
            (DeviceBuffer::F16(d), Some(src), _) => {
                stream.memcpy_htod(&rounded(src, F16)?, d).map_err(copy)
            }
            (DeviceBuffer::I64(d), _, Some(src)) => stream.memcpy_htod(src, d).map_err(copy),
            _ => Err(failed(
                "uploading a tensor",
                format!("a {} tensor does not fit this buffer", t.dtype()),
            )),
        }
    }

    /// Copies a float buffer out into `out` (exactly its length), converting from the storage type.
    pub fn download(&self, stream: &Arc<CudaStream>, out: &mut [f32]) -> Result<()> {
        if out.is_empty() {
            // An empty output (a dim bound to 0) in a buffer of one element, the least cudarc allocates.
            return Ok(());
        }
        let copy = |e| failed("copying from the GPU", e);
        match self {
            DeviceBuffer::F32(s) if s.len() == out.len() => {
                stream.memcpy_dtoh(s, out).map_err(copy)
            }
            DeviceBuffer::Bf16(s) if s.len() == out.len() => download_half(stream, s, out, BF16),
            DeviceBuffer::F16(s) if s.len() == out.len() => download_half(stream, s, out, F16),
            _ => Err(failed(
                "downloading an output",
                format!("buffer of {} elements for {} values", self.len(), out.len()),
            )),
        }
    }
}

/// A half type's name, its rounding from f32, and its widening back.
type Half<T> = (&'static str, fn(f32) -> T, fn(T) -> f32);

const BF16: Half<bf16> = ("bf16", bf16::from_f32, bf16::to_f32);
const F16: Half<f16> = ("f16", f16::from_f32, f16::to_f32);

/// `src` rounded to the half type; [`Error::OutsideStorageRange`] when a finite value would be stored as ±∞ (read
/// back through the widening): every result it reached would be wrong, and nothing would say so.
fn rounded<T: Copy>(src: &[f32], (storage, round, widen): Half<T>) -> Result<Vec<T>> {
    let v: Vec<T> = src.iter().map(|&x| round(x)).collect();
    let overflow = src
        .iter()
        .zip(&v)
        .find(|&(x, &h)| x.is_finite() && !widen(h).is_finite());
    match overflow {
        Some((&value, _)) => Err(Error::OutsideStorageRange { value, storage }),
        None => Ok(v),
    }
}

/// `s` copied out and widened to f32 into `out` (exactly its length).
fn download_half<T: DeviceRepr + Copy + Default>(
    stream: &Arc<CudaStream>,
    s: &CudaSlice<T>,
    out: &mut [f32],
    (_, _, widen): Half<T>,
) -> Result<()> {
    let mut v = vec![T::default(); s.len()];
    stream
        .memcpy_dtoh(s, &mut v)
        .map_err(|e| failed("copying from the GPU", e))?;
    for (o, x) in out.iter_mut().zip(v) {
        *o = widen(x);
    }
    Ok(())
}
