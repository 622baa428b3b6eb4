//! The AVX-512 register tile: 12×32 over 16-lane vectors (24 accumulators, two vector loads and twelve
//! broadcasts per step, fewer loads per FMA than a 16×16 tile), and 16×16 register transposes for packing a
//! column-contiguous B. The tile itself is `super::tile`; this file supplies its vector operations.

use std::arch::x86_64::*;

use super::driver::Tile;
use super::tile::{tile_body, Lanes, Prefetch};
use super::Strided;

/// The AVX-512F tile.
pub struct Avx512;

impl Tile for Avx512 {
    const MR: usize = MR;
    const NR: usize = NR;
    // Packing pays from two panels on: each packed A panel is then read at least twice (`gemm_bench`).
    const PACK_A_PANELS: usize = 2;

    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile<const PACKED_A: bool>(
        kc: usize,
        alpha: f32,
        a: Strided<*const f32>,
        b: Strided<*const f32>,
        beta: f32,
        c: Strided<*mut f32>,
        rows: usize,
        cols: usize,
        prefetch: Prefetch,
    ) {
        // The last rows of a block on a tile of their height rather than on a whole one whose extra rows are
        // discarded: a 64-row product (W2's) is five tiles of 12 and one of 4, not six of 12.
        // SAFETY (each arm): forwarded contract, on this instruction set; rows ≤ the tile's height ≤ MR.
        unsafe {
            match rows {
                0..=4 => tile_body::<Zmm, 4, MR, PACKED_A>(
                    kc, alpha, a, b, beta, c, rows, cols, prefetch,
                ),
                5..=8 => tile_body::<Zmm, 8, MR, PACKED_A>(
                    kc, alpha, a, b, beta, c, rows, cols, prefetch,
                ),
                _ => tile_body::<Zmm, MR, MR, PACKED_A>(
                    kc, alpha, a, b, beta, c, rows, cols, prefetch,
                ),
            }
        }
    }

    /// [`Tile::pack_transposed`] by 16×16 blocks: 16 source columns are 16 contiguous loads, transposed in
    /// registers into 16 panel rows. A panel narrower than 16 (an A panel of the tile's 12 rows) is
    /// [`pack_narrow`]'s.
    #[target_feature(enable = "avx512f")]
    unsafe fn pack_transposed(
        kc: usize,
        cols: usize,
        width: usize,
        m: Strided<*const f32>,
        panel: &mut [f32],
    ) -> (usize, usize) {
        if width < 16 {
            // SAFETY: forwarded contract.
            return unsafe { pack_narrow(kc, cols, width, m, panel) };
        }
        if !width.is_multiple_of(16) {
            return (0, 0);
        }
        let (rows16, cols16) = (kc / 16 * 16, cols / 16 * 16);
        for l0 in (0..rows16).step_by(16) {
            for j0 in (0..cols16).step_by(16) {
                // SAFETY: columns j0..j0 + 16 hold rows l0..l0 + 16 (inside the block); the stores land in panel
                // rows l0..l0 + 16, columns j0..j0 + 16 ≤ width.
                unsafe {
                    let src = |t: usize| m.ptr.offset((j0 + t) as isize * m.cs).add(l0);
                    let columns = std::array::from_fn(|t| _mm512_loadu_ps(src(t)));
                    for (t, row) in transpose16(columns).into_iter().enumerate() {
                        _mm512_storeu_ps(panel.as_mut_ptr().add((l0 + t) * width + j0), row);
                    }
                }
            }
        }
        (rows16, cols16)
    }
}

const MR: usize = 12;
const NR: usize = 32;

/// [`Tile::pack_transposed`] for a panel of `width` < 16 columns: each 16-step block of its `cols` source columns
/// goes through a 16×16 transpose with the missing columns as zeros, and each of the 16 panel rows is stored
/// under a mask of `width` lanes, its padding columns included. Packing A for the 12×32 tile element by element
/// took 32 µs of a 410 µs W3 projection (256×384×384) on an Intel Xeon, and 15 µs this way (BENCHMARKS.md,
/// thirty-first run).
#[target_feature(enable = "avx512f")]
unsafe fn pack_narrow(
    kc: usize,
    cols: usize,
    width: usize,
    m: Strided<*const f32>,
    panel: &mut [f32],
) -> (usize, usize) {
    let rows16 = kc / 16 * 16;
    // SAFETY: width < 16 lanes.
    let mask = unsafe { Zmm::first(width) };
    for l0 in (0..rows16).step_by(16) {
        // SAFETY: columns 0..cols hold rows l0..l0 + 16 (inside the block); the masked stores write panel rows
        // l0..l0 + 16, columns 0..width, inside the panel's kc rows of `width`.
        unsafe {
            let columns = std::array::from_fn(|t| {
                if t < cols {
                    _mm512_loadu_ps(m.ptr.offset(t as isize * m.cs).add(l0))
                } else {
                    _mm512_setzero_ps()
                }
            });
            for (t, row) in transpose16(columns).into_iter().enumerate() {
                _mm512_mask_storeu_ps(panel.as_mut_ptr().add((l0 + t) * width), mask, row);
            }
        }
    }
    (rows16, cols)
}

