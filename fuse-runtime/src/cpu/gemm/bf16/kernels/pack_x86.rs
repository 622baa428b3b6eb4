//! Packing an operand B (attention's keys or values) into the bf16 panels with AVX-512 BF16: the same words as
//! [`super::pack_operand`], sixteen at a time. The portable packer rounds a row or column with vectors but places
//! each word on its own (16 scalar stores per key of 32 depths, 32 per pair of value rows), which took half as long
//! as the `vdpbf16ps` tile itself on an encoder's heads of 32 (BENCHMARKS.md, forty-third run).

use std::arch::x86_64::*;

use super::NR;
use crate::cpu::gemm::avx512::{transpose16, Zmm};
use crate::cpu::gemm::tile::Lanes;
use crate::cpu::gemm::Strided;

/// Lanes of a vector of f32, and words of a vector of bf16 pairs.
const LANES: usize = Zmm::LANES;

/// Packs B (k×n) into `panels` (`k.div_ceil(2) × n.next_multiple_of(NR)` words, each a pair of depths of one
/// column, the even depth in the low half) as [`super::pack_operand`] does, padding included, when B's depths
/// (a key matrix read transposed) or its columns (a value matrix) are contiguous; `false`, having written nothing,
/// for any other B. `vcvtneps2bf16` rounds to nearest even as the portable packer's rounding does.
///
/// # Safety
/// The CPU has AVX-512F and AVX-512 BF16; B's k×n elements are readable; `panels` holds the words above.
#[target_feature(enable = "avx512f,avx512bf16,avx512vl")]
pub unsafe fn pack_operand_avx512(
    b: Strided<*const f32>,
    (k, n): (usize, usize),
    panels: &mut [u32],
) -> bool {
    let mut out = Words {
        panels,
        pairs: k.div_ceil(2),
        width: n.next_multiple_of(NR),
    };
    debug_assert!(out.panels.len() >= out.pairs * out.width);
    // SAFETY (both): forwarded contract.
    if b.rs == 1 {
        unsafe { pack_depth_contiguous(b, (k, n), &mut out) };
    } else if b.cs == 1 {
        unsafe { pack_rows(b, (k, n), &mut out) };
    } else {
        return false;
    }
    true
}

/// The panels being written: `pairs` pairs of depths by `width` columns.
struct Words<'a> {
    panels: &'a mut [u32],
    pairs: usize,
    width: usize,
}

impl Words<'_> {
    /// Stores the words of pair `p` < `pairs` for columns `j0..j0 + 16` (`j0` a multiple of 16 below `width`),
    /// contiguous within their panel.
    ///
    /// # Safety
    /// The CPU has AVX-512F.
    #[inline(always)]
    unsafe fn store(&mut self, p: usize, j0: usize, words: __m512i) {
        debug_assert!(p < self.pairs && j0.is_multiple_of(LANES) && j0 < self.width);
        let at = (j0 / NR) * self.pairs * NR + p * NR + j0 % NR;
        // SAFETY: pair p of columns j0..j0 + 16 lies inside the panels (`pack_operand_avx512`'s contract).
        unsafe { _mm512_storeu_si512(self.panels.as_mut_ptr().add(at) as *mut _, words) };
    }
}

/// Lanes `0..count` of a mask, all of them from 16 on.
#[inline(always)]
fn first(count: usize) -> __mmask16 {
    // SAFETY: `Zmm::first` only computes the mask; the count is at most its 16 lanes.
    unsafe { Zmm::first(count.min(LANES)) }
}

/// B's columns each hold their k depths contiguously (K read transposed): 16 columns at a time, each column's 32
/// depths are rounded into 16 words (a vector per column), and a 16×16 transpose turns them into 16 pairs of
/// depths for the 16 columns, one store each.
///
/// # Safety
/// As [`pack_operand_avx512`], with `b.rs == 1`.
#[target_feature(enable = "avx512f,avx512bf16,avx512vl")]
unsafe fn pack_depth_contiguous(
    b: Strided<*const f32>,
    (k, n): (usize, usize),
    out: &mut Words<'_>,
) {
    for j0 in (0..out.width).step_by(LANES) {
        for l0 in (0..k).step_by(2 * LANES) {
            let (low, high) = (first(k - l0), first(k.saturating_sub(l0 + LANES)));
            let columns: [__m512; LANES] = std::array::from_fn(|t| {
                if j0 + t >= n {
                    return _mm512_setzero_ps();
                }
                // SAFETY: column j0 + t < n holds depths l0.. below k; the masks keep the loads inside it.
                unsafe {
                    let column = b.ptr.offset((j0 + t) as isize * b.cs).add(l0);
                    let lo = _mm512_maskz_loadu_ps(low, column);
                    let hi = _mm512_maskz_loadu_ps(high, column.add(LANES.min(k - l0)));
                    // Depths l0.. as bf16 in order: each 32-bit lane is one pair, the even depth low.
                    _mm512_castsi512_ps(std::mem::transmute::<__m512bh, __m512i>(
                        _mm512_cvtne2ps_pbh(hi, lo),
                    ))
                }
            });
            for (q, words) in transpose16(columns).into_iter().enumerate() {
                let p = l0 / 2 + q;
                if p < out.pairs {
                    // SAFETY: the CPU has AVX-512F.
                    unsafe { out.store(p, j0, _mm512_castps_si512(words)) };
                }
            }
        }
    }
}

/// B's rows each hold their n columns contiguously (V): each pair of rows is rounded 16 columns at a time, and
/// the two rows' bf16 values are widened into the low and high halves of 16 words.
///
/// # Safety
/// As [`pack_operand_avx512`], with `b.cs == 1`.
#[target_feature(enable = "avx512f,avx512bf16,avx512vl")]
unsafe fn pack_rows(b: Strided<*const f32>, (k, n): (usize, usize), out: &mut Words<'_>) {
    let row = |l: usize, j0: usize| -> __m512i {
        if l >= k || j0 >= n {
            return _mm512_setzero_si512();
        }
        // SAFETY: row l < k holds columns j0.. below n; the mask keeps the load inside it.
        unsafe {
            let x = _mm512_maskz_loadu_ps(first(n - j0), b.ptr.offset(l as isize * b.rs).add(j0));
            _mm512_cvtepu16_epi32(std::mem::transmute::<__m256bh, __m256i>(
                _mm512_cvtneps_pbh(x),
            ))
        }
    };
    for p in 0..out.pairs {
        for j0 in (0..out.width).step_by(LANES) {
            let words =
                _mm512_or_si512(row(2 * p, j0), _mm512_slli_epi32::<16>(row(2 * p + 1, j0)));
            // SAFETY: the CPU has AVX-512F.
            unsafe { out.store(p, j0, words) };
        }
    }
}
