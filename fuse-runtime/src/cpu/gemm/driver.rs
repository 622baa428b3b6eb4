//! fuse's own SGEMM driver: the GotoBLAS/BLIS loop nest around a register tile that each instruction set supplies
//! ([`super::avx512`], [`super::avx2`]).
//!
//! Why not `matrixmultiply` on x86-64: it allocates its packing buffers on every call, so the first call of a
//! process pays a page fault per 4 KiB of them (thousands per layer). This driver packs into per-thread scratch
//! that a model reserves on every worker when it loads, and it skips packing where packing would cost as much as
//! it saves: `gemm_bench` has the figures.
//!
//! Loop nest: columns in blocks of nc → depth in blocks of kc (B packed into `NR`-column panels, through register
//! transposes when its columns are contiguous and the tile provides them, or read in place when there are few
//! rows) → rows in blocks of mc (A packed into `MR`-row panels, or read in place when its rows are contiguous) →
//! column panels → row panels → the register tile. The block sizes come from the processor's cache sizes
//! ([`Blocking`]).

use super::tile::Prefetch;
use super::Strided;
use crate::cpu::processor::{Caches, Processor};
use crate::cpu::scratch::{with_buffer, Buffer, GEMM_A, GEMM_B};

/// With at most this many rows, B is read in place when its rows are contiguous (see [`blocks`]).
const DIRECT_B_ROWS: usize = 96;

/// The widest B block: the packed block is per-thread scratch reserved at load (kc × 2048 floats, 6 MiB at
/// kc = 768), and no workload's task is wider.
const NC_MOST: usize = 2048;

/// Block sizes of the loop nest for one tile on one processor, in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blocking {
    /// Most depth of a packed block.
    pub kc: usize,
    /// Most rows of a packed A block; a multiple of the tile's `MR`.
    pub mc: usize,
    /// Most columns of a packed B block; a multiple of the tile's `NR`.
    pub nc: usize,
}

impl Blocking {
    /// The blocks for an `mr`×`nr` tile and these caches, after BLIS's analytic model (Low et al., 2016):
    /// - a kc×nr B panel is read by every A panel of a row block: BLIS sizes it to three quarters of L1d, but one
    ///   and a half L1d's worth, most of it read from L2, measured faster on both tiles of a Zen 4 core (one
    ///   thread, `gemm_bench`, BENCHMARKS.md sixteenth run): 3–8 % on the depths above 384 (W3's FFN-out, W2's
    ///   layers, W5's `lm_head`), where fewer depth blocks mean fewer passes over C, and equal at depth 384. On
    ///   the AVX2 tile of a Zen 3 core, kc = 384 had measured 3–10 % faster than 256 on W3's task shapes;
    /// - the mc×kc A block stays in L2 while the B panels of a column block pass: half of L2;
    /// - the kc×nc B block stays in L3 across the row blocks: a quarter of L3, which other cores share, and at
    ///   most [`NC_MOST`] columns.
    pub fn new(mr: usize, nr: usize, caches: Caches) -> Blocking {
        const FLOAT: usize = std::mem::size_of::<f32>();
        let kc = (caches.l1d * 3 / 2 / (nr * FLOAT)).clamp(64, 1024) / 8 * 8;
        let mc = (caches.l2 / 2 / (kc * FLOAT)).clamp(mr, 1024) / mr * mr;
        let l3 = if caches.l3 > 0 {
            caches.l3
        } else {
            4 * caches.l2
        };
        let nc = (l3 / 4 / (kc * FLOAT)).clamp(nr, NC_MOST) / nr * nr;
        Blocking { kc, mc, nc }
    }

    /// The blocks for tile `T` on this processor.
    pub fn for_tile<T: Tile>() -> Blocking {
        Blocking::new(T::MR, T::NR, Processor::get().caches)
    }
}

/// A register tile of one instruction set.
pub trait Tile {
    /// Rows of the tile.
    const MR: usize;
    /// Columns of the tile.
    const NR: usize;
    /// Column panels of a block from which the driver packs a row-contiguous A rather than read it in place:
    /// reading MR rows in place streams MR cache lines at once through every step, which some cores sustain
    /// (the AVX2 tile on Zen 3 and on Sapphire Rapids-class Xeons: in place measured as fast or faster) and
    /// others do not (the AVX-512 tile on those Xeons: 38–48 % of peak in place, 77–82 % packed).
    const PACK_A_PANELS: usize = usize::MAX;

