//! [`super::quantize::quantize_row`] written with intrinsics: each row's groups into bytes for the AVX-512 tiles
//! ([`quantize_groups_u8_avx512`], their ranges reduced 16 at a time), one group into u16 cells for the AVX2 tile.
//! The driver quantises each row in groups of 128 to 512 depths, so a call's set-up and its horizontal reductions
//! come once per 128 to 512 elements; the auto-vectorised version spent most of its time there (BENCHMARKS.md,
//! twelfth run, groups of 128).
//! Both give the portable version's levels, scale and zero point bit for bit (`tests.rs` checks it).

use std::arch::x86_64::*;
use std::mem::MaybeUninit;

use super::quantize::{level, row_params};

/// Round to nearest, ties to even, without raising exceptions: `f32::round_ties_even`.
const NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

/// Groups whose ranges are reduced together: one per lane of a vector.
const BATCH: usize = 16;

/// Rows `0..rows` of A (row r's values at `row(r)`, all as long) quantised per group of `group` depths into bytes,
/// as [`super::quantize::quantize_row`] does each group on its own: row r's group g's levels at
/// `cells[r·stride + g·group..]` (its last group's running to `(r + 1)·stride`, padded with its zero point), its
/// scale and zero point at `scales[r·groups + g]` and `zeros[r·groups + g]`.
///
/// Done group by group, a group's fixed work (three horizontal reductions, two divisions, the branches of
/// `row_params`) cost as much as its 128 values, about a cycle per element. Here the ranges of 16 groups are
/// reduced together in one tree of shuffles, each lane ending with one group's, and their parameters are computed
/// in vectors. The 16 are a row's, or several short rows' (a row of 384 has three groups), so that a row of 384
/// pays a fifth of a batch's reductions and divisions rather than all of them (in cache, 15 → 9.3 cycles per 16
/// values: BENCHMARKS.md, fortieth run). Levels are made in integers: `round(v · inv)` converted with the
/// rounding mode set, then `+ zero` and `max(·, 0)` in i32 and an unsigned saturating narrowing for
/// `min(·, 255)`. Both are the portable operations exactly: min and max give the same value in any order (a NaN
/// never enters them, and −0 never replaces +0), every vector operation is the IEEE one the scalar code does,
/// and with `inv` finite `|v · inv| ≤ 255` for a v inside its group's range, so the conversion is exact, while a
/// NaN (only in a group whose `inv` is 0) converts to `i32::MIN`, which `max` turns into 0 as the float `max`
/// does. A group outside the common case (a NaN or an infinity, no width, a range so narrow that `inv`
/// overflows) takes the scalar definitions.
///
/// # Safety
/// The CPU has AVX-512F; `scales` and `zeros` hold `rows` times the groups of a row; `cells` holds `rows` rows of
/// `stride ≥` a row's length.
#[target_feature(enable = "avx512f")]
pub unsafe fn quantize_rows_u8_avx512<'a>(
    rows: usize,
    row: impl Fn(usize) -> &'a [f32],
    group: usize,
    (cells, stride): (&mut [u8], usize),
    scales: &mut [f32],
    zeros: &mut [f32],
) {
    let Some(k) = (rows > 0).then(|| row(0).len()) else {
        return;
    };
    let groups = scales.len() / rows;
    let span = |g: usize| (g * group, ((g + 1) * group).min(k));
    // A batch is whole rows' groups (as many rows as fit) or, for a row of more than `BATCH` groups, part of one
    // row's.
    let rows_per_batch = (BATCH / groups).max(1);
    for r0 in (0..rows).step_by(rows_per_batch) {
        let batch_rows = r0..(r0 + rows_per_batch).min(rows);
        for g0 in (0..groups).step_by(BATCH) {
            let batch_groups = g0..(g0 + BATCH).min(groups);
            let mut ranges = Ranges::new();
            for r in batch_rows.clone() {
                let x = row(r);
                for g in batch_groups.clone() {
                    let (from, to) = span(g);
                    // SAFETY: AVX-512F (the caller's contract); at most `BATCH` groups a batch.
                    unsafe { ranges.scan(&x[from..to]) };
                }
            }
            // SAFETY: AVX-512F.
            let params = unsafe { ranges.params() };
            let mut j = 0;
            for r in batch_rows.clone() {
                let (x, cells) = (row(r), &mut cells[r * stride..(r + 1) * stride]);
                for g in batch_groups.clone() {
                    let (from, to) = span(g);
                    let end = if g + 1 == groups { stride } else { to };
                    // SAFETY: AVX-512F; `from..end` lies inside the row's cells (`end ≥ to`, and they hold the
                    // row).
                    unsafe {
                        group_levels(
                            &x[from..to],
                            &mut cells[from..end],
                            params.inv[j],
                            params.zero[j],
                        )
                    };
                    let f = r * groups + g;
                    (scales[f], zeros[f]) = (params.scale[j], (params.zero[j] as i32) as f32);
                    j += 1;
                }
            }
        }
    }
}

