//! The AVX2 register tile, for x86-64 CPUs without AVX-512: 6×16 over 8-lane vectors (12 accumulators, two vector
//! loads and six broadcasts per step), and 8×8 register transposes for packing a column-contiguous B. The tile
//! itself is `super::tile`; this file supplies its vector operations.

use std::arch::x86_64::*;

use super::driver::Tile;
use super::tile::{tile_body, Lanes, Prefetch};
use super::Strided;

/// The AVX2 + FMA tile.
pub struct Avx2;

const MR: usize = 6;
const NR: usize = 16;

impl Tile for Avx2 {
    const MR: usize = MR;
    const NR: usize = NR;

    #[target_feature(enable = "avx2,fma")]
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
        // SAFETY: forwarded contract, on this instruction set.
        unsafe {
            tile_body::<Ymm, MR, MR, PACKED_A>(kc, alpha, a, b, beta, c, rows, cols, prefetch)
        }
    }

    /// [`Tile::pack_transposed`] by 8×8 blocks: 8 source columns are 8 contiguous loads, transposed in registers
    /// into 8 panel rows.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn pack_transposed(
        kc: usize,
        cols: usize,
        width: usize,
        m: Strided<*const f32>,
        panel: &mut [f32],
    ) -> (usize, usize) {
        let (rows8, cols8) = (kc / 8 * 8, cols / 8 * 8);
        for l0 in (0..rows8).step_by(8) {
            for j0 in (0..cols8).step_by(8) {
                // SAFETY: columns j0..j0 + 8 hold rows l0..l0 + 8 (inside the block); the stores land in panel rows
                // l0..l0 + 8, columns j0..j0 + 8 ≤ width.
                unsafe {
                    let src = |t: usize| m.ptr.offset((j0 + t) as isize * m.cs).add(l0);
                    let columns = std::array::from_fn(|t| _mm256_loadu_ps(src(t)));
                    for (t, row) in transpose8(columns).into_iter().enumerate() {
                        _mm256_storeu_ps(panel.as_mut_ptr().add((l0 + t) * width + j0), row);
                    }
                }
            }
        }
        (rows8, cols8)
    }
}

/// The transpose of an 8×8 block held as 8 rows: unpack pairs of floats, shuffle pairs of pairs (4×4
/// transposes per 128-bit half), then swap the halves.
#[target_feature(enable = "avx2,fma")]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    let t: [__m256; 8] = std::array::from_fn(|i| {
        let (g, q) = (i / 4, i % 4);
        let (a, b) = (r[4 * g + 2 * (q / 2)], r[4 * g + 2 * (q / 2) + 1]);
        if q % 2 == 0 {
            _mm256_unpacklo_ps(a, b)
        } else {
            _mm256_unpackhi_ps(a, b)
        }
    });
    // u[4g + q], half h: column 4h + q of rows 4g..4g+4.
    let u: [__m256; 8] = std::array::from_fn(|i| {
        let (g, q) = (i / 4, i % 4);
        let (a, b) = (t[4 * g + q / 2], t[4 * g + 2 + q / 2]);
        if q % 2 == 0 {
            _mm256_shuffle_ps::<0x44>(a, b)
        } else {
            _mm256_shuffle_ps::<0xEE>(a, b)
        }
    });
    std::array::from_fn(|i| {
        let q = i % 4;
        if i < 4 {
            _mm256_permute2f128_ps::<0x20>(u[q], u[4 + q])
        } else {
            _mm256_permute2f128_ps::<0x31>(u[q], u[4 + q])
        }
    })
}

/// AVX2 vectors of 8 lanes; a mask is a vector whose lanes are all ones where they count.
pub(crate) struct Ymm;

impl Lanes for Ymm {
    type V = __m256;
    type Mask = __m256i;
    const LANES: usize = 8;
    const REGISTERS: usize = 16;

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        unsafe { _mm256_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        unsafe { _mm256_set1_ps(x) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn load_masked(p: *const f32, mask: __m256i) -> __m256 {
        unsafe { _mm256_maskload_ps(p, mask) }
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        unsafe { _mm256_storeu_ps(p, v) }
    }
    #[inline(always)]
    unsafe fn store_masked(p: *mut f32, mask: __m256i, v: __m256) {
        unsafe { _mm256_maskstore_ps(p, mask, v) }
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn add(a: __m256, b: __m256) -> __m256 {
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn sum(v: __m256) -> f32 {
        unsafe {
            let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
        }
    }
    #[inline(always)]
    unsafe fn store_sums4(p: *mut f32, [a, b, c, d]: [__m256; 4]) {
        unsafe {
            // As `Zmm`'s: each 128-bit lane [a, b, c, d] of its lanes, then the two lanes added.
            let ab = _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
            let cd = _mm256_add_ps(_mm256_unpacklo_ps(c, d), _mm256_unpackhi_ps(c, d));
            let abcd = _mm256_add_ps(
                _mm256_shuffle_ps::<0b01_00_01_00>(ab, cd),
                _mm256_shuffle_ps::<0b11_10_11_10>(ab, cd),
            );
            let sums = _mm_add_ps(
                _mm256_castps256_ps128(abcd),
                _mm256_extractf128_ps::<1>(abcd),
            );
            _mm_storeu_ps(p, sums)
        }
    }
    #[inline(always)]
    unsafe fn first(n: usize) -> __m256i {
        unsafe {
            _mm256_cmpgt_epi32(
                _mm256_set1_epi32(n as i32),
                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
            )
        }
    }
}