    /// C[rows×cols] ← α·A·B + β·C over `kc` steps of an A panel (packed as `kc` steps of MR floats when
    /// `PACKED_A`, else MR rows of A read in place) and a row-contiguous B panel (packed, or B itself) whose
    /// columns past `cols` are never read. β = 0 must not read C. `prefetch`'s lines are asked into L2 as the
    /// tile goes.
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
        prefetch: Prefetch,
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
    dims: (usize, usize, usize),
    alpha: f32,
    a: Strided<*const f32>,
    b: Strided<*const f32>,
    beta: f32,
    c: Strided<*mut f32>,
) {
    // SAFETY: forwarded contract.
    unsafe { run::<T>(dims, alpha, a, BSource::Strided(b), beta, c) }
}

/// [`sgemm`] with B already packed by [`pack_whole_b`]: `panels` starts at the panel of B's first column here
/// (the product may cover a column range of a wider packed B, starting at a multiple of `T::NR`).
///
/// # Safety
/// The CPU has `T`'s instruction set; `panels` holds `n.div_ceil(T::NR)` panels of k×`T::NR` elements packed
/// from this product's B; A and C satisfy `super::sgemm`'s contract.
pub unsafe fn sgemm_prepacked<T: Tile>(
    (m, k, n): (usize, usize, usize),
    alpha: f32,
    a: Strided<*const f32>,
    panels: Prepacked,
    beta: f32,
    c: Strided<*mut f32>,
) {
    let b = BSource::Packed { panels, depth: k };
    // SAFETY: forwarded contract.
    unsafe { run::<T>((m, k, n), alpha, a, b, beta, c) }
}

/// Either entry point: the empty cases, then [`blocks`] over this thread's packing buffers (none for a B packed
/// at load).
///
/// # Safety
/// As [`sgemm`], B as its [`BSource`] says.
unsafe fn run<T: Tile>(
    (m, k, n): (usize, usize, usize),
    alpha: f32,
    a: Strided<*const f32>,
    b: BSource,
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
    let Blocking { kc, mc, nc } = balanced(Blocking::for_tile::<T>(), (m, k, n), T::MR, T::NR);
    let b_floats = match b {
        BSource::Strided(_)
        | BSource::Packed {
            panels: Prepacked::F16(_),
            ..
        } => kc * nc,
        BSource::Packed {
            panels: Prepacked::F32(_),
            ..
        } => 0,
    };
    with_buffer(&GEMM_A, mc * kc, |apack| {
        with_buffer(&GEMM_B, b_floats, |bpack| {
            // SAFETY: forwarded contract; the buffers have the sizes `blocks` needs.
            unsafe { blocks::<T>((m, k, n), (kc, mc, nc), alpha, a, b, beta, c, apack, bpack) }
        })
    })
}

/// Packs all of a k×n B, once, into `n.div_ceil(T::NR)` panels of k rows of `T::NR` floats (the last panel
/// zero-padded): the layout [`blocks`] packs each kc×nc block into, over the whole depth, so any depth block
/// of any panel is a kc×NR panel at row stride NR, whatever the blocking of the call that reads it.
///
/// # Safety
/// The CPU has `T`'s instruction set; B's k×n elements are readable; `out` holds at least
/// `n.div_ceil(T::NR) · T::NR · k` floats.
pub unsafe fn pack_whole_b<T: Tile>(k: usize, n: usize, b: Strided<*const f32>, out: &mut [f32]) {
    if k == 0 || n == 0 {
        return;
    }
    // SAFETY: forwarded; `pack` with kc = k fills exactly the size above.
    unsafe { pack::<T>(k, n, T::NR, b, out) }
}

/// Where the loop nest's B panels come from.
#[derive(Clone, Copy)]
enum BSource {
    /// B itself: packed block by block into the scratch buffer (or read in place).
    Strided(Strided<*const f32>),
    /// Packed at load in [`pack_whole_b`]'s layout: panels of `depth` rows of NR elements.
    Packed { panels: Prepacked, depth: usize },
}

/// The first panel of a B packed at load, by element type.
#[derive(Clone, Copy)]
pub enum Prepacked {
    /// Read in place by the tile.
    F32(*const f32),
    /// f16: each depth block of a column block widened into the scratch buffer, which the tile reads.
    F16(*const super::half::f16),
}