/// [`quantize_rows_u8_avx512`] on the one row `x`, its cells the whole of `cells`.
///
/// # Safety
/// As [`quantize_rows_u8_avx512`]: AVX-512F; `scales` and `zeros` hold one value per group of `x`;
/// `cells.len() >= x.len()`.
#[target_feature(enable = "avx512f")]
pub unsafe fn quantize_groups_u8_avx512(
    x: &[f32],
    group: usize,
    cells: &mut [u8],
    scales: &mut [f32],
    zeros: &mut [f32],
) {
    let stride = cells.len();
    // SAFETY: forwarded.
    unsafe { quantize_rows_u8_avx512(1, |_| x, group, (cells, stride), scales, zeros) }
}

/// Up to [`BATCH`] groups' ranges, in the order scanned: the lanes of each one's running min and max (from 0, the
/// range's start), and a bit per group for whether it holds a NaN or an infinity. Only the scanned groups' vectors
/// are written: zeroing all 32 was a 2 KiB `memset` per batch, 6–7 % of the quantiser's time on rows of 384.
struct Ranges {
    lo: [MaybeUninit<__m512>; BATCH],
    hi: [MaybeUninit<__m512>; BATCH],
    count: usize,
    bad: u32,
}

/// [`Ranges::params`]: lane j of each belongs to group j.
struct Params {
    scale: [f32; BATCH],
    inv: [f32; BATCH],
    zero: [f32; BATCH],
}

/// One group's running min, max and poison (`Σ v · 0`) over its vectors.
#[derive(Clone, Copy)]
struct Scan {
    lo: __m512,
    hi: __m512,
    poison: __m512,
}

impl Scan {
    #[target_feature(enable = "avx512f")]
    fn new() -> Scan {
        let zero = _mm512_setzero_ps();
        Scan {
            lo: zero,
            hi: zero,
            poison: zero,
        }
    }

    /// Operands as the portable `if v < lo { v } else { lo }`: equal values and NaN keep `lo`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn take(&mut self, v: __m512) {
        self.lo = _mm512_min_ps(v, self.lo);
        self.hi = _mm512_max_ps(v, self.hi);
        self.poison = _mm512_fmadd_ps(v, _mm512_setzero_ps(), self.poison);
    }

    /// Both scans' values together: exact, as neither running min or max ever holds a NaN or a −0.
    #[target_feature(enable = "avx512f")]
    #[inline]
    fn merge(self, other: Scan) -> Scan {
        Scan {
            lo: _mm512_min_ps(other.lo, self.lo),
            hi: _mm512_max_ps(other.hi, self.hi),
            poison: _mm512_add_ps(self.poison, other.poison),
        }
    }
}

impl Ranges {
    fn new() -> Ranges {
        Ranges {
            lo: [const { MaybeUninit::uninit() }; BATCH],
            hi: [const { MaybeUninit::uninit() }; BATCH],
            count: 0,
            bad: 0,
        }
    }

