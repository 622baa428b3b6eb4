//! IEEE binary16 (f16) for weights held in f16: rounding at load and widening at call time, through the `half`
//! crate (which converts with F16C's `vcvtph2ps`/`vcvtps2ph` where the CPU has it, detected at run time).
//!
//! A weight held in f16 keeps 11 significant bits (bf16 keeps 8) over a range of ±65504. Rounding is to nearest
//! with ties to even; a finite value beyond the range has no f16, and [`to_f16`] says so rather than turning it
//! into an infinity: the caller keeps that weight in f32. Widening is exact.

pub use half::f16;
use half::slice::HalfFloatSliceExt;

/// `x` rounded to f16 (to nearest, ties to even; subnormals kept), or `None` when it is finite and rounds beyond
/// ±65504. Infinities and NaNs stay what they are.
pub fn to_f16(x: f32) -> Option<f16> {
    let h = f16::from_f32(x);
    (h.is_finite() || !x.is_finite()).then_some(h)
}

/// Widens `src` into the start of `dst`, which is at least as long: a loop of `vcvtph2ps` where the CPU has F16C
/// (the `half` crate's slice conversion calls a function per 8 values, which measured twice as slow a decoding
/// step), else the `half` crate's.
pub fn widen(src: &[f16], dst: &mut [f32]) {
    let dst = &mut dst[..src.len()];
    #[cfg(target_arch = "x86_64")]
    if has_f16c() && std::is_x86_feature_detected!("avx") {
        // SAFETY: the CPU has AVX and F16C (checked); the slices have the same length.
        unsafe { widen_f16c(src, dst) };
        return;
    }
    src.convert_to_f32_slice(dst);
}

/// # Safety
/// The CPU has AVX and F16C; `src` and `dst` have the same length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn widen_f16c(src: &[f16], dst: &mut [f32]) {
    use std::arch::x86_64::{__m128i, _mm256_cvtph_ps, _mm256_storeu_ps, _mm_loadu_si128};
    let whole = src.len() / 8 * 8;
    let (s, d) = (src.as_ptr() as *const u16, dst.as_mut_ptr());
    for i in (0..whole).step_by(8) {
        // SAFETY: i + 8 ≤ the length of both; unaligned loads and stores; f16 is a u16 in memory.
        unsafe {
            _mm256_storeu_ps(
                d.add(i),
                _mm256_cvtph_ps(_mm_loadu_si128(s.add(i) as *const __m128i)),
            )
        };
    }
    for i in whole..src.len() {
        dst[i] = src[i].to_f32();
    }
}

/// Whether this CPU converts f16 in hardware: f16 packs are made only where it does.
pub fn has_f16c() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_range_edges_and_the_rounding() {
        let bits = |x: f32| to_f16(x).map(f16::to_bits);
        assert_eq!(bits(65504.0), Some(0x7bff));
        // Halfway between 65504 and 65536 rounds to even, which is 65536: out of range.
        assert_eq!(bits(65520.0), None);
        assert_eq!(bits(65519.0), Some(0x7bff));
        assert_eq!(bits(-1e6), None);
        assert_eq!(bits(f32::INFINITY), Some(0x7c00));
        assert!(to_f16(f32::NAN).is_some_and(f16::is_nan));
        assert_eq!(bits(2f32.powi(-24)), Some(1));
        // Exactly half the smallest subnormal is a tie, to even: zero; anything above rounds up.
        assert_eq!(bits(2f32.powi(-25)), Some(0));
        assert_eq!(bits(2f32.powi(-25) * 1.0001), Some(1));
        // 1 + 2⁻¹¹ is a tie between 1 and 1 + 2⁻¹⁰: to even, 1.
        assert_eq!(bits(1.0 + 2f32.powi(-11)), Some(0x3c00));
        assert_eq!(bits(1.0 + 3.0 * 2f32.powi(-11)), Some(0x3c02));
        assert_eq!(bits(-0.0), Some(0x8000));
    }

    #[test]
    fn widening_is_exact_and_round_trips() {
        let all: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
        let mut wide = vec![0.0f32; all.len() + 3];
        widen(&all, &mut wide);
        for (&h, &w) in all.iter().zip(&wide) {
            if h.is_nan() {
                assert!(w.is_nan());
                continue;
            }
            assert_eq!(w.to_bits(), h.to_f32().to_bits(), "{:#x}", h.to_bits());
            assert_eq!(
                to_f16(w).map(f16::to_bits),
                Some(h.to_bits()),
                "{:#x}",
                h.to_bits()
            );
        }
    }
}
