//! The AVX-512 register tile: 12×32 (24 accumulators, two vector loads and twelve broadcasts per step, fewer
//! loads per FMA than a 16×16 tile), and 16×16 register transposes for packing a column-contiguous B.

use std::arch::x86_64::*;

use super::driver::Tile;
use super::Strided;

/// The AVX-512F tile.
pub struct Avx512;

impl Tile for Avx512 {
    const MR: usize = MR;
    const NR: usize = NR;

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
    ) {
        let lanes = |from: usize| -> __mmask16 {
            let n = cols.saturating_sub(from).min(16);
            ((1u32 << n) - 1) as __mmask16
        };
        let masks = [lanes(0), lanes(16)];
        let full = cols == NR;
        let mut acc = [[_mm512_setzero_ps(); 2]; MR];
        for l in 0..kc {
            // SAFETY: the A panel holds kc steps of MR floats; B's row l holds `cols` floats (masked loads read no
            // further).
            unsafe {
                let row = b.ptr.offset(l as isize * b.rs);
                // Only the last, partial panel needs masked loads. With 16 columns or fewer the second pointer is
                // past B (`wrapping_add`), and its empty mask reads nothing.
                let (b0, b1) = if full {
                    (_mm512_loadu_ps(row), _mm512_loadu_ps(row.add(16)))
                } else {
                    (
                        _mm512_maskz_loadu_ps(masks[0], row),
                        _mm512_maskz_loadu_ps(masks[1], row.wrapping_add(16)),
                    )
                };
                for (i, acc) in acc.iter_mut().enumerate() {
                    let ai = _mm512_set1_ps(if PACKED_A {
                        *a.ptr.add(l * MR + i)
                    } else {
                        *a.ptr.offset(i as isize * a.rs).add(l)
                    });
                    acc[0] = _mm512_fmadd_ps(ai, b0, acc[0]);
                    acc[1] = _mm512_fmadd_ps(ai, b1, acc[1]);
                }
            }
        }
        let alpha_v = _mm512_set1_ps(alpha);
        let beta_v = _mm512_set1_ps(beta);
        if c.cs == 1 {
            for (i, acc) in acc.iter().enumerate().take(rows) {
                for (h, (&mask, &sum)) in masks.iter().zip(acc).enumerate() {
                    // SAFETY: row i, columns 16h.. under `mask` lie inside C; masked lanes are not touched.
                    unsafe {
                        let p = c.ptr.offset(i as isize * c.rs).wrapping_add(16 * h);
                        let mut v = _mm512_mul_ps(sum, alpha_v);
                        // β = 0 must not read C: it may hold NaN.
                        if beta != 0.0 {
                            v = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, p), beta_v, v);
                        }
                        _mm512_mask_storeu_ps(p, mask, v);
                    }
                }
            }
        } else {
            let mut tile = [0.0f32; MR * NR];
            for (i, acc) in acc.iter().enumerate() {
                // SAFETY: `tile` holds MR rows of NR floats.
                unsafe {
                    _mm512_storeu_ps(
                        tile.as_mut_ptr().add(i * NR),
                        _mm512_mul_ps(acc[0], alpha_v),
                    );
                    _mm512_storeu_ps(
                        tile.as_mut_ptr().add(i * NR + 16),
                        _mm512_mul_ps(acc[1], alpha_v),
                    );
                }
            }
            // SAFETY: the tile's rows × cols lie inside C.
            unsafe { super::driver::store_strided(&tile, NR, beta, c, rows, cols) };
        }
    }

    /// [`Tile::pack_transposed`] by 16×16 blocks: 16 source columns are 16 contiguous loads, transposed in
    /// registers into 16 panel rows.
    #[target_feature(enable = "avx512f")]
    unsafe fn pack_transposed(
        kc: usize,
        cols: usize,
        width: usize,
        m: Strided<*const f32>,
        panel: &mut [f32],
    ) -> (usize, usize) {
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

/// The transpose of a 16×16 block held as 16 rows: unpack pairs of floats, then pairs of pairs, within each
/// 128-bit lane (giving 4×4 transposes per lane), then regroup the lanes with two rounds of lane shuffles.
#[target_feature(enable = "avx512f")]
fn transpose16(r: [__m512; 16]) -> [__m512; 16] {
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