    /// Scans the next group's values `x`, on two running scans over alternate vectors: one scan's min, max and
    /// poison each wait on their last value (four cycles a vector), two overlap. `v · 0` is NaN exactly for a NaN
    /// or an infinity, and a sum of NaN stays NaN.
    ///
    /// # Safety
    /// AVX-512F; fewer than [`BATCH`] groups scanned before.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn scan(&mut self, x: &[f32]) {
        let (full, tail) = (x.len() / 16, x.len() % 16);
        let src = x.as_ptr();
        let (mut even, mut odd) = (Scan::new(), Scan::new());
        // SAFETY: whole vectors below `full · 16` and a masked one past it stay inside `x`.
        unsafe {
            for i in 0..full / 2 {
                even.take(_mm512_loadu_ps(src.add(32 * i)));
                odd.take(_mm512_loadu_ps(src.add(32 * i + 16)));
            }
            if full % 2 == 1 {
                even.take(_mm512_loadu_ps(src.add(16 * (full - 1))));
            }
            if tail > 0 {
                odd.take(_mm512_maskz_loadu_ps(
                    (1u16 << tail) - 1,
                    src.add(16 * full),
                ));
            }
        }
        let all = even.merge(odd);
        let j = self.count;
        self.lo[j].write(all.lo);
        self.hi[j].write(all.hi);
        self.bad |= u32::from(_mm512_cmp_ps_mask::<_CMP_UNORD_Q>(all.poison, all.poison) != 0) << j;
        self.count += 1;
    }

    /// The scanned groups' `(scale, 1 / scale, zero point)` as `row_params` defines them.
    ///
    /// # Safety
    /// AVX-512F.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn params(&self) -> Params {
        let count = self.count;
        // SAFETY: `scan` wrote the first `count` of each (`MaybeUninit<T>` has `T`'s layout).
        let (lo, hi) = unsafe {
            (
                std::slice::from_raw_parts(self.lo.as_ptr().cast::<__m512>(), count),
                std::slice::from_raw_parts(self.hi.as_ptr().cast::<__m512>(), count),
            )
        };
        let lo = reduce_lanes(lo, |a, b| _mm512_min_ps(a, b));
        let hi = reduce_lanes(hi, |a, b| _mm512_max_ps(a, b));
        let (nothing, levels) = (_mm512_setzero_ps(), _mm512_set1_ps(255.0));
        let width = _mm512_sub_ps(hi, lo);
        let inv = _mm512_div_ps(levels, width);
        let scale = _mm512_div_ps(width, levels);
        let zero = _mm512_roundscale_ps::<NEAREST>(_mm512_mul_ps(_mm512_sub_ps(nothing, lo), inv));
        let zero = _mm512_min_ps(_mm512_max_ps(zero, nothing), levels);
        let mut p = Params {
            scale: [0.0; BATCH],
            inv: [0.0; BATCH],
            zero: [0.0; BATCH],
        };
        // SAFETY: each array holds 16 floats.
        unsafe {
            _mm512_storeu_ps(p.scale.as_mut_ptr(), scale);
            _mm512_storeu_ps(p.inv.as_mut_ptr(), inv);
            _mm512_storeu_ps(p.zero.as_mut_ptr(), zero);
        }
        // The common case: no NaN or infinity, a positive width and a finite `inv`. Any other group takes the
        // scalar definitions.
        let infinity = _mm512_set1_ps(f32::INFINITY);
        let common = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(width, nothing)
            & _mm512_cmp_ps_mask::<_CMP_LT_OQ>(width, infinity)
            & _mm512_cmp_ps_mask::<_CMP_LT_OQ>(inv, infinity)
            & !(self.bad as u16);
        let others = u32::from(!common) & ((1 << count) - 1);
        if others != 0 {
            let (mut lo_at, mut hi_at) = ([0.0f32; BATCH], [0.0f32; BATCH]);
            // SAFETY: each array holds 16 floats.
            unsafe {
                _mm512_storeu_ps(lo_at.as_mut_ptr(), lo);
                _mm512_storeu_ps(hi_at.as_mut_ptr(), hi);
            }
            for j in (0..count).filter(|j| others & (1 << j) != 0) {
                (p.scale[j], p.inv[j], p.zero[j]) =
                    row_params(lo_at[j], hi_at[j], self.bad & (1 << j) != 0);
            }
        }
        p
    }
}

