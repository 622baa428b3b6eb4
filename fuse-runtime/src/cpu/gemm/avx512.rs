//! fuse's own SGEMM for CPUs with AVX-512: the GotoBLAS/BLIS loop nest around a 12×32 register tile.
//!
//! Why not `matrixmultiply` here: it allocates its packing buffers on every call, so the first call of a process
//! pays a page fault per 4 KiB of them (thousands per layer). This driver packs into per-thread scratch that a
//! model reserves on every worker when it loads. Its 12×32 tile (24 accumulators, two vector loads and twelve
//! broadcasts per step) also needs fewer loads per FMA than a 16×16 tile, and it skips packing where packing
//! would cost as much as it saves: `gemm_bench` has the figures.
//!
//! Loop nest: columns in blocks of [`NC`] → depth in blocks of [`KC`] (B packed into [`NR`]-column panels, through
//! 16×16 register transposes when its columns are contiguous, or read in place when there are few rows) → rows in blocks of [`MC`] (A packed into [`MR`]-row panels, or read in
//! place when its rows are contiguous) → column panels → row panels → the register tile.

use std::arch::x86_64::*;

use super::Strided;
use crate::cpu::scratch::{with_buffer, Buffer, GEMM_A, GEMM_B};

/// Rows of the register tile.
pub const MR: usize = 12;
/// Columns of the register tile: two 16-lane vectors.
pub const NR: usize = 32;
/// Depth of one packed block: a 32-column B panel of KC rows is 32 KiB.
pub const KC: usize = 256;
/// Rows of one packed A block (MC×KC = 96 KiB, held in L2).
pub const MC: usize = 96;
/// Columns of one packed B block (KC×NC = 1 MiB).
pub const NC: usize = 1024;

/// C ← α·A·B + β·C for an m×k A, a k×n B and an m×n C (the contract of `super::sgemm`).
///
/// # Safety
/// The CPU must support AVX-512F; the operands must satisfy `super::sgemm`'s contract.
#[target_feature(enable = "avx512f")]
pub unsafe fn sgemm(
    (m, k, n): (usize, usize, usize),
    alpha: f32,
    a: Strided<*const f32>,
    b: Strided<*const f32>,
    beta: f32,
    c: Strided<*mut f32>,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        // SAFETY: C's elements are valid for writes (and reads when β ≠ 0).
        unsafe { scale(m, n, beta, c) };
        return;
    }
    with_buffer(&GEMM_A, MC * KC, |apack| {
        with_buffer(&GEMM_B, KC * NC, |bpack| {
            // SAFETY: forwarded contract; the buffers have the sizes `blocks` needs.
            unsafe { blocks((m, k, n), alpha, a, b, beta, c, apack, bpack) }
        })
    })
}

/// The per-thread buffers [`sgemm`] packs into, with their sizes.
pub fn scratch_needs() -> Vec<(&'static Buffer, usize)> {
    vec![(&GEMM_A, MC * KC), (&GEMM_B, KC * NC)]
}

