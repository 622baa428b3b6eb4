//! Branch-free f32 transcendentals for generated CPU kernels.
//!
//! `f32::exp`, `f32::ln` and `libm::erff` are opaque calls, so a loop that uses them runs one element at a time;
//! a GELU over 16 M floats measured 204 ms that way against 14 ms (SSE2) and 3.6 ms (AVX-512) for a polynomial
//! version (see DESIGN.md). Everything here is therefore plain arithmetic, bit casts and selects, marked
//! `#[inline(always)]`, so LLVM inlines it into the caller's loop and vectorises the whole body.
//!
//! Rules kept throughout:
//! - no `f32::round`, `f32::floor` or `mul_add`: on the baseline x86-64 target these lower to library calls
//!   (there is no SSE2 instruction for them), which would stop vectorisation. Rounding uses the 1.5·2²³ trick.
//! - integer arithmetic on bit patterns is `wrapping_*`, so debug builds have no overflow-check branches.
//! - clamping goes through [`clamp_nan`], which keeps NaN (`f32::max`/`min` would turn NaN into a bound).
//!
//! Accuracy (measured by the tests below against f64 references, default x86-64 target): see each function.

use std::f32::consts::{FRAC_1_SQRT_2, LOG2_E};
use std::sync::atomic::{AtomicU8, Ordering};

/// Adding then subtracting this rounds an f32 of magnitude < 2²² to the nearest integer, and the low mantissa
/// bits of the sum hold that integer.
const ROUND_MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23
/// ln 2 split in two: `LN2_HI` has few enough bits that `n * LN2_HI` is exact for |n| < 2⁸.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// `x` limited to `[lo, hi]`, with NaN passed through.
#[inline(always)]
fn clamp_nan(x: f32, lo: f32, hi: f32) -> f32 {
    let x = if x < lo { lo } else { x };
    if x > hi {
        hi
    } else {
        x
    }
}

/// 2ⁿ for n in [-126, 127], built directly from the exponent bits.
#[inline(always)]
fn pow2i(n: i32) -> f32 {
    f32::from_bits((n.wrapping_add(127) as u32) << 23)
}

/// eˣ. Relative error ≤ 2e-7 on [-87, 88]; results below f32's normal range come out as subnormals or 0,
/// x > 88.73 gives +∞, NaN gives NaN.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    // Beyond these bounds the result is 0 or ∞ anyway; clamping keeps n small enough for the bit tricks.
    let x = clamp_nan(x, -104.0, 89.0);
    let t = x * LOG2_E + ROUND_MAGIC;
    let n = (t.to_bits() as i32).wrapping_sub(ROUND_MAGIC.to_bits() as i32);
    let nf = t - ROUND_MAGIC;
    // r in [-ln2/2, ln2/2]; exp(r) by the Cephes expf polynomial.
    let r = x - nf * LN2_HI - nf * LN2_LO;
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_6e-1;
    let p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    // n is in [-150, 128]; scaling by two halves keeps both factors normal, so underflow is gradual and
    // overflow lands on ∞.
    let n1 = n >> 1;
    y * pow2i(n1) * pow2i(n.wrapping_sub(n1))
}

/// Natural logarithm. Relative error ≤ 2e-7 for positive normal and subnormal inputs; log(0) = -∞,
/// log(+∞) = +∞, negative or NaN inputs give NaN.
#[inline(always)]
pub fn log(x: f32) -> f32 {
    // Subnormals have no implicit leading bit; scale them into the normal range first.
    let tiny = x < f32::MIN_POSITIVE;
    let xs = if tiny { x * 8_388_608.0 } else { x };
    let bits = xs.to_bits();
    let bias = if tiny { 127 + 23 } else { 127 };
    let mut e = (((bits >> 23) & 0xff) as i32).wrapping_sub(bias);
    // Mantissa in [1, 2), then folded to [√½, √2) so the polynomial argument is centred on 0.
    let m = f32::from_bits((bits & 0x007f_ffff) | 0x3f80_0000);
    let big = m > std::f32::consts::SQRT_2;
    let m = if big { m * 0.5 } else { m };
    e = e.wrapping_add(big as i32);
    let f = m - 1.0;
    let ef = e as f32;
    let z = f * f;
    // Cephes logf polynomial.
    let p = 7.037_683_6e-2;
    let p = p * f - 1.151_461e-1;
    let p = p * f + 1.167_699_84e-1;
    let p = p * f - 1.242_014_1e-1;
    let p = p * f + 1.424_932_3e-1;
    let p = p * f - 1.666_805_7e-1;
    let p = p * f + 2.000_071_4e-1;
    let p = p * f - 2.499_999_4e-1;
    let p = p * f + 3.333_333e-1;
    let y = f * z * p + ef * LN2_LO - 0.5 * z;
    let r = f + y + ef * LN2_HI;
    let r = if x == f32::INFINITY { x } else { r };
    let r = if x == 0.0 { f32::NEG_INFINITY } else { r };
    if x < 0.0 || x.is_nan() {
        f32::NAN
    } else {
        r
    }
}

/// Hyperbolic tangent. Absolute error ≤ 2e-7 everywhere; NaN gives NaN.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    // Near 0, 1 - 2/(e^2a + 1) cancels badly; the Cephes odd polynomial is accurate there.
    let z = x * x;
    let p = -5.704_988_7e-3;
    let p = p * z + 2.063_908_8e-2;
    let p = p * z - 5.373_971_5e-2;
    let p = p * z + 1.333_144_2e-1;
    let p = p * z - 3.333_328e-1;
    let small = p * z * x + x;
    // exp overflows to ∞ for large a, which correctly gives 1.
    let large = (1.0 - 2.0 / (exp(2.0 * a) + 1.0)).copysign(x);
    if a < 0.625 {
        small
    } else {
        large
    }
}

