//! A plain host tensor: a shape and a contiguous row-major buffer.
//!
//! Generated models take and return these; they are deliberately dumb (no strides, no views) because the
//! compiler decides all layouts at build time and only needs owned, contiguous data at the boundary.

use std::fmt;

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{Error, Result};

/// Element type of a [`Tensor`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    I64,
}

impl DType {
    /// The lower-case name used in error messages and generated code (`"f32"`, `"i64"`).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::I64 => "i64",
        }
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::I64 => 8,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The owned element buffer of a [`Tensor`].
#[derive(Clone, Debug, PartialEq)]
pub enum TensorData {
    F32(Vec<f32>),
    I64(Vec<i64>),
}

/// A contiguous, row-major host tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    shape: Vec<usize>,
    data: TensorData,
}

/// Number of elements of `shape`, or `None` when the product overflows `usize`.
fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

fn check_len(shape: &[usize], len: usize) -> Result<()> {
    match checked_numel(shape) {
        Some(n) if n == len => Ok(()),
        Some(n) => Err(Error::TensorData {
            expected: n,
            found: len,
        }),
        None => Err(Error::TensorData {
            expected: usize::MAX,
            found: len,
        }),
    }
}

/// `n` standard-normal samples from `rng` by Box–Muller.
///
/// Written out here instead of using `rand_distr` so the stream of values is fixed by this code alone: seeds in
/// tests and benchmarks must give the same numbers on every platform and every dependency version.
pub(crate) fn normal_samples(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    // Uniform in (0, 1]: 24 random bits, offset by one so ln never sees 0.
    fn unit(rng: &mut ChaCha8Rng) -> f64 {
        f64::from((rng.next_u32() >> 8) + 1) * (1.0 / 16_777_216.0)
    }
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let r = (-2.0 * unit(rng).ln()).sqrt();
        let theta = std::f64::consts::TAU * unit(rng);
        out.push((r * theta.cos()) as f32);
        if out.len() < n {
            out.push((r * theta.sin()) as f32);
        }
    }
    out
}

impl Tensor {
    /// An f32 tensor; fails with [`Error::TensorData`] when `data.len()` is not the product of `shape`.
    pub fn from_f32(shape: &[usize], data: Vec<f32>) -> Result<Tensor> {
        check_len(shape, data.len())?;
        Ok(Tensor {
            shape: shape.to_vec(),
            data: TensorData::F32(data),
        })
    }

    /// An i64 tensor (token ids); fails with [`Error::TensorData`] when `data.len()` is not the product of `shape`.
    pub fn from_i64(shape: &[usize], data: Vec<i64>) -> Result<Tensor> {
        check_len(shape, data.len())?;
        Ok(Tensor {
            shape: shape.to_vec(),
            data: TensorData::I64(data),
        })
    }

    /// For callers that built `data` from the shape itself, so the length cannot be wrong.
    pub(crate) fn f32_from_shape(shape: &[usize], data: Vec<f32>) -> Tensor {
        debug_assert_eq!(checked_numel(shape), Some(data.len()));
        Tensor {
            shape: shape.to_vec(),
            data: TensorData::F32(data),
        }
    }

    /// An f32 tensor of zeros.
    ///
    /// # Panics
    /// If the number of elements overflows `usize` (no such buffer could be allocated anyway).
    pub fn zeros(shape: &[usize]) -> Tensor {
        let n = checked_numel(shape).unwrap_or(usize::MAX);
        Tensor {
            shape: shape.to_vec(),
            data: TensorData::F32(vec![0.0; n]),
        }
    }

    /// Standard-normal f32 values from a ChaCha8 stream seeded with `seed`; the same on every platform.
    pub fn randn(shape: &[usize], seed: u64) -> Tensor {
        let n = checked_numel(shape).unwrap_or(usize::MAX);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        Tensor {
            shape: shape.to_vec(),
            data: TensorData::F32(normal_samples(&mut rng, n)),
        }
    }

