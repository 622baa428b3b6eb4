//! [`super::quantize::quantize_row`] written with intrinsics, for the AVX-512 tiles (bytes) and the AVX2 tile
//! (u16 cells). The driver quantises each row in groups of 128 depths, so a call's set-up and its horizontal
//! reductions come every 128 elements; the auto-vectorised version spent most of its time there (BENCHMARKS.md,
//! twelfth run). Both compute the portable version's operations in its order, so they give the same levels, scale
//! and zero point bit for bit (`tests.rs` checks it).

use std::arch::x86_64::*;

use super::quantize::{level, row_params};

/// Round to nearest, ties to even, without raising exceptions: `f32::round_ties_even`.
const NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

/// [`super::quantize::quantize_row`] into bytes.
///
/// # Safety
/// The CPU has AVX-512F; `out.len() >= x.len()`.
#[target_feature(enable = "avx512f")]
pub unsafe fn quantize_u8_avx512(x: &[f32], out: &mut [u8]) -> (f32, i32) {
    let n = x.len();
    let (full, tail) = (n / 16, n % 16);
    let tail_mask = ((1u32 << tail) - 1) as __mmask16;
    let (src, dst) = (x.as_ptr(), out.as_mut_ptr());
    let zero_v = _mm512_setzero_ps();
    // SAFETY: loads of whole vectors below n / 16 · 16 and a masked one past it stay inside `x`; the stores
    // likewise inside `out[..n]` (the caller's contract).
    unsafe {
        let (mut lo, mut hi, mut poison) = (zero_v, zero_v, zero_v);
        let mut scan = |v: __m512| {
            // Operands as the portable `if v < lo { v } else { lo }`: equal values and NaN keep `lo`.
            lo = _mm512_min_ps(v, lo);
            hi = _mm512_max_ps(v, hi);
            poison = _mm512_add_ps(poison, _mm512_mul_ps(v, zero_v));
        };
        for i in 0..full {
            scan(_mm512_loadu_ps(src.add(16 * i)));
        }
        if tail > 0 {
            scan(_mm512_maskz_loadu_ps(tail_mask, src.add(16 * full)));
        }
        let bad = _mm512_reduce_add_ps(poison).is_nan();
        let (scale, inv, zero) =
            row_params(_mm512_reduce_min_ps(lo), _mm512_reduce_max_ps(hi), bad);
        let (inv_v, zero_point, top) = (
            _mm512_set1_ps(inv),
            _mm512_set1_ps(zero),
            _mm512_set1_ps(255.0),
        );
        // `level`'s steps; `max(q, 0)` takes 0 for a NaN (the second operand), as `f32::max` does.
        let levels = |v: __m512| {
            let q = _mm512_roundscale_ps::<NEAREST>(_mm512_mul_ps(v, inv_v));
            let q = _mm512_min_ps(_mm512_max_ps(_mm512_add_ps(q, zero_point), zero_v), top);
            _mm512_cvttps_epi32(q)
        };
        for i in 0..full {
            let q = levels(_mm512_loadu_ps(src.add(16 * i)));
            _mm_storeu_si128(dst.add(16 * i) as *mut __m128i, _mm512_cvtepi32_epi8(q));
        }
        if tail > 0 {
            let q = levels(_mm512_maskz_loadu_ps(tail_mask, src.add(16 * full)));
            _mm512_mask_cvtepi32_storeu_epi8(dst.add(16 * full) as *mut i8, tail_mask, q);
        }
        out[n..].fill(zero as u8);
        (scale, zero as i32)
    }
}

/// [`super::quantize::quantize_row`] into u16 cells (the AVX2 tile's widened levels).
///
/// # Safety
/// The CPU has AVX2 and FMA; `out.len() >= x.len()`.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn quantize_u16_avx2(x: &[f32], out: &mut [u16]) -> (f32, i32) {
    let n = x.len();
    let full = n / 8;
    let (src, dst) = (x.as_ptr(), out.as_mut_ptr());
    let zero_v = _mm256_setzero_ps();
    // SAFETY: whole vectors below n / 8 · 8 stay inside `x` and `out[..n]` (the caller's contract); the rest is
    // indexed.
    unsafe {
        let (mut lo, mut hi, mut poison) = (zero_v, zero_v, zero_v);
        for i in 0..full {
            let v = _mm256_loadu_ps(src.add(8 * i));
            lo = _mm256_min_ps(v, lo);
            hi = _mm256_max_ps(v, hi);
            poison = _mm256_add_ps(poison, _mm256_mul_ps(v, zero_v));
        }
        let (mut lo, mut hi, mut bad) = (
            fold(lo, |m, v| if v < m { v } else { m }),
            fold(hi, |m, v| if v > m { v } else { m }),
            fold(poison, |s, v| s + v).is_nan(),
        );
        for &v in &x[8 * full..] {
            lo = if v < lo { v } else { lo };
            hi = if v > hi { v } else { hi };
            bad |= !v.is_finite();
        }
        let (scale, inv, zero) = row_params(lo, hi, bad);
        let (inv_v, zero_point, top) = (
            _mm256_set1_ps(inv),
            _mm256_set1_ps(zero),
            _mm256_set1_ps(255.0),
        );
        for i in 0..full {
            let v = _mm256_loadu_ps(src.add(8 * i));
            let q = _mm256_round_ps::<NEAREST>(_mm256_mul_ps(v, inv_v));
            let q = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(q, zero_point), zero_v), top);
            let q = _mm256_cvttps_epi32(q);
            let words =
                _mm_packus_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256::<1>(q));
            _mm_storeu_si128(dst.add(8 * i) as *mut __m128i, words);
        }
        for (o, &v) in out[8 * full..n].iter_mut().zip(&x[8 * full..]) {
            *o = u16::from(level(v, inv, zero));
        }
        out[n..].fill(zero as u16);
        (scale, zero as i32)
    }
}

/// The eight lanes of `v` folded left to right with `f`, starting from 0 (the range's start: 0 is in it).
#[inline(always)]
fn fold(v: __m256, f: impl Fn(f32, f32) -> f32) -> f32 {
    // SAFETY: a 32-byte store into an array of 8 floats.
    let lanes: [f32; 8] = unsafe { std::mem::transmute(v) };
    lanes.into_iter().fold(0.0, f)
}