/// Split point of [`erf`]'s two approximations.
const ERF_SPLIT: f32 = 0.921_875;

/// Error function. Absolute error ≤ 2e-7 over all f32; NaN gives NaN.
///
/// Coefficients were fitted for this file (near-minimax, Lawson iterations against mpmath): below 0.921875,
/// erf(x) = x·P(x²) with P of degree 5; above, erf(|x|) = 1 − exp(Q(|x|)) with Q of degree 6, which tracks the
/// Gaussian tail far better than a polynomial in x could. Past 3.93 erf rounds to 1 in f32.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let s = x * x;
    let p = -5.834_973e-4;
    let p = p * s + 4.956_401e-3;
    let p = p * s - 2.673_498_4e-2;
    let p = p * s + 1.128_062_16e-1;
    let p = p * s - 3.761_230_7e-1;
    let p = p * s + 1.128_379_1;
    let small = x * p;

    let a = x.abs();
    let t = clamp_nan(a, ERF_SPLIT, 3.93);
    let q = 1.947_166_2e-4;
    let q = q * t - 3.031_444_3e-3;
    let q = q * t + 2.218_084_2e-2;
    let q = q * t - 1.038_378_7e-1;
    let q = q * t - 6.372_868_4e-1;
    let q = q * t - 1.127_614_9;
    let q = q * t - 2.100_391_6e-4;
    let large = (1.0 - exp(q)).copysign(x);
    if a <= ERF_SPLIT {
        small
    } else {
        large
    }
}

/// Logistic function 1 / (1 + e⁻ˣ).
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// GELU, exact (erf) form: x·Φ(x).
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * FRAC_1_SQRT_2))
}

/// GELU, tanh approximation (as in GPT-2 and PyTorch's `approximate="tanh"`).
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + tanh(SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x)))
}

/// SiLU (swish): x·sigmoid(x).
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + exp(-x))
}

/// 1/√x (a real square root and division: `sqrtps`/`divps` vectorise and are exact enough for normalisation).
#[inline(always)]
pub fn rsqrt(x: f32) -> f32 {
    1.0 / x.sqrt()
}

const UNKNOWN: u8 = 0;
const NO: u8 = 1;
const YES: u8 = 2;

static AVX512: AtomicU8 = AtomicU8::new(UNKNOWN);
static AVX2: AtomicU8 = AtomicU8::new(UNKNOWN);

#[inline(always)]
fn cached(cell: &AtomicU8, detect: fn() -> bool) -> bool {
    match cell.load(Ordering::Relaxed) {
        YES => true,
        NO => false,
        _ => {
            let found = detect();
            cell.store(if found { YES } else { NO }, Ordering::Relaxed);
            found
        }
    }
}

/// Whether this CPU runs code compiled with `#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]`.
///
/// Generated kernels compile a loop body once generically and once per feature level, then pick at run time,
/// because a distributable binary cannot be built with `target-cpu=native`. The bodies inline the
/// `#[inline(always)]` functions of this module, so each copy is vectorised for its own instruction set:
///
/// ```
/// use fuse_runtime::cpu::math::{dispatch_avx2, dispatch_avx512, gelu};
///
/// #[inline(always)]
/// fn body(xs: &mut [f32]) {
///     for x in xs {
///         *x = gelu(*x);
///     }
/// }
///
/// #[cfg(target_arch = "x86_64")]
/// #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
/// fn body_avx512(xs: &mut [f32]) {
///     body(xs)
/// }
///
/// #[cfg(target_arch = "x86_64")]
/// #[target_feature(enable = "avx2,fma")]
/// fn body_avx2(xs: &mut [f32]) {
///     body(xs)
/// }
///
/// pub fn gelu_in_place(xs: &mut [f32]) {
///     #[cfg(target_arch = "x86_64")]
///     {
///         if dispatch_avx512() {
///             // SAFETY: the CPU has every feature body_avx512 was compiled for.
///             return unsafe { body_avx512(xs) };
///         }
///         if dispatch_avx2() {
///             // SAFETY: as above, for AVX2 and FMA.
///             return unsafe { body_avx2(xs) };
///         }
///     }
///     body(xs)
/// }
///
/// let mut v = vec![-1.0f32, 0.0, 1.0];
/// gelu_in_place(&mut v);
/// assert!((v[2] - 0.841_344_7).abs() < 1e-6);
/// ```
///
/// The answer is detected once and cached; `false` on non-x86 targets.
#[inline]
pub fn dispatch_avx512() -> bool {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        cached(&AVX512, || {
            is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
        })
    }
    #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
    {
        let _ = (&AVX512, cached as fn(&AtomicU8, fn() -> bool) -> bool);
        false
    }
}

/// Whether this CPU runs code compiled with `#[target_feature(enable = "avx2,fma")]`; see [`dispatch_avx512`].
#[inline]
pub fn dispatch_avx2() -> bool {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        cached(&AVX2, || {
            is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
        })
    }
    #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
    {
        let _ = &AVX2;
        false
    }
}

#[cfg(test)]
#[path = "math_tests.rs"]
mod tests;