/// The per-thread buffers [`sgemm`] packs into for tile `T`, with their largest sizes.
pub fn scratch_needs<T: Tile>() -> Vec<(&'static Buffer, usize)> {
    let Blocking { kc, mc, nc } = Blocking::for_tile::<T>();
    vec![(&GEMM_A, mc * kc), (&GEMM_B, kc * nc)]
}

/// The blocks for one product: each dimension split into equal blocks no larger than `most`'s, so a product
/// slightly deeper than kc does not end in a sliver of a block (rows and columns rounded up to whole tiles,
/// depth to multiples of 8 for the 8×8 transposes; never above `most`, whose sizes are whole multiples).
fn balanced(most: Blocking, (m, k, n): (usize, usize, usize), mr: usize, nr: usize) -> Blocking {
    let even = |len: usize, most: usize, unit: usize| {
        let blocks = len.div_ceil(most).max(1);
        len.div_ceil(blocks).next_multiple_of(unit).min(most)
    };
    Blocking {
        kc: even(k, most.kc, 8),
        mc: even(m, most.mc, mr),
        nc: even(n, most.nc, nr),
    }
}

/// The loop nest of [`sgemm`] over its packing buffers (`apack` mc×kc, `bpack` kc×nc floats).
#[allow(clippy::too_many_arguments)]
unsafe fn blocks<T: Tile>(
    (m, k, n): (usize, usize, usize),
    (kc_most, mc_most, nc_most): (usize, usize, usize),
    alpha: f32,
    a: Strided<*const f32>,
    b_source: BSource,
    beta: f32,
    c: Strided<*mut f32>,
    apack: &mut [f32],
    bpack: &mut [f32],
) {
    // A packed-at-load B is read through its own panels (f32), or widened from them block by block into `bpack`
    // (f16); the strided view below is then never dereferenced.
    let (b, prepacked, halves) = match b_source {
        BSource::Strided(b) => (b, None, None),
        BSource::Packed {
            panels: Prepacked::F32(panels),
            depth,
        } => (Strided::new(panels, 0, 0), Some((panels, depth)), None),
        BSource::Packed {
            panels: Prepacked::F16(halves),
            depth,
        } => (
            Strided::new(std::ptr::null(), 0, 0),
            None,
            Some((halves, depth)),
        ),
    };
    // With few rows, each B element is used by at most one A block: packing B would copy it once to read it
    // once. Row-contiguous B is then read in place (masked loads cover the last, partial panel).
    let direct_b = prepacked.is_none()
        && halves.is_none()
        && m <= DIRECT_B_ROWS.min(mc_most)
        && b.cs == 1
        && b.rs % 1024 != 0;
    // Row-contiguous A is read in place: the tile broadcasts its elements from memory either way, and packing
    // would cost as much as the multiply-adds it feeds when there are few columns. Not when the row stride is a
    // multiple of 4 KiB, where the tile's rows would share L1 sets, nor in blocks of as many panels as the tile's
    // `PACK_A_PANELS`.
    let a_in_place = a.cs == 1 && a.rs % 1024 != 0;
    for jc in (0..n).step_by(nc_most) {
        let nc = nc_most.min(n - jc);
        let direct_a = a_in_place && nc.div_ceil(T::NR) < T::PACK_A_PANELS;
        for pc in (0..k).step_by(kc_most) {
            let kc = kc_most.min(k - pc);
            let b_block = offset(b, pc, jc);
            if let Some((halves, depth)) = halves {
                // Each panel's rows pc.. of the whole depth, widened to where `pack` would have put them.
                for (p, out) in bpack[..nc.div_ceil(T::NR) * T::NR * kc]
                    .chunks_exact_mut(T::NR * kc)
                    .enumerate()
                {
                    let start = (jc / T::NR + p) * depth * T::NR + pc * T::NR;
                    // SAFETY: the pack holds every panel of the product over `depth` rows (the caller's
                    // contract), so rows pc..pc + kc of this one are inside it.
                    let src = unsafe { std::slice::from_raw_parts(halves.add(start), T::NR * kc) };
                    super::half::widen(src, out);
                }
            } else if !direct_b && prepacked.is_none() {
                // SAFETY: the block lies inside B; `bpack` holds kc×nc floats.
                unsafe { pack::<T>(kc, nc, T::NR, b_block, bpack) };
            }
            // Later depth blocks add to what the first one wrote.
            let beta = if pc == 0 { beta } else { 1.0 };
            for ic in (0..m).step_by(mc_most) {
                let mc = mc_most.min(m - ic);
                let a_block = offset(a, ic, pc);
                if !direct_a {
                    // SAFETY: the block lies inside A; `apack` holds mc×kc floats.
                    unsafe { pack_a::<T>(mc, kc, a_block, apack) };
                }
                for jr in (0..nc).step_by(T::NR) {
                    let cols = T::NR.min(nc - jr);
                    let panel = if let Some((panels, depth)) = prepacked {
                        // Panel (jc + jr) / NR of the whole depth, from row pc on.
                        Strided {
                            ptr: panels
                                .wrapping_add((jc + jr) / T::NR * depth * T::NR + pc * T::NR),
                            rs: T::NR as isize,
                            cs: 1,
                        }
                    } else if direct_b {
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
                    // A packed-at-load B is read from memory once per call: the next panel's block (a whole
                    // panel further on), shared out between this block's row tiles, is asked into L2 while they
                    // work. W2's f32 MLP (64 rows, 100 MB of weights a call) ran 5 % faster with it on an Intel
                    // Xeon (BENCHMARKS.md, twenty-eighth run).
                    let next_panel = prepacked
                        .filter(|_| jr + T::NR < nc)
                        .map(|(_, depth)| panel.ptr.wrapping_add(depth * T::NR));
                    let next_bytes = kc * T::NR * std::mem::size_of::<f32>();
                    let tiles = mc.div_ceil(T::MR);
                    for ir in (0..mc).step_by(T::MR) {
                        let rows = T::MR.min(mc - ir);
                        let prefetch = next_panel.map_or(Prefetch::NONE, |next| {
                            Prefetch::over_depth(next.cast(), next_bytes, (ir / T::MR, tiles), kc)
                        });
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
                                    kc, alpha, a_panel, panel, beta, c_tile, rows, cols, prefetch,
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
                                    kc, alpha, a_panel, panel, beta, c_tile, rows, cols, prefetch,
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

#[cfg(test)]
mod tests {
    use super::*;

    const KIB: usize = 1 << 10;

    #[test]
    fn blocking_follows_the_caches() {
        let zen3 = Caches {
            l1d: 32 * KIB,
            l2: 512 * KIB,
            l3: 32 * KIB * KIB,
        };
        // AVX2 6×16: a 768×16 B panel is 48 KiB (1½ L1d); 84×768 of A is 252 KiB (½ of L2).
        assert_eq!(
            Blocking::new(6, 16, zen3),
            Blocking {
                kc: 768,
                mc: 84,
                nc: 2048
            }
        );
        // AVX-512 12×32 with a 48 KiB L1d, 2 MiB L2, no L3: B's block takes a quarter of four L2s' worth
        // (2 MiB / (576 × 4 bytes) = 910 columns, whole 32-column panels: 896).
        let intel = Caches {
            l1d: 48 * KIB,
            l2: 2048 * KIB,
            l3: 0,
        };
        assert_eq!(
            Blocking::new(12, 32, intel),
            Blocking {
                kc: 576,
                mc: 444,
                nc: 896
            }
        );
        // Small caches: every size shrinks, and stays a whole number of tiles.
        let small = Caches {
            l1d: 8 * KIB,
            l2: 64 * KIB,
            l3: 256 * KIB,
        };
        assert_eq!(
            Blocking::new(6, 16, small),
            Blocking {
                kc: 192,
                mc: 42,
                nc: 80
            }
        );
    }

    /// Balanced blocks never exceed the most, keep whole tiles, use as few blocks as the most allows, and cover
    /// the dimension.
    #[test]
    fn balanced_blocks_cover_evenly() {
        let most = Blocking {
            kc: 384,
            mc: 168,
            nc: 2048,
        };
        for len in 1..3000 {
            let got = balanced(most, (len, len, len), 6, 16);
            for (block, limit, unit) in [(got.kc, 384, 8), (got.mc, 168, 6), (got.nc, 2048, 16)] {
                assert!(block <= limit && block % unit == 0, "{len}: {got:?}");
                assert_eq!(len.div_ceil(block), len.div_ceil(limit), "{len}: {got:?}");
            }
        }
        // A depth just past one block splits in two halves, not a block and a sliver.
        assert_eq!(balanced(most, (1, 400, 1), 6, 16).kc, 200);
    }
}
