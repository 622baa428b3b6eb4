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
//!   The exception is the `_in` forms over [`Fused`], for callers that dispatch to an FMA
//!   copy themselves: the softmax, and every generated kernel's task through `par::simd_run`. [`exp_zmm`] is
//!   written with AVX-512 intrinsics for the one caller that loops over vectors itself, the softmax's exp pass.
//! - integer arithmetic on bit patterns is `wrapping_*`, so debug builds have no overflow-check branches.
//! - clamping goes through `clamp_nan`, which keeps NaN (`f32::max`/`min` would turn NaN into a bound).
//!
//! Accuracy (measured by the tests below against f64 references, default x86-64 target): see each function.

use std::f32::consts::{FRAC_1_SQRT_2, LOG2_E};
use std::sync::atomic::{AtomicU8, Ordering};

pub use super::trig::{cos, sin};

/// Adding then subtracting this rounds an f32 of magnitude < 2²² to the nearest integer, and the low mantissa
/// bits of the sum hold that integer.
const ROUND_MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23
/// ln 2 split in two: `LN2_HI` has few enough bits that `n * LN2_HI` is exact for |n| < 2⁸.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// How the polynomials' multiply-adds are computed. The `_in` forms of the functions below take it as a type
/// parameter; the plain forms are [`Plain`]. `par::simd_run` runs a generated kernel's task with [`Fused`] in its
/// AVX-512 and AVX2+FMA copies and [`Plain`] in the portable one: the erf GELU over 393k floats took 141–154 µs
/// plain and 101–105 µs fused on an Intel Xeon with AVX-512 (BENCHMARKS.md, thirty-first run).
pub trait Arith {
    /// a·b + c.
    fn mad(a: f32, b: f32, c: f32) -> f32;
}

/// A multiply, then an add: the only vectorisable choice on the baseline target.
pub struct Plain;

/// One rounding (`mul_add`): a `vfmadd` where the caller is compiled with FMA, a library call elsewhere (correct
/// but not vectorised), so only for callers that dispatch to an FMA copy.
pub struct Fused;

impl Arith for Plain {
    #[inline(always)]
    fn mad(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

impl Arith for Fused {
    #[inline(always)]
    fn mad(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

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

/// `max(x, 0)` with NaN passed through, as PyTorch's `relu` (`f32::max` would turn NaN into 0); -0 stays -0.
/// One `vmaxps` with 0 as its first operand, which returns the second where either is NaN.
#[inline(always)]
pub fn relu(x: f32) -> f32 {
    if 0.0 > x {
        0.0
    } else {
        x
    }
}

/// The larger of `x` and `y`, NaN where either is (IEEE 754's `maximum`, PyTorch's `maximum` and `amax`):
/// `f32::max` returns the other operand instead, which would hide a NaN a model computed.
#[inline(always)]
pub fn maximum(x: f32, y: f32) -> f32 {
    if x > y || x.is_nan() {
        x
    } else {
        y
    }
}

/// The smaller of `x` and `y`, NaN where either is (PyTorch's `minimum`).
#[inline(always)]
pub fn minimum(x: f32, y: f32) -> f32 {
    if x < y || x.is_nan() {
        x
    } else {
        y
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
    exp_in::<Plain>(x)
}

/// [`exp`]'s bounds: beyond them the result is 0 or ∞ anyway, and clamping keeps n small enough for the bit tricks.
const EXP_LOW: f32 = -104.0;
const EXP_HIGH: f32 = 89.0;

/// The Cephes expf polynomial's coefficients, highest degree first: exp(r) ≈ 1 + r + r²·p(r) on
/// [-ln2/2, ln2/2].
const EXP_POLY: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_6e-1,
    0.5,
];

/// [`exp`] with its multiply-adds as `A` computes them.
#[inline(always)]
pub fn exp_in<A: Arith>(x: f32) -> f32 {
    let mad = A::mad;
    let x = clamp_nan(x, EXP_LOW, EXP_HIGH);
    let t = mad(x, LOG2_E, ROUND_MAGIC);
    let n = (t.to_bits() as i32).wrapping_sub(ROUND_MAGIC.to_bits() as i32);
    let nf = t - ROUND_MAGIC;
    // r in [-ln2/2, ln2/2].
    let r = mad(-nf, LN2_LO, mad(-nf, LN2_HI, x));
    let p = EXP_POLY[1..].iter().fold(EXP_POLY[0], |p, &c| mad(p, r, c));
    let y = mad(p * r, r, r) + 1.0;
    // n is in [-150, 128]; scaling by two halves keeps both factors normal, so underflow is gradual and
    // overflow lands on ∞.
    let n1 = n >> 1;
    y * pow2i(n1) * pow2i(n.wrapping_sub(n1))
}

/// [`exp_in::<Fused>`] on 16 lanes, scaling by 2ⁿ with one `vscalefps` instead of building two powers of two
/// from integer bits (eight vector operations). The softmax's exp pass, a quarter of an encoder's
/// attention, took 25 vector operations per 16 floats (its running sum's included) and takes 17; the softmax
/// alone took 18 % less (BENCHMARKS.md, thirty-second run).
/// The same values as `exp_in::<Fused>` wherever the result is a normal float; below that `vscalefps` rounds
/// once where the two factors rounded twice. NaN stays NaN (`vmaxps` and `vminps` return their second operand
/// when either is NaN).
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub unsafe fn exp_zmm(x: std::arch::x86_64::__m512) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    let splat = _mm512_set1_ps;
    let x = _mm512_min_ps(splat(EXP_HIGH), _mm512_max_ps(splat(EXP_LOW), x));
    let magic = splat(ROUND_MAGIC);
    let nf = _mm512_sub_ps(_mm512_fmadd_ps(x, splat(LOG2_E), magic), magic);
    let r = _mm512_fnmadd_ps(nf, splat(LN2_LO), _mm512_fnmadd_ps(nf, splat(LN2_HI), x));
    let p = EXP_POLY[1..]
        .iter()
        .fold(splat(EXP_POLY[0]), |p, &c| _mm512_fmadd_ps(p, r, splat(c)));
    let y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), splat(1.0));
    _mm512_scalef_ps(y, nf)
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

/// Hyperbolic tangent. Absolute error ≤ 4e-7 everywhere; NaN gives NaN.
///
/// A rational x·P(x²)/Q(x²) of degree (4, 4) in x², fitted for this file (near-minimax against the f64
/// reference, then nudged by single ulps to minimise the error of the f32 evaluation). It costs half of the
/// exp-based formula and needs no select; P and Q have only positive coefficients, so Q ≥ 1 and Horner's rule
/// is well conditioned. Past 7.9, tanh is within 3e-7 of ±1 and the result is exactly ±1.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    tanh_in::<Plain>(x)
}

/// [`tanh`] with its multiply-adds as `A` computes them.
#[inline(always)]
pub fn tanh_in<A: Arith>(x: f32) -> f32 {
    let s = x * x;
    let p = 1.525_968_2e-8;
    let p = A::mad(p, s, 2.190_341_7e-5);
    let p = A::mad(p, s, 3.571_695_9e-3);
    let p = A::mad(p, s, 1.344_445_2e-1);
    let p = A::mad(p, s, 1.0);
    let q = 8.530_548e-7;
    let q = A::mad(q, s, 3.411_743e-4);
    let q = A::mad(q, s, 2.616_441_2e-2);
    let q = A::mad(q, s, 4.677_777_3e-1);
    let q = A::mad(q, s, 1.0);
    // A select, not a clamp of x, so that huge inputs (whose s overflows) never reach the result and NaN falls
    // through to `x * p / q`.
    if x.abs() >= 7.9 {
        1.0f32.copysign(x)
    } else {
        x * p / q
    }
}

/// Error function. Absolute error ≤ 4e-7 over all f32; NaN gives NaN.
///
/// A rational x·P(x²)/Q(x²) of degree (6, 4), fitted like [`tanh`]'s; past 3.92 the result is exactly ±1
/// (the true value is within 4e-8 of it). A two-piece version (odd polynomial near 0, 1 − exp(poly) in the tail) reached 1.2e-7 but
/// made GELU 3.5× slower (48 ms against 13.5 ms over 16 M floats on SSE2; 11 ms against 3.6 ms with AVX-512,
/// where this one is memory-bound), and the error left here is f32 rounding in the evaluation, well inside
/// what f32 models tolerate.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    erf_in::<Plain>(x)
}

