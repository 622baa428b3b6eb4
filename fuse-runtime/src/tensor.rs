//! A plain host tensor: a shape and a contiguous row-major buffer.
//!
//! Generated models take and return these; they are deliberately dumb (no strides, no views) because the
//! compiler decides all layouts at build time and only needs owned, contiguous data at the boundary.

use rand::{Rng, RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{Error, Result};
use crate::memory::check_fits;

/// Element type of a [`Tensor`] (defined with the plan tables, whose buffers have one too).
pub use fuse_tables::DType;

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
        None => Err(Error::ShapeOverflow {
            shape: shape.to_vec(),
        }),
    }
}

fn numel_of(shape: &[usize]) -> Result<usize> {
    checked_numel(shape).ok_or_else(|| Error::ShapeOverflow {
        shape: shape.to_vec(),
    })
}

/// An empty `Vec` with room for `n` values of `T` for `what`, or [`Error::OutOfMemory`] (checked against what the
/// process may still use, then asked of the allocator without aborting).
pub(crate) fn try_with_capacity<T>(n: usize, what: &'static str) -> Result<Vec<T>> {
    let bytes = n.checked_mul(std::mem::size_of::<T>());
    let out_of_memory = || Error::OutOfMemory {
        what,
        bytes,
        available: None,
    };
    check_fits(what, bytes.ok_or_else(out_of_memory)?)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| out_of_memory())?;
    Ok(v)
}

/// The element types a [`Tensor`] holds: `f32` and `i64`.
pub trait Element: Copy + sealed::Sealed {
    const DTYPE: DType;
    #[doc(hidden)]
    fn values(data: &TensorData) -> Option<&[Self]>;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn values(data: &TensorData) -> Option<&[f32]> {
        match data {
            TensorData::F32(v) => Some(v),
            TensorData::I64(_) => None,
        }
    }
}