/// The vectors `v` (at most 16) each reduced over its lanes with `op` (associative and commutative on the values it
/// meets, and 0 where it meets only zeros), result lane j holding `v[j]`'s: halves, then quarters, then pairs and
/// single lanes of two vectors are combined at each step, so 15 operations and 30 shuffles serve all 16 (one
/// vector's own reduction takes 4 and 4). Vectors past `v`'s end count as zero, and the combinations made only of
/// them are skipped.
#[target_feature(enable = "avx512f")]
#[inline]
fn reduce_lanes(v: &[__m512], op: impl Fn(__m512, __m512) -> __m512) -> __m512 {
    let (zero, count) = (_mm512_setzero_ps(), v.len());
    let at = |j: usize| v.get(j).copied().unwrap_or(zero);
    // Vector pairs (a, b): a's 256-bit halves combined in the low half, b's in the high one.
    let halves: [__m512; 8] = std::array::from_fn(|i| {
        if 2 * i >= count {
            return zero;
        }
        let (a, b) = (at(2 * i), at(2 * i + 1));
        op(
            _mm512_shuffle_f32x4::<0x44>(a, b),
            _mm512_shuffle_f32x4::<0xEE>(a, b),
        )
    });
    // 128-bit lane L of quarters[i] holds vector 4i + L's four partial values.
    let quarters: [__m512; 4] = std::array::from_fn(|i| {
        let (c, d) = (halves[2 * i], halves[2 * i + 1]);
        if 4 * i >= count {
            return zero;
        }
        op(
            _mm512_shuffle_f32x4::<0x88>(c, d),
            _mm512_shuffle_f32x4::<0xDD>(c, d),
        )
    });
    // Within each 128-bit lane L, elements 0 and 1 hold vector 8i + L's two partial values, 2 and 3 vector
    // 8i + 4 + L's.
    let pairs: [__m512; 2] = std::array::from_fn(|i| {
        let (p, q) = (quarters[2 * i], quarters[2 * i + 1]);
        if 8 * i >= count {
            return zero;
        }
        op(
            _mm512_shuffle_ps::<0x88>(p, q),
            _mm512_shuffle_ps::<0xDD>(p, q),
        )
    });
    // Element e of 128-bit lane L (lane 4L + e) holds vector 4e + L's value: a 4×4 transpose puts j at lane j.
    let (r, s) = (pairs[0], pairs[1]);
    let done = op(
        _mm512_shuffle_ps::<0x88>(r, s),
        _mm512_shuffle_ps::<0xDD>(r, s),
    );
    let transpose = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    _mm512_permutexvar_ps(transpose, done)
}

/// One group's levels into `out` (its values, then its zero point up to `out`'s end).
///
/// # Safety
/// AVX-512F; `out.len() >= x.len()`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn group_levels(x: &[f32], out: &mut [u8], inv: f32, zero: f32) {
    let n = x.len();
    if !inv.is_finite() {
        for (o, &v) in out[..n].iter_mut().zip(x) {
            *o = level(v, inv, zero);
        }
    } else {
        let (full, tail) = (n / 16, n % 16);
        let tail_mask = ((1u32 << tail) - 1) as __mmask16;
        let (src, dst) = (x.as_ptr(), out.as_mut_ptr());
        let (inv_v, zero_point, floor) = (
            _mm512_set1_ps(inv),
            _mm512_set1_epi32(zero as i32),
            _mm512_setzero_si512(),
        );
        let levels = |v: __m512| {
            let q = _mm512_cvt_roundps_epi32::<NEAREST>(_mm512_mul_ps(v, inv_v));
            _mm512_max_epi32(_mm512_add_epi32(q, zero_point), floor)
        };
        // SAFETY: whole vectors below `full · 16` and a masked one past it stay inside `x` and `out[..n]`.
        unsafe {
            for i in 0..full {
                let q = levels(_mm512_loadu_ps(src.add(16 * i)));
                _mm_storeu_si128(dst.add(16 * i) as *mut __m128i, _mm512_cvtusepi32_epi8(q));
            }
            if tail > 0 {
                let q = levels(_mm512_maskz_loadu_ps(tail_mask, src.add(16 * full)));
                _mm512_mask_cvtusepi32_storeu_epi8(dst.add(16 * full) as *mut i8, tail_mask, q);
            }
        }
    }
    // Only the row's last group pads (a fill of nothing still calls `memset`).
    if out.len() > n {
        out[n..].fill(zero as u8);
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