/// [`erf`] with its multiply-adds as `A` computes them.
#[inline(always)]
pub fn erf_in<A: Arith>(x: f32) -> f32 {
    let s = x * x;
    let p = 1.992_146e-8;
    let p = A::mad(p, s, -1.994_306_3e-6);
    let p = A::mad(p, s, 1.489_877e-4);
    let p = A::mad(p, s, 3.972_922e-3);
    let p = A::mad(p, s, 5.139_735_7e-2);
    let p = A::mad(p, s, 2.061_148_6e-1);
    let p = A::mad(p, s, 1.128_378_7);
    let q = 1.024_132e-3;
    let q = A::mad(q, s, 1.488_927_2e-2);
    let q = A::mad(q, s, 1.175_648_2e-1);
    let q = A::mad(q, s, 5.159_933e-1);
    let q = A::mad(q, s, 1.0);
    if x.abs() >= 3.92 {
        1.0f32.copysign(x)
    } else {
        x * p / q
    }
}

/// Logistic function 1 / (1 + e⁻ˣ).
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    sigmoid_in::<Plain>(x)
}

/// [`sigmoid`] with its multiply-adds as `A` computes them.
#[inline(always)]
pub fn sigmoid_in<A: Arith>(x: f32) -> f32 {
    1.0 / (1.0 + exp_in::<A>(-x))
}

/// GELU, exact (erf) form: x·Φ(x).
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    gelu_in::<Plain>(x)
}

/// [`gelu`] with its multiply-adds as `A` computes them.
#[inline(always)]
pub fn gelu_in<A: Arith>(x: f32) -> f32 {
    0.5 * x * (1.0 + erf_in::<A>(x * FRAC_1_SQRT_2))
}

/// GELU, tanh approximation (as in GPT-2 and PyTorch's `approximate="tanh"`).
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    gelu_tanh_in::<Plain>(x)
}

/// [`gelu_tanh`] with its multiply-adds as `A` computes them.
#[inline(always)]
pub fn gelu_tanh_in<A: Arith>(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + tanh_in::<A>(SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x)))
}

/// SiLU (swish): x·sigmoid(x).
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    silu_in::<Plain>(x)
}

/// [`silu`] with its multiply-adds as `A` computes them.
#[inline(always)]
pub fn silu_in<A: Arith>(x: f32) -> f32 {
    x / (1.0 + exp_in::<A>(-x))
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