impl Element for i64 {
    const DTYPE: DType = DType::I64;
    fn values(data: &TensorData) -> Option<&[i64]> {
        match data {
            TensorData::I64(v) => Some(v),
            TensorData::F32(_) => None,
        }
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for i64 {}
}

/// Rows `start..end` of axis `axis` of row-major `values` of `shape` (bounds already checked).
fn slice_values<T: Copy>(
    values: &[T],
    shape: &[usize],
    axis: usize,
    start: usize,
    end: usize,
) -> Vec<T> {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let rows = shape[axis];
    let mut out = Vec::with_capacity(outer * (end - start) * inner);
    for o in 0..outer {
        out.extend_from_slice(&values[(o * rows + start) * inner..(o * rows + end) * inner]);
    }
    out
}

/// `n` standard-normal samples from `rng` by Box–Muller, or [`Error::OutOfMemory`] for `what`.
///
/// Written out here instead of using `rand_distr` so the stream of values is fixed by this code alone: seeds in
/// tests and benchmarks must give the same numbers on every platform and every dependency version.
pub(crate) fn try_normal_samples(
    rng: &mut ChaCha8Rng,
    n: usize,
    what: &'static str,
) -> Result<Vec<f32>> {
    // Uniform in (0, 1]: 24 random bits, offset by one so ln never sees 0.
    fn unit(rng: &mut ChaCha8Rng) -> f64 {
        f64::from((rng.next_u32() >> 8) + 1) * (1.0 / 16_777_216.0)
    }
    let mut out = try_with_capacity(n, what)?;
    while out.len() < n {
        let r = (-2.0 * unit(rng).ln()).sqrt();
        let theta = std::f64::consts::TAU * unit(rng);
        out.push((r * theta.cos()) as f32);
        if out.len() < n {
            out.push((r * theta.sin()) as f32);
        }
    }
    Ok(out)
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
    /// With [`Tensor::try_zeros`]'s error when the shape overflows or the tensor does not fit in memory: these
    /// constructors are for tests and examples, where a message beats an abort and a `?` would be noise.
    pub fn zeros(shape: &[usize]) -> Tensor {
        Self::try_zeros(shape)
            .unwrap_or_else(|e| panic!("Tensor::zeros: {e} (try_zeros returns this as an error)"))
    }

    /// An f32 tensor of zeros, or [`Error::ShapeOverflow`] / [`Error::OutOfMemory`]. The memory is mapped zeroed
    /// and untouched: pages cost only when written.
    pub fn try_zeros(shape: &[usize]) -> Result<Tensor> {
        let data = crate::arena::zeroed_f32("a tensor", numel_of(shape)?)?;
        Ok(Self::f32_from_shape(shape, data))
    }

    /// Standard-normal f32 values from a ChaCha8 stream seeded with `seed`; the same on every platform.
    ///
    /// # Panics
    /// As [`Tensor::zeros`], with [`Tensor::try_randn`]'s error.
    pub fn randn(shape: &[usize], seed: u64) -> Tensor {
        Self::try_randn(shape, seed)
            .unwrap_or_else(|e| panic!("Tensor::randn: {e} (try_randn returns this as an error)"))
    }

    /// [`Tensor::randn`], or [`Error::ShapeOverflow`] / [`Error::OutOfMemory`].
    pub fn try_randn(shape: &[usize], seed: u64) -> Result<Tensor> {
        let n = numel_of(shape)?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let data = try_normal_samples(&mut rng, n, "a tensor")?;
        Ok(Self::f32_from_shape(shape, data))
    }

    /// Uniformly random i64 ids in `0..vocab`, for feeding embedding models in tests and benchmarks.
    ///
    /// # Panics
    /// As [`Tensor::zeros`], with [`Tensor::try_uniform_ids`]'s error (also when `vocab < 1`).
    pub fn uniform_ids(shape: &[usize], vocab: i64, seed: u64) -> Tensor {
        Self::try_uniform_ids(shape, vocab, seed).unwrap_or_else(|e| {
            panic!("Tensor::uniform_ids: {e} (try_uniform_ids returns this as an error)")
        })
    }

    /// [`Tensor::uniform_ids`], or [`Error::EmptyVocab`] when `vocab < 1`, [`Error::ShapeOverflow`],
    /// [`Error::OutOfMemory`].
    pub fn try_uniform_ids(shape: &[usize], vocab: i64, seed: u64) -> Result<Tensor> {
        if vocab < 1 {
            return Err(Error::EmptyVocab { vocab });
        }
        let n = numel_of(shape)?;
        let mut ids = try_with_capacity(n, "a tensor")?;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        ids.extend((0..n).map(|_| rng.gen_range(0..vocab)));
        Ok(Tensor {
            shape: shape.to_vec(),
            data: TensorData::I64(ids),
        })
    }

    /// The size of every axis (`dims` elsewhere).
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of axes.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The size of axis `axis`, or [`Error::AxisOutOfRange`].
    pub fn dim(&self, axis: usize) -> Result<usize> {
        self.shape
            .get(axis)
            .copied()
            .ok_or_else(|| Error::AxisOutOfRange {
                axis,
                shape: self.shape.clone(),
            })
    }

    /// A copy of indices `start..end` of axis `axis` (the other axes whole), like the model language's
    /// `slice(axis, start, end)`; [`Error::AxisOutOfRange`] or [`Error::SliceOutOfRange`] when they do not fit.
    pub fn slice(&self, axis: usize, start: usize, end: usize) -> Result<Tensor> {
        let size = self.dim(axis)?;
        if start > end || end > size {
            return Err(Error::SliceOutOfRange {
                axis,
                start,
                end,
                shape: self.shape.clone(),
            });
        }
        let mut shape = self.shape.clone();
        shape[axis] = end - start;
        let data = match &self.data {
            TensorData::F32(v) => TensorData::F32(slice_values(v, &self.shape, axis, start, end)),
            TensorData::I64(v) => TensorData::I64(slice_values(v, &self.shape, axis, start, end)),
        };
        Ok(Tensor { shape, data })
    }

    /// `len` indices of axis `axis` from `start` (PyTorch's `narrow`): [`Tensor::slice`]`(axis, start, start + len)`.
    pub fn narrow(&self, axis: usize, start: usize, len: usize) -> Result<Tensor> {
        let end = start
            .checked_add(len)
            .ok_or_else(|| Error::SliceOutOfRange {
                axis,
                start,
                end: usize::MAX,
                shape: self.shape.clone(),
            })?;
        self.slice(axis, start, end)
    }

    /// The values as a `Vec<f32>` or `Vec<i64>` (`t.to_vec::<f32>()`), or [`Error::TensorDType`] when the tensor
    /// holds the other type. See [`Tensor::to_f32_vec`] to convert ids.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        T::values(&self.data)
            .map(<[T]>::to_vec)
            .ok_or(Error::TensorDType {
                expected: T::DTYPE,
                found: self.dtype(),
            })
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

    /// Element `index` of a row-major tensor of `shape`, computed from strides: the reference for `slice`.
    fn at(t: &Tensor, index: &[usize]) -> f32 {
        let flat = index
            .iter()
            .zip(t.shape())
            .fold(0, |flat, (&i, &n)| flat * n + i);
        t.to_f32_vec()[flat]
    }

    #[test]
    fn slices_match_indexing_on_every_axis() {
        let t = Tensor::randn(&[3, 4, 5], 11);
        for axis in 0..3 {
            let size = t.shape()[axis];
            for (start, end) in [(0, size), (1, size), (0, 1), (1, size - 1), (2, 2)] {
                let s = t.slice(axis, start, end).unwrap();
                let mut want_shape = t.shape().to_vec();
                want_shape[axis] = end - start;
                assert_eq!(s.shape(), want_shape);
                for i in 0..s.shape()[0] {
                    for j in 0..s.shape()[1] {
                        for k in 0..s.shape()[2] {
                            let mut src = [i, j, k];
                            src[axis] += start;
                            assert_eq!(at(&s, &[i, j, k]), at(&t, &src));
                        }
                    }
                }
                assert_eq!(t.narrow(axis, start, end - start).unwrap(), s);
            }
        }
        let ids = Tensor::from_i64(&[2, 3], vec![0, 1, 2, 3, 4, 5]).unwrap();
        assert_eq!(ids.slice(1, 1, 3).unwrap().as_i64().unwrap(), &[1, 2, 4, 5]);
    }

    #[test]
    fn bad_slices_and_axes_are_typed_errors() {
        let t = Tensor::zeros(&[3, 4]);
        assert!(matches!(
            t.slice(2, 0, 1),
            Err(Error::AxisOutOfRange { axis: 2, .. })
        ));
        assert!(matches!(
            t.slice(1, 0, 5),
            Err(Error::SliceOutOfRange { end: 5, .. })
        ));
        assert!(matches!(
            t.slice(0, 2, 1),
            Err(Error::SliceOutOfRange { .. })
        ));
        assert!(matches!(
            t.narrow(0, 1, usize::MAX),
            Err(Error::SliceOutOfRange { .. })
        ));
        assert_eq!(t.rank(), 2);
        assert_eq!(t.dim(1).unwrap(), 4);
        assert!(matches!(t.dim(2), Err(Error::AxisOutOfRange { .. })));
    }

    #[test]
    fn to_vec_is_typed() {
        let x = Tensor::from_f32(&[2], vec![1.5, -2.0]).unwrap();
        assert_eq!(x.to_vec::<f32>().unwrap(), [1.5, -2.0]);
        match x.to_vec::<i64>() {
            Err(Error::TensorDType { expected, found }) => {
                assert_eq!((expected, found), (DType::I64, DType::F32));
            }
            other => panic!("expected TensorDType, got {other:?}"),
        }
        let ids = Tensor::from_i64(&[2], vec![7, 8]).unwrap();
        assert_eq!(ids.to_vec::<i64>().unwrap(), [7, 8]);
        assert!(ids.to_vec::<f32>().is_err());
    }

    #[test]
    fn huge_or_overflowing_shapes_are_errors_not_aborts() {
        let overflowing = [usize::MAX, 2];
        assert!(matches!(
            Tensor::try_zeros(&overflowing),
            Err(Error::ShapeOverflow { .. })
        ));
        assert!(matches!(
            Tensor::try_randn(&overflowing, 0),
            Err(Error::ShapeOverflow { .. })
        ));
        assert!(matches!(
            Tensor::try_uniform_ids(&overflowing, 10, 0),
            Err(Error::ShapeOverflow { .. })
        ));
        // 2^50 elements: no machine has 4 PiB.
        let huge = [1 << 25, 1 << 25];
        assert!(matches!(
            Tensor::try_zeros(&huge),
            Err(Error::OutOfMemory { .. })
        ));
        assert!(matches!(
            Tensor::try_randn(&huge, 0),
            Err(Error::OutOfMemory { .. })
        ));
        assert!(matches!(
            Tensor::try_uniform_ids(&huge, 10, 0),
            Err(Error::OutOfMemory { .. })
        ));
        assert!(matches!(
            Tensor::try_uniform_ids(&[3], 0, 0),
            Err(Error::EmptyVocab { vocab: 0 })
        ));
        // The fallible forms give what the others do.
        assert_eq!(
            Tensor::try_randn(&[5, 3], 4).unwrap(),
            Tensor::randn(&[5, 3], 4)
        );
        assert_eq!(Tensor::try_zeros(&[2, 2]).unwrap(), Tensor::zeros(&[2, 2]));
    }

    #[test]
    #[should_panic(expected = "try_zeros returns this as an error")]
    fn infallible_constructors_panic_with_the_error() {
        Tensor::zeros(&[1 << 25, 1 << 25]);
    }

    #[test]
    fn tensor_is_send_sync() {
        fn check<T: Send + Sync>() {}
        check::<Tensor>();
    }
}