/// The loop nest of [`sgemm`] over its packing buffers (`apack` MC×KC, `bpack` KC×NC floats).
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn blocks(
    (m, k, n): (usize, usize, usize),
    alpha: f32,
    a: Strided<*const f32>,
    b: Strided<*const f32>,
    beta: f32,
    c: Strided<*mut f32>,
    apack: &mut [f32],
    bpack: &mut [f32],
) {
    // With few rows, each B element is used by at most one A block: packing B would copy it once to read it
    // once. Row-contiguous B is then read in place (masked loads cover the last, partial panel).
    let direct_b = m <= MC && b.cs == 1;
    // Row-contiguous A is read in place: the tile broadcasts its elements from memory either way, and packing
    // would cost as much as the multiply-adds it feeds when there are few columns. Not when the row stride is a
    // multiple of 4 KiB, where the tile's twelve rows would share L1 sets.
    let direct_a = a.cs == 1 && a.rs % 1024 != 0;
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            let b_block = offset(b, pc, jc);
            if !direct_b {
                // SAFETY: the block lies inside B; `bpack` holds KC×NC floats.
                unsafe { pack_b(kc, nc, b_block, bpack) };
            }
            // Later depth blocks add to what the first one wrote.
            let beta = if pc == 0 { beta } else { 1.0 };
            for ic in (0..m).step_by(MC) {
                let mc = MC.min(m - ic);
                let a_block = offset(a, ic, pc);
                if !direct_a {
                    // SAFETY: the block lies inside A; `apack` holds MC×KC floats.
                    unsafe { pack_a(mc, kc, a_block, apack) };
                }
                for jr in (0..nc).step_by(NR) {
                    let cols = NR.min(nc - jr);
                    let panel = if direct_b {
                        Strided {
                            ptr: b_block.ptr.wrapping_add(jr),
                            rs: b.rs,
                            cs: 1,
                        }
                    } else {
                        Strided {
                            ptr: bpack.as_ptr().wrapping_add(jr * kc),
                            rs: NR as isize,
                            cs: 1,
                        }
                    };
                    for ir in (0..mc).step_by(MR) {
                        let rows = MR.min(mc - ir);
                        let tile = c
                            .ptr
                            .wrapping_offset((ic + ir) as isize * c.rs + (jc + jr) as isize * c.cs);
                        let c_tile = Strided { ptr: tile, ..c };
                        // SAFETY: the A panel holds kc steps of MR rows (a partial panel read in place is packed
                        // first, since rows past `rows` do not exist); the B panel's kc rows hold `cols` readable
                        // columns; the tile's rows × cols lie inside C.
                        unsafe {
                            if direct_a && rows == MR {
                                let a_panel = offset(a_block, ir, 0);
                                tile_kernel::<false>(
                                    kc, alpha, a_panel, panel, beta, c_tile, rows, cols,
                                );
                            } else {
                                let a_panel = if direct_a {
                                    pack_a(rows, kc, offset(a_block, ir, 0), apack);
                                    apack.as_ptr()
                                } else {
                                    apack.as_ptr().add(ir * kc)
                                };
                                let a_panel = Strided {
                                    ptr: a_panel,
                                    rs: 1,
                                    cs: MR as isize,
                                };
                                tile_kernel::<true>(
                                    kc, alpha, a_panel, panel, beta, c_tile, rows, cols,
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

fn offset(m: Strided<*const f32>, i: usize, j: usize) -> Strided<*const f32> {
    Strided {
        ptr: m.ptr.wrapping_offset(i as isize * m.rs + j as isize * m.cs),
        ..m
    }
}

/// The kc×w block of `m` (kc rows) into W-column panels, each `kc` rows of W floats, the last panel zero-padded.
/// B packs this way directly; A packs as its transpose, so each step of an A panel holds MR rows.
#[target_feature(enable = "avx512f")]
unsafe fn pack<const W: usize>(kc: usize, w: usize, m: Strided<*const f32>, out: &mut [f32]) {
    for (p, panel) in out[..w.div_ceil(W) * W * kc]
        .chunks_exact_mut(W * kc)
        .enumerate()
    {
        let j0 = p * W;
        let cols = W.min(w - j0);
        // A column-contiguous source (a Linear layer's Wᵀ) goes through 16×16 register transposes; what they
        // leave (the last rows and columns short of 16) is copied element by element below.
        let (rows16, cols16) = if m.rs == 1 && W.is_multiple_of(16) {
            // SAFETY: the panel's block of `m` is readable; `panel` holds kc rows of W.
            unsafe { pack_transposed::<W>(kc, cols, offset(m, 0, j0), panel) }
        } else {
            (0, 0)
        };
        for (l, row) in panel.chunks_exact_mut(W).enumerate() {
            let from = if l < rows16 { cols16 } else { 0 };
            // SAFETY: row l, columns j0..j0 + cols, is inside the block.
            let src = unsafe { m.ptr.offset(l as isize * m.rs + j0 as isize * m.cs) };
            if m.cs == 1 {
                // SAFETY: as above, and contiguous.
                row[..cols].copy_from_slice(unsafe { std::slice::from_raw_parts(src, cols) });
            } else {
                for (j, v) in row[..cols].iter_mut().enumerate().skip(from) {
                    // SAFETY: as above.
                    *v = unsafe { *src.offset(j as isize * m.cs) };
                }
            }
            row[cols..].fill(0.0);
        }
    }
}

/// Packs the whole 16×16 blocks of a panel whose source has unit row stride (element (l, j) at `m.ptr + l +
/// j·cs`): 16 source columns are 16 contiguous loads, transposed in registers into 16 panel rows. Returns how
/// many rows and columns of the panel it filled (multiples of 16).
#[target_feature(enable = "avx512f")]
unsafe fn pack_transposed<const W: usize>(
    kc: usize,
    cols: usize,
    m: Strided<*const f32>,
    panel: &mut [f32],
) -> (usize, usize) {
    let (rows16, cols16) = (kc / 16 * 16, cols / 16 * 16);
    for l0 in (0..rows16).step_by(16) {
        for j0 in (0..cols16).step_by(16) {
            // SAFETY: columns j0..j0 + 16 hold rows l0..l0 + 16 (inside the block); the stores land in panel
            // rows l0..l0 + 16, columns j0..j0 + 16 < W.
            unsafe {
                let src = |t: usize| m.ptr.offset((j0 + t) as isize * m.cs).add(l0);
                let columns = std::array::from_fn(|t| _mm512_loadu_ps(src(t)));
                for (t, row) in transpose16(columns).into_iter().enumerate() {
                    _mm512_storeu_ps(panel.as_mut_ptr().add((l0 + t) * W + j0), row);
                }
            }
        }
    }
    (rows16, cols16)
}

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

/// B's kc×nc block into NR-column panels.
unsafe fn pack_b(kc: usize, nc: usize, b: Strided<*const f32>, out: &mut [f32]) {
    // SAFETY: forwarded.
    unsafe { pack::<NR>(kc, nc, b, out) }
}

/// A's mc×kc block into MR-row panels: its transpose's kc×mc block packed like B.
unsafe fn pack_a(mc: usize, kc: usize, a: Strided<*const f32>, out: &mut [f32]) {
    let transposed = Strided::new(a.ptr, a.cs, a.rs);
    // SAFETY: forwarded.
    unsafe { pack::<MR>(kc, mc, transposed, out) }
}

/// The register tile: C[rows×cols] ← α·A·B + β·C over `kc` steps of an A panel (packed, or MR rows of A read in
/// place) and a row-contiguous B panel (packed, or B itself) whose columns past `cols` are never read.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_kernel<const PACKED_A: bool>(
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
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    for l in 0..kc {
        // SAFETY: the A panel holds kc steps of MR floats; B's row l holds `cols` floats (masked loads read no
        // further).
        unsafe {
            let row = b.ptr.offset(l as isize * b.rs);
            let b0 = _mm512_maskz_loadu_ps(masks[0], row);
            // `wrapping_add`: with 16 columns or fewer this points past B, and the empty mask reads nothing.
            let b1 = _mm512_maskz_loadu_ps(masks[1], row.wrapping_add(16));
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
        for i in 0..rows {
            for j in 0..cols {
                // SAFETY: (i, j) is inside C.
                unsafe {
                    let p = c.ptr.offset(i as isize * c.rs + j as isize * c.cs);
                    *p = if beta != 0.0 {
                        tile[i * NR + j] + beta * *p
                    } else {
                        tile[i * NR + j]
                    };
                }
            }
        }
    }
}

/// C ← β·C (the k = 0 product), writing zeros without reading when β = 0.
unsafe fn scale(m: usize, n: usize, beta: f32, c: Strided<*mut f32>) {
    for i in 0..m {
        for j in 0..n {
            // SAFETY: (i, j) is inside C.
            unsafe {
                let p = c.ptr.offset(i as isize * c.rs + j as isize * c.cs);
                *p = if beta != 0.0 { beta * *p } else { 0.0 };
            }
        }
    }
}