/// The transpose of a 16×16 block held as 16 rows: unpack pairs of floats, then pairs of pairs, within each
/// 128-bit lane (giving 4×4 transposes per lane), then regroup the lanes with two rounds of lane shuffles.
#[target_feature(enable = "avx512f")]
pub(crate) fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
    let ps = _mm512_castps_pd;
    let pd = _mm512_castpd_ps;
    // t[4g..4g+4] from rows 4g..4g+4: float pairs of rows (4g, 4g+1) and (4g+2, 4g+3).
    let t: [__m512; 16] = std::array::from_fn(|i| {
        let (g, q) = (i / 4, i % 4);
        let (a, b) = (r[4 * g + 2 * (q / 2)], r[4 * g + 2 * (q / 2) + 1]);
        if q % 2 == 0 {
            _mm512_unpacklo_ps(a, b)
        } else {
            _mm512_unpackhi_ps(a, b)
        }
    });
    // u[4g + q], lane k: column 4k + q of rows 4g..4g+4.
    let u: [__m512; 16] = std::array::from_fn(|i| {
        let (g, q) = (i / 4, i % 4);
        let (a, b) = (ps(t[4 * g + q / 2]), ps(t[4 * g + 2 + q / 2]));
        pd(if q % 2 == 0 {
            _mm512_unpacklo_pd(a, b)
        } else {
            _mm512_unpackhi_pd(a, b)
        })
    });
    // Row 4k + q of the transpose: lane k of u[q], u[4 + q], u[8 + q], u[12 + q].
    let mut out = [_mm512_setzero_ps(); 16];
    for q in 0..4 {
        let low = _mm512_shuffle_f32x4::<0x44>(u[q], u[4 + q]);
        let high = _mm512_shuffle_f32x4::<0xEE>(u[q], u[4 + q]);
        let low2 = _mm512_shuffle_f32x4::<0x44>(u[8 + q], u[12 + q]);
        let high2 = _mm512_shuffle_f32x4::<0xEE>(u[8 + q], u[12 + q]);
        out[q] = _mm512_shuffle_f32x4::<0x88>(low, low2);
        out[4 + q] = _mm512_shuffle_f32x4::<0xDD>(low, low2);
        out[8 + q] = _mm512_shuffle_f32x4::<0x88>(high, high2);
        out[12 + q] = _mm512_shuffle_f32x4::<0xDD>(high, high2);
    }
    out
}

/// AVX-512F vectors of 16 lanes, with bit masks.
pub(crate) struct Zmm;

impl Lanes for Zmm {
    type V = __m512;
    type Mask = __mmask16;
    const LANES: usize = 16;
    const REGISTERS: usize = 32;

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        unsafe { _mm512_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        unsafe { _mm512_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn load_masked(p: *const f32, mask: __mmask16) -> __m512 {
        unsafe { _mm512_maskz_loadu_ps(mask, p) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        unsafe { _mm512_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn store_masked(p: *mut f32, mask: __mmask16, v: __m512) {
        unsafe { _mm512_mask_storeu_ps(p, mask, v) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn add(a: __m512, b: __m512) -> __m512 {
        unsafe { _mm512_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn sum(v: __m512) -> f32 {
        unsafe { _mm512_reduce_add_ps(v) }
    }
    #[inline(always)]
    unsafe fn store_sums4(p: *mut f32, [a, b, c, d]: [__m512; 4]) {
        unsafe {
            // Each 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3], and the same of c and d.
            let ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
            let cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
            // Each 128-bit lane: [a, b, c, d] of its lanes.
            let abcd = _mm512_add_ps(
                _mm512_shuffle_ps::<0b01_00_01_00>(ab, cd),
                _mm512_shuffle_ps::<0b11_10_11_10>(ab, cd),
            );
            let high = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(abcd)));
            let half = _mm256_add_ps(_mm512_castps512_ps256(abcd), high);
            let quarter = _mm_add_ps(
                _mm256_castps256_ps128(half),
                _mm256_extractf128_ps::<1>(half),
            );
            _mm_storeu_ps(p, quarter)
        }
    }
    #[inline(always)]
    unsafe fn first(n: usize) -> __mmask16 {
        ((1u32 << n) - 1) as __mmask16
    }
}
