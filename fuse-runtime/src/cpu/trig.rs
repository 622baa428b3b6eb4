//! Branch-free f32 sine and cosine for generated CPU kernels (re-exported by `math`, under its rules: plain
//! arithmetic, bit casts and selects, `#[inline(always)]`, so a kernel loop that calls them still vectorises).
//!
//! Both reduce the argument to `x = n·π/2 + r`, `|r| ≤ π/4`, then evaluate a short polynomial in `r`. The reduction
//! is exact enough for every finite f32, not just small ones: rotary position embeddings take the sine of
//! `position · frequency`, which reaches 10⁵ and more for long contexts, and a reduction that is only right near 0
//! would return a wrong number without a sign of it. Two reductions are computed and one is selected:
//! - `|x| < 256`: in f64, `r = x − n·π/2` with one f64 constant (error below 1e-13);
//! - otherwise: Payne–Hanek in integers, as in Arm's optimized-routines `sinf`: `x·2/π mod 4` from a 96-bit
//!   window of 2/π's bits chosen by the exponent, as a 2.62 fixed-point number (exact to 2⁻⁷⁰ before rounding).
//!
//! Accuracy (the tests sweep all finite f32 against f64 `sin`/`cos` of the same input): see each function.
//! `fuse-kernels/cuda/prelude.cuh` has the same algorithm for the GPU (`fuse_sin`, `fuse_cos`).

use std::f64::consts::FRAC_2_PI;

/// 2/π's first 192 bits after the binary point, most significant word first.
const TWO_OVER_PI: [u64; 3] = [
    0xa2f9_836e_4e44_1529,
    0xfc27_57d1_f534_ddc0,
    0xdb62_9599_3c43_9041,
];
/// Adding then subtracting this rounds an f64 of magnitude < 2⁵¹ to the nearest integer, whose low bits the sum's
/// mantissa then holds.
const ROUND_MAGIC_F64: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52
/// π/2 in f64; `n·PI_2` for `n < 2⁸` loses at most one rounding (below 1e-14 here).
const PI_2: f64 = std::f64::consts::FRAC_PI_2;
/// π·2⁻⁶³: turns a 2.62 fixed-point fraction of a quadrant into radians (a quadrant is π/2 = 2⁶² units).
const PI_2_PER_UNIT: f64 = std::f64::consts::PI / 9_223_372_036_854_775_808.0;
/// Below this, the f64 reduction; from it on, the integer one (which needs an exponent ≥ 128).
const SMALL: f32 = 256.0;

/// 32 bits of 2/π: bits `[161 − s, 192 − s]` counted from the binary point (1-based), i.e. the 192-bit integer
/// shifted right by `s` (`s` in `0..=184`) and truncated. Selects instead of an indexed table, so the GPU copy needs
/// no memory and the CPU copy no gather.
#[inline(always)]
fn two_over_pi_bits(s: u32) -> u32 {
    let word = s >> 6;
    let b = s & 63;
    let (lo, hi) = match word {
        0 => (TWO_OVER_PI[2], TWO_OVER_PI[1]),
        1 => (TWO_OVER_PI[1], TWO_OVER_PI[0]),
        _ => (TWO_OVER_PI[0], 0),
    };
    // `hi << (64 − b)` written as two shifts, so b = 0 shifts by 63 and 1 rather than by 64.
    ((lo >> b) | ((hi << 1) << (63 - b))) as u32
}

/// `|x|` reduced to its quadrant (mod 4) and the remainder `r` in radians, `|r| ≤ π/4` (a few ulp over at the
/// rounding boundaries, which the polynomials absorb).
#[inline(always)]
fn reduce(x: f32) -> (f64, u32) {
    let a = x.abs();
    // f64: |a| < 256, so n < 2⁸ and n·π/2 is one rounding away from exact.
    let t = f64::from(a) * FRAC_2_PI + ROUND_MAGIC_F64;
    let n_small = t.to_bits() as u32;
    let r_small = f64::from(a) - (t - ROUND_MAGIC_F64) * PI_2;
    // Integers: a = m·2^(e−150) with m the 24-bit mantissa. The window of 2/π that matters starts at a bit set by
    // e; indexing by e/8 and shifting m left by e mod 8 keeps every product inside 64 bits.
    let bits = a.to_bits();
    let index = (bits >> 26) & 15;
    let m = u64::from(((bits & 0x007f_ffff) | 0x0080_0000) << ((bits >> 23) & 7));
    let w0 = two_over_pi_bits(184 - 8 * index);
    let w1 = u64::from(two_over_pi_bits(152 - 8 * index));
    let w2 = u64::from(two_over_pi_bits(120 - 8 * index));
    // The top 64 of the 96 low bits of m·(w0:w1:w2): x·2/π mod 4 as a 2.62 fixed-point number.
    let top = (m as u32).wrapping_mul(w0) as u64;
    let fixed = (top << 32)
        .wrapping_add(m * w1)
        .wrapping_add((m * w2) >> 32);
    let n_large = (fixed.wrapping_add(1 << 61) >> 62) as u32;
    let r_large = fixed.wrapping_sub(u64::from(n_large) << 62) as i64 as f64 * PI_2_PER_UNIT;
    if a < SMALL {
        (r_small, n_small)
    } else {
        (r_large, n_large)
    }
}

/// sin(r) for |r| ≤ π/4 (Cephes `sinf`'s polynomial).
#[inline(always)]
fn sin_poly(r: f32) -> f32 {
    let z = r * r;
    let p = -1.951_529_6e-4;
    let p = p * z + 8.332_161e-3;
    let p = p * z - 1.666_665_5e-1;
    p * z * r + r
}

/// cos(r) for |r| ≤ π/4 (Cephes `cosf`'s polynomial).
#[inline(always)]
fn cos_poly(r: f32) -> f32 {
    let z = r * r;
    let p = 2.443_315_7e-5;
    let p = p * z - 1.388_731_6e-3;
    let p = p * z + 4.166_664_6e-2;
    p * z * z - 0.5 * z + 1.0
}

/// sin(n·π/2 + r): quadrant 0 sin r, 1 cos r, 2 −sin r, 3 −cos r. Infinite and NaN `x` give NaN.
#[inline(always)]
fn in_quadrant(x: f32, r: f64, n: u32) -> f32 {
    let r = r as f32;
    let v = if n & 1 == 0 { sin_poly(r) } else { cos_poly(r) };
    let v = if n & 2 == 0 { v } else { -v };
    if x.is_finite() {
        v
    } else {
        f32::NAN
    }
}

/// Sine. Absolute error ≤ 1e-7 (measured 7.7e-8; about 1 ulp of results near ±1) for every finite f32; ±∞ and NaN give NaN.
#[inline(always)]
pub fn sin(x: f32) -> f32 {
    let (r, n) = reduce(x);
    // sin is odd; the reduction took |x|, so x's sign bit goes onto the result (sin(−0) = −0).
    f32::from_bits(in_quadrant(x, r, n).to_bits() ^ (x.to_bits() & 0x8000_0000))
}

/// Cosine. Absolute error ≤ 1e-7 (measured 7.6e-8) for every finite f32; ±∞ and NaN give NaN.
#[inline(always)]
pub fn cos(x: f32) -> f32 {
    // cos x = sin(x + π/2): one quadrant on; cos is even, so |x| needs no sign fix.
    let (r, n) = reduce(x);
    in_quadrant(x, r, n.wrapping_add(1))
}

#[cfg(test)]
#[path = "trig_tests.rs"]
mod tests;
