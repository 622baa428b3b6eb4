//! The AVX2 register tile, for x86-64 CPUs without AVX-512: 6×16 (12 accumulators of eight lanes, two vector
//! loads and six broadcasts per step), and 8×8 register transposes for packing a column-contiguous B.

use std::arch::x86_64::*;

use super::driver::Tile;
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
    ) {
        // Lane j of a mask is all ones when column `from + j` exists (AVX2 masks are vectors, not bits).
        let lanes = |from: usize| -> __m256i {
            let n = cols.saturating_sub(from).min(8) as i32;
            _mm256_cmpgt_epi32(
                _mm256_set1_epi32(n),
                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
            )
        };
        let masks = [lanes(0), lanes(8)];
        let full = cols == NR;
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
        for l in 0..kc {
            // SAFETY: the A panel holds kc steps of MR floats (or MR rows of A); B's row l holds `cols` floats, and
            // masked loads read no further.
            unsafe {
                let row = b.ptr.offset(l as isize * b.rs);
                // Masked loads are slow on some AVX2 CPUs: only the last, partial panel uses them. With 8 columns or
                // fewer the second pointer is past B (`wrapping_add`), and its empty mask reads nothing.
                let (b0, b1) = if full {
                    (_mm256_loadu_ps(row), _mm256_loadu_ps(row.add(8)))
                } else {
                    (
                        _mm256_maskload_ps(row, masks[0]),
                        _mm256_maskload_ps(row.wrapping_add(8), masks[1]),
                    )
                };
                for (i, acc) in acc.iter_mut().enumerate() {
                    let ai = _mm256_set1_ps(if PACKED_A {
                        *a.ptr.add(l * MR + i)
                    } else {
                        *a.ptr.offset(i as isize * a.rs).add(l)
                    });
                    acc[0] = _mm256_fmadd_ps(ai, b0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(ai, b1, acc[1]);
                }
            }
        }
        let alpha_v = _mm256_set1_ps(alpha);
        let beta_v = _mm256_set1_ps(beta);
        if c.cs == 1 {
            for (i, acc) in acc.iter().enumerate().take(rows) {
                for (h, (&mask, &sum)) in masks.iter().zip(acc).enumerate() {
                    // SAFETY: row i, columns 8h.. under `mask` lie inside C; masked lanes are not touched.
                    unsafe {
                        let p = c.ptr.offset(i as isize * c.rs).wrapping_add(8 * h);
                        let mut v = _mm256_mul_ps(sum, alpha_v);
                        // β = 0 must not read C: it may hold NaN.
                        if beta != 0.0 {
                            v = _mm256_fmadd_ps(_mm256_maskload_ps(p, mask), beta_v, v);
                        }
                        _mm256_maskstore_ps(p, mask, v);
                    }
                }
            }
        } else {
            let mut tile = [0.0f32; MR * NR];
            for (i, acc) in acc.iter().enumerate() {
                // SAFETY: `tile` holds MR rows of NR floats.
                unsafe {
                    _mm256_storeu_ps(
                        tile.as_mut_ptr().add(i * NR),
                        _mm256_mul_ps(acc[0], alpha_v),
                    );
                    _mm256_storeu_ps(
                        tile.as_mut_ptr().add(i * NR + 8),
                        _mm256_mul_ps(acc[1], alpha_v),
                    );
                }
            }
            // SAFETY: the tile's rows × cols lie inside C.
            unsafe { super::driver::store_strided(&tile, NR, beta, c, rows, cols) };
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
