//! fuse's own SGEMM driver: the GotoBLAS/BLIS loop nest around a register tile that each instruction set supplies
//! ([`super::avx512`], [`super::avx2`]).
//!
//! Why not `matrixmultiply` on x86-64: it allocates its packing buffers on every call, so the first call of a
//! process pays a page fault per 4 KiB of them (thousands per layer). This driver packs into per-thread scratch
//! that a model reserves on every worker when it loads, and it skips packing where packing would cost as much as
//! it saves: `gemm_bench` has the figures.
//!
//! Loop nest: columns in blocks of [`NC`] → depth in blocks of [`KC`] (B packed into `NR`-column panels, through
//! register transposes when its columns are contiguous and the tile provides them, or read in place when there
//! are few rows) → rows in blocks of [`MC`] (A packed into `MR`-row panels, or read in place when its rows are
//! contiguous) → column panels → row panels → the register tile.

use super::Strided;
use crate::cpu::scratch::{with_buffer, Buffer, GEMM_A, GEMM_B};

/// Depth of one packed block: a 32-column B panel of KC rows is 32 KiB.
pub const KC: usize = 256;
/// Rows of one packed A block (MC×KC = 96 KiB, held in L2); a multiple of every tile's `MR`.
pub const MC: usize = 96;
/// Columns of one packed B block (KC×NC = 1 MiB).
pub const NC: usize = 1024;

/// A register tile of one instruction set.
pub trait Tile {
    /// Rows of the tile.
    const MR: usize;
    /// Columns of the tile.
    const NR: usize;

    /// C[rows×cols] ← α·A·B + β·C over `kc` steps of an A panel (packed as `kc` steps of MR floats when
    /// `PACKED_A`, else MR rows of A read in place) and a row-contiguous B panel (packed, or B itself) whose
    /// columns past `cols` are never read. β = 0 must not read C.
    ///
    /// # Safety
    /// The CPU has the tile's instruction set; the panels hold what is described above; C's rows × cols are
    /// valid for writes (and reads when β ≠ 0).
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
    );

    /// Packs the whole register-transposable blocks of a `width`-column panel whose source has unit row stride
    /// (element (l, j) at `m.ptr + l + j·cs`) and returns how many rows and columns it filled; the driver copies
    /// the rest element by element. Tiles without a transposing packer fill nothing.
    ///
    /// # Safety
    /// The CPU has the tile's instruction set; the panel's block of `m` is readable; `panel` holds kc rows of
    /// `width` floats.
    unsafe fn pack_transposed(
        _kc: usize,
        _cols: usize,
        _width: usize,
        _m: Strided<*const f32>,
        _panel: &mut [f32],
    ) -> (usize, usize) {
        (0, 0)
    }
}

/// C ← α·A·B + β·C for an m×k A, a k×n B and an m×n C (the contract of `super::sgemm`) with tile `T`.
///
/// # Safety
/// The CPU has `T`'s instruction set; the operands satisfy `super::sgemm`'s contract.
pub unsafe fn sgemm<T: Tile>(
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
            unsafe { blocks::<T>((m, k, n), alpha, a, b, beta, c, apack, bpack) }
        })
    })
}

/// The per-thread buffers [`sgemm`] packs into, with their sizes.
pub fn scratch_needs() -> Vec<(&'static Buffer, usize)> {
    vec![(&GEMM_A, MC * KC), (&GEMM_B, KC * NC)]
}

