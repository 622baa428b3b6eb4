//! Symmetric int8 quantisation of one row or column: the definitions the kernels and the tests share, written
//! so they vectorise inside each kernel's `#[target_feature]` copy.

/// Lanes of the running maximum, so the reduction vectorises (f32 `max` is not reassociated otherwise).
const LANES: usize = 16;

/// `(max |x|, whether any x is NaN or infinite)`.
#[inline(always)]
fn abs_max(x: &[f32]) -> (f32, bool) {
    let mut most = [0.0f32; LANES];
    let mut bad = [false; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for t in 0..LANES {
            let v = chunk[t].abs();
            most[t] = if v > most[t] { v } else { most[t] };
            bad[t] |= !v.is_finite();
        }
    }
    for (t, &v) in rest.iter().enumerate() {
        let v = v.abs();
        most[t] = if v > most[t] { v } else { most[t] };
        bad[t] |= !v.is_finite();
    }
    let amax = most.iter().fold(0.0f32, |m, &v| m.max(v));
    (amax, bad.iter().any(|&b| b))
}

/// The scale of a vector and the factor that quantises it: `(max|x| / 127, 127 / max|x|)`; `(0, 0)` for an
/// all-zero vector, a NaN scale when `x` holds a NaN or an infinity.
#[inline(always)]
pub fn quantize_column_scale(x: &[f32]) -> (f32, f32) {
    let (amax, bad) = abs_max(x);
    if bad {
        (f32::NAN, 0.0)
    } else if amax > 0.0 {
        (amax / 127.0, 127.0 / amax)
    } else {
        (0.0, 0.0)
    }
}

/// `round(v · inv)` (ties to even) in [-127, 127]; NaN gives 0.
#[inline(always)]
pub fn to_i8(v: f32, inv: f32) -> i8 {
    (v * inv).round_ties_even().clamp(-127.0, 127.0) as i8
}

/// `(min(x, 0), max(x, 0), whether any x is NaN or infinite)`, over lanes so it vectorises: `v · 0` is NaN
/// exactly for a NaN or an infinity, and a sum of those flags per lane is NaN if any was.
#[inline(always)]
fn range(x: &[f32]) -> (f32, f32, bool) {
    let mut lo = [0.0f32; LANES];
    let mut hi = [0.0f32; LANES];
    let mut poison = [0.0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for t in 0..LANES {
            let v = chunk[t];
            lo[t] = if v < lo[t] { v } else { lo[t] };
            hi[t] = if v > hi[t] { v } else { hi[t] };
            poison[t] += v * 0.0;
        }
    }
    for (t, &v) in rest.iter().enumerate() {
        lo[t] = if v < lo[t] { v } else { lo[t] };
        hi[t] = if v > hi[t] { v } else { hi[t] };
        poison[t] += v * 0.0;
    }
    let lo = lo.iter().fold(0.0f32, |m, &v| m.min(v));
    let hi = hi.iter().fold(0.0f32, |m, &v| m.max(v));
    (lo, hi, poison.iter().any(|p| p.is_nan()))
}

/// Quantises a row of A into `out` as u8, asymmetrically over the row's range (0 included):
/// `scale = (max − min) / 255`, `zero = round(−min / scale)`, `u = clamp(round(x / scale) + zero, 0, 255)` (ties
/// to even, `/ scale` computed as `· 255 / (max − min)`), so `x ≈ scale · (u − zero)`. Pads `out` past the row
/// with `zero`. Returns `(scale, zero)`: `(0, 0)` for an all-zero row, a NaN scale when the row holds a NaN or an
/// infinity.
#[inline(always)]
pub fn quantize_row(x: &[f32], out: &mut [u8]) -> (f32, i32) {
    quantize_row_into(x, out)
}

/// A cell of a quantised row: a byte, or the same level widened to 16 bits (the AVX2 tile multiplies i16 pairs,
/// so it reads A already widened instead of widening each byte in its inner loop).
pub trait Level: Copy {
    fn from_level(level: u8) -> Self;
}

impl Level for u8 {
    #[inline(always)]
    fn from_level(level: u8) -> u8 {
        level
    }
}

impl Level for u16 {
    #[inline(always)]
    fn from_level(level: u8) -> u16 {
        u16::from(level)
    }
}

/// [`quantize_row`] into cells of type `L`.
#[inline(always)]
pub fn quantize_row_into<L: Level>(x: &[f32], out: &mut [L]) -> (f32, i32) {
    let (lo, hi, bad) = range(x);
    let (scale, inv, zero) = row_params(lo, hi, bad);
    let (head, pad) = out.split_at_mut(x.len());
    for (o, &v) in head.iter_mut().zip(x) {
        *o = L::from_level(level(v, inv, zero));
    }
    pad.fill(L::from_level(zero as u8));
    (scale, zero as i32)
}

/// `(scale, 1 / scale, zero point)` of a row with range `[lo, hi]` (0 included) as [`quantize_row`] defines
/// them; `bad` when the row holds a NaN or an infinity.
#[inline(always)]
pub(super) fn row_params(lo: f32, hi: f32, bad: bool) -> (f32, f32, f32) {
    let width = hi - lo;
    if bad || !width.is_finite() {
        (f32::NAN, 0.0, 0.0)
    } else if width > 0.0 {
        let inv = 255.0 / width;
        (
            width / 255.0,
            inv,
            (-lo * inv).round_ties_even().clamp(0.0, 255.0),
        )
    } else {
        (0.0, 0.0, 0.0)
    }
}

/// The level of `v`: `clamp(round(v · inv) + zero, 0, 255)`, ties to even; the SIMD quantisers compute the same
/// operations in the same order, so every path gives the same levels.
#[inline(always)]
pub(super) fn level(v: f32, inv: f32, zero: f32) -> u8 {
    // `max`/`min` also turn a NaN into 0 (its row's scale is NaN already), so the value is finite and in range for
    // the unchecked conversion, which vectorises where a saturating one does not. Not `clamp`, which keeps a NaN.
    #[allow(clippy::manual_clamp)]
    let q = ((v * inv).round_ties_even() + zero).max(0.0).min(255.0);
    // SAFETY: q is finite and in [0, 255].
    (unsafe { q.to_int_unchecked::<i32>() }) as u8
}