    /// Uniformly random i64 ids in `0..vocab`, for feeding embedding models in tests and benchmarks.
    ///
    /// # Panics
    /// If `vocab < 1`: there is no id to draw.
    pub fn uniform_ids(shape: &[usize], vocab: i64, seed: u64) -> Tensor {
        assert!(vocab >= 1, "uniform_ids needs vocab >= 1, got {vocab}");
        let n = checked_numel(shape).unwrap_or(usize::MAX);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let ids = (0..n).map(|_| rng.gen_range(0..vocab)).collect();
        Tensor {
            shape: shape.to_vec(),
            data: TensorData::I64(ids),
        }
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn dtype(&self) -> DType {
        match self.data {
            TensorData::F32(_) => DType::F32,
            TensorData::I64(_) => DType::I64,
        }
    }

    pub fn numel(&self) -> usize {
        match &self.data {
            TensorData::F32(v) => v.len(),
            TensorData::I64(v) => v.len(),
        }
    }

    pub fn data(&self) -> &TensorData {
        &self.data
    }

    pub fn into_data(self) -> TensorData {
        self.data
    }

    /// Start of the element buffer, for the executor's buffer table.
    pub(crate) fn data_ptr(&self) -> *const u8 {
        match &self.data {
            TensorData::F32(v) => v.as_ptr() as *const u8,
            TensorData::I64(v) => v.as_ptr() as *const u8,
        }
    }

    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            TensorData::F32(v) => Some(v),
            TensorData::I64(_) => None,
        }
    }

    pub fn as_f32_mut(&mut self) -> Option<&mut [f32]> {
        match &mut self.data {
            TensorData::F32(v) => Some(v),
            TensorData::I64(_) => None,
        }
    }

    pub fn as_i64(&self) -> Option<&[i64]> {
        match &self.data {
            TensorData::I64(v) => Some(v),
            TensorData::F32(_) => None,
        }
    }

    /// The values as f32 (ids are converted, losing precision above 2^24).
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match &self.data {
            TensorData::F32(v) => v.clone(),
            TensorData::I64(v) => v.iter().map(|&x| x as f32).collect(),
        }
    }

    /// Sum of all values in f64: a cheap fingerprint to print when comparing runs.
    pub fn checksum(&self) -> f64 {
        match &self.data {
            TensorData::F32(v) => v.iter().map(|&x| f64::from(x)).sum(),
            TensorData::I64(v) => v.iter().map(|&x| x as f64).sum(),
        }
    }

    /// Largest elementwise `|self - other|`, or `None` when the shapes differ.
    ///
    /// NaN in exactly one of the two at some position makes the result NaN, so a comparison against a
    /// tolerance (`d <= tol`) fails instead of silently skipping the broken element. NaN in both, or the same
    /// infinity in both, counts as equal.
    pub fn max_abs_diff(&self, other: &Tensor) -> Option<f32> {
        if self.shape != other.shape {
            return None;
        }
        let a = self.to_f32_vec();
        let b = other.to_f32_vec();
        let mut worst = 0.0f32;
        for (&x, &y) in a.iter().zip(&b) {
            let d = if x == y || (x.is_nan() && y.is_nan()) {
                0.0
            } else {
                (x - y).abs()
            };
            if d.is_nan() {
                return Some(f32::NAN);
            }
            worst = worst.max(d);
        }
        Some(worst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_check_length() {
        assert!(Tensor::from_f32(&[2, 3], vec![0.0; 6]).is_ok());
        match Tensor::from_f32(&[2, 3], vec![0.0; 5]) {
            Err(Error::TensorData {
                expected: 6,
                found: 5,
            }) => {}
            other => panic!("unexpected {other:?}"),
        }
        assert!(Tensor::from_i64(&[4], vec![1, 2, 3]).is_err());
        assert!(Tensor::from_f32(&[usize::MAX, 2], vec![]).is_err());
        let t = Tensor::from_f32(&[], vec![7.0]).unwrap();
        assert_eq!(t.numel(), 1);
    }

    #[test]
    fn accessors() {
        let t = Tensor::from_i64(&[2, 2], vec![1, 2, 3, 4]).unwrap();
        assert_eq!(t.dtype(), DType::I64);
        assert_eq!(t.dtype().to_string(), "i64");
        assert_eq!(t.shape(), &[2, 2]);
        assert!(t.as_f32().is_none());
        assert_eq!(t.as_i64().unwrap(), &[1, 2, 3, 4]);
        assert_eq!(t.to_f32_vec(), vec![1.0, 2.0, 3.0, 4.0]);
        assert_eq!(t.checksum(), 10.0);
        let mut z = Tensor::zeros(&[3]);
        z.as_f32_mut().unwrap()[1] = 2.5;
        assert_eq!(z.as_f32().unwrap(), &[0.0, 2.5, 0.0]);
        assert_eq!(z.dtype(), DType::F32);
    }

    #[test]
    fn randn_is_deterministic_and_normal() {
        let a = Tensor::randn(&[100_001], 42);
        assert_eq!(a, Tensor::randn(&[100_001], 42));
        assert_ne!(a, Tensor::randn(&[100_001], 43));
        let v = a.as_f32().unwrap();
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let var = v
            .iter()
            .map(|&x| (f64::from(x) - mean).powi(2))
            .sum::<f64>()
            / n;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "var {var}");
        assert!(v.iter().all(|x| x.is_finite()));
    }

    #[test]
    fn uniform_ids_in_range() {
        let t = Tensor::uniform_ids(&[8, 128], 30522, 1);
        let ids = t.as_i64().unwrap();
        assert!(ids.iter().all(|&i| (0..30522).contains(&i)));
        assert_eq!(t, Tensor::uniform_ids(&[8, 128], 30522, 1));
        let small = Tensor::uniform_ids(&[1000], 3, 5);
        for want in 0..3 {
            assert!(small.as_i64().unwrap().contains(&want));
        }
    }

    #[test]
    fn max_abs_diff_rules() {
        let a = Tensor::from_f32(&[3], vec![1.0, f32::INFINITY, f32::NAN]).unwrap();
        let b = Tensor::from_f32(&[3], vec![1.5, f32::INFINITY, f32::NAN]).unwrap();
        assert_eq!(a.max_abs_diff(&b), Some(0.5));
        let c = Tensor::from_f32(&[3], vec![1.0, 0.0, 0.0]).unwrap();
        assert!(a.max_abs_diff(&c).unwrap().is_nan());
        let d = Tensor::from_f32(&[1, 3], vec![1.0, 0.0, 0.0]).unwrap();
        assert_eq!(c.max_abs_diff(&d), None);
    }

    #[test]
    fn tensor_is_send_sync() {
        fn check<T: Send + Sync>() {}
        check::<Tensor>();
    }
}