/// The loop nest of [`sgemm`] over its packing buffers (`apack` MC×KC, `bpack` KC×NC floats).
#[allow(clippy::too_many_arguments)]
unsafe fn blocks<T: Tile>(
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
    // multiple of 4 KiB, where the tile's rows would share L1 sets.
    let direct_a = a.cs == 1 && a.rs % 1024 != 0;
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            let b_block = offset(b, pc, jc);
            if !direct_b {
                // SAFETY: the block lies inside B; `bpack` holds KC×NC floats.
                unsafe { pack::<T>(kc, nc, T::NR, b_block, bpack) };
            }
            // Later depth blocks add to what the first one wrote.
            let beta = if pc == 0 { beta } else { 1.0 };
            for ic in (0..m).step_by(MC) {
                let mc = MC.min(m - ic);
                let a_block = offset(a, ic, pc);
                if !direct_a {
                    // SAFETY: the block lies inside A; `apack` holds MC×KC floats.
                    unsafe { pack_a::<T>(mc, kc, a_block, apack) };
                }
                for jr in (0..nc).step_by(T::NR) {
                    let cols = T::NR.min(nc - jr);
                    let panel = if direct_b {
                        Strided {
                            ptr: b_block.ptr.wrapping_add(jr),
                            rs: b.rs,
                            cs: 1,
                        }
                    } else {
                        Strided {
                            ptr: bpack.as_ptr().wrapping_add(jr * kc),
                            rs: T::NR as isize,
                            cs: 1,
                        }
                    };
                    for ir in (0..mc).step_by(T::MR) {
                        let rows = T::MR.min(mc - ir);
                        let tile = c
                            .ptr
                            .wrapping_offset((ic + ir) as isize * c.rs + (jc + jr) as isize * c.cs);
                        let c_tile = Strided { ptr: tile, ..c };
                        // SAFETY: the A panel holds kc steps of MR rows (a partial panel read in place is packed
                        // first, since rows past `rows` do not exist); the B panel's kc rows hold `cols` readable
                        // columns; the tile's rows × cols lie inside C.
                        unsafe {
                            if direct_a && rows == T::MR {
                                let a_panel = offset(a_block, ir, 0);
                                T::tile::<false>(
                                    kc, alpha, a_panel, panel, beta, c_tile, rows, cols,
                                );
                            } else {
                                let a_panel = if direct_a {
                                    pack_a::<T>(rows, kc, offset(a_block, ir, 0), apack);
                                    apack.as_ptr()
                                } else {
                                    apack.as_ptr().add(ir * kc)
                                };
                                let a_panel = Strided {
                                    ptr: a_panel,
                                    rs: 1,
                                    cs: T::MR as isize,
                                };
                                T::tile::<true>(
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

/// The kc×w block of `m` (kc rows) into `width`-column panels, each `kc` rows of `width` floats, the last panel
/// zero-padded. B packs this way directly; A packs as its transpose, so each step of an A panel holds MR rows.
unsafe fn pack<T: Tile>(
    kc: usize,
    w: usize,
    width: usize,
    m: Strided<*const f32>,
    out: &mut [f32],
) {
    for (p, panel) in out[..w.div_ceil(width) * width * kc]
        .chunks_exact_mut(width * kc)
        .enumerate()
    {
        let j0 = p * width;
        let cols = width.min(w - j0);
        // A column-contiguous source (a Linear layer's Wᵀ) goes through the tile's register transposes; what
        // they leave is copied element by element below.
        let (rows_done, cols_done) = if m.rs == 1 {
            // SAFETY: the panel's block of `m` is readable; `panel` holds kc rows of `width`.
            unsafe { T::pack_transposed(kc, cols, width, offset(m, 0, j0), panel) }
        } else {
            (0, 0)
        };
        for (l, row) in panel.chunks_exact_mut(width).enumerate() {
            let from = if l < rows_done { cols_done } else { 0 };
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

/// A's mc×kc block into MR-row panels: its transpose's kc×mc block packed like B.
unsafe fn pack_a<T: Tile>(mc: usize, kc: usize, a: Strided<*const f32>, out: &mut [f32]) {
    let transposed = Strided::new(a.ptr, a.cs, a.rs);
    // SAFETY: forwarded.
    unsafe { pack::<T>(kc, mc, T::MR, transposed, out) }
}

/// C[rows×cols] ← tile + β·C for a C without unit column stride, from a tile of rows of `width` (α already
/// applied); β = 0 does not read C.
///
/// # Safety
/// C's rows × cols are valid for writes (and reads when β ≠ 0).
pub unsafe fn store_strided(
    tile: &[f32],
    width: usize,
    beta: f32,
    c: Strided<*mut f32>,
    rows: usize,
    cols: usize,
) {
    for i in 0..rows {
        for j in 0..cols {
            // SAFETY: (i, j) is inside C.
            unsafe {
                let p = c.ptr.offset(i as isize * c.rs + j as isize * c.cs);
                let v = tile[i * width + j];
                *p = if beta != 0.0 { v + beta * *p } else { v };
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
