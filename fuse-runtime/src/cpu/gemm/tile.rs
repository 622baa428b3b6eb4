//! The register tile, written once over the vector operations of an instruction set ([`Lanes`]).
//!
//! [`tile_body`] and the `Lanes` methods are `#[inline(always)]`: they are only ever inlined into a
//! `#[target_feature]` method of the instruction set they wrap (`avx512.rs`, `avx2.rs`), where the intrinsics
//! inline too and the accumulators stay in registers.

use super::driver::store_strided;
use super::Strided;

/// One instruction set's f32 vector and lane mask.
pub trait Lanes {
    type V: Copy;
    type Mask: Copy;
    /// f32 lanes per vector.
    const LANES: usize;
    /// Vector registers the instruction set has.
    const REGISTERS: usize;

    unsafe fn zero() -> Self::V;
    unsafe fn splat(x: f32) -> Self::V;
    unsafe fn load(p: *const f32) -> Self::V;
    /// Loads the lanes under `mask` and zeroes the others, reading no memory outside the mask.
    unsafe fn load_masked(p: *const f32, mask: Self::Mask) -> Self::V;
    unsafe fn store(p: *mut f32, v: Self::V);
    /// Stores the lanes under `mask`, touching no memory outside it.
    unsafe fn store_masked(p: *mut f32, mask: Self::Mask, v: Self::V);
    /// a·b + c.
    unsafe fn fmadd(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
    /// The sum of the lanes (in a tree: the order is the implementation's).
    unsafe fn sum(v: Self::V) -> f32;
    /// Stores the sums of the lanes of four vectors at `p[0..4]`: one transposing tree for the four, a third of
    /// the shuffles and adds of four [`Self::sum`]s (in their own order).
    unsafe fn store_sums4(p: *mut f32, v: [Self::V; 4]);
    /// The mask of the first `n` lanes (`n` ≤ LANES).
    unsafe fn first(n: usize) -> Self::Mask;
}

/// Cache lines a tile asks into L2 while it works, in parts: its share of the block of B that the tiles read
/// next. Packs lay each panel's depth blocks one after another and the panels likewise, so the next block is
/// always the bytes that follow the current one. Shared out between a block's row tiles, the first tile of the
/// next block finds its lines in L2 instead of waiting on L3 for each: W2's int8 middle layer (a 4 MiB block of
/// B) went from 270–332 to 339–362 GOP/s per thread with both cores busy (BENCHMARKS.md, twenty-first run). A
/// block of one row tile (a decoding step) asks for nothing: no later tile would give the lines time to arrive,
/// the hardware's stream prefetcher already follows a lone tile, and asking made W5's int8 batch-1 step slower.
///
/// The f32 tile asks for a part after each chunk of its depth loop (bf16's AMX tile before each step; the
/// other reduced-precision tiles all at once, before they start). Asked for in one burst before the f32 tile
/// started, as they were, the requests queued behind each other and held the tile's first steps up: W2's 64-row
/// products, whose six tiles share a 72 KiB block, ran 10–27 % faster spread (BENCHMARKS.md, twenty-ninth run).
/// Where the int8 and bf16 tiles ask for B themselves ([`b_ahead`]), their drivers ask for nothing here.
#[derive(Clone, Copy)]
pub struct Prefetch {
    next: *const u8,
    lines: usize,
    per_chunk: usize,
    /// For a bf16 tile that asks for B as it goes: [`b_ahead`]'s distance (0: it does not).
    b_ahead: usize,
}

impl Prefetch {
    /// Nothing to ask for.
    pub const NONE: Prefetch = Prefetch {
        next: std::ptr::null(),
        lines: 0,
        per_chunk: 0,
        b_ahead: 0,
    };

    /// No lines of the next block: the tile asks for B's lines `b_ahead` bytes past each step itself.
    pub fn ahead(b_ahead: usize) -> Self {
        Prefetch {
            b_ahead,
            ..Prefetch::NONE
        }
    }

    /// The distance at which the tile asks for B's lines as it goes (0: it does not).
    pub fn b_ahead(&self) -> usize {
        self.b_ahead
    }

    /// Tile `tile`'s share, of `tiles`, of the `bytes` from `block`, to ask for in `issues` (at least one) equal
    /// parts; nothing for a block of one tile (see above). Only ever a hint: an address
    /// outside memory the process owns is asked for, not read.
    pub fn share(
        block: *const u8,
        bytes: usize,
        (tile, tiles): (usize, usize),
        issues: usize,
    ) -> Self {
        if tiles < 2 {
            return Prefetch::NONE;
        }
        let lines = bytes / 64;
        let per_tile = lines.div_ceil(tiles);
        let first = (tile * per_tile).min(lines);
        let mine = per_tile.min(lines - first);
        Prefetch {
            next: block.wrapping_add(first * 64),
            lines: mine,
            per_chunk: mine.div_ceil(issues.max(1)),
            b_ahead: 0,
        }
    }

    /// The share for a tile over `kc` steps: one part per chunk of [`CHUNK`] steps.
    pub fn over_depth(block: *const u8, bytes: usize, tiles: (usize, usize), kc: usize) -> Self {
        Prefetch::share(block, bytes, tiles, kc.div_ceil(CHUNK))
    }

    /// Asks for all the lines left, at once.
    #[inline(always)]
    pub fn issue_all(mut self) {
        self.per_chunk = self.lines;
        self.issue();
    }

    /// Asks for the next part of the lines.
    #[inline(always)]
    pub fn issue(&mut self) {
        let now = self.per_chunk.min(self.lines);
        for line in 0..now {
            crate::cpu::rows::prefetch_l2(self.next.wrapping_add(line * 64));
        }
        self.next = self.next.wrapping_add(now * 64);
        self.lines -= now;
    }
}

/// Floats of the largest tile (12×32), for the strided-C store.
const MAX_TILE: usize = 12 * 32;

/// C[rows×cols] ← α·A·B + β·C with an MR × (2 vectors) tile: the contract of `super::driver::Tile::tile`, with a
/// packed A panel holding `A_STEP` floats per step (the driver's tile height, which a shorter tile for the last
/// rows of a block reads the first MR of), asking for `prefetch`'s lines as it goes.
///
/// # Safety
/// That contract, called from a function compiled for `L`'s instruction set; `rows <= MR <= A_STEP`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub unsafe fn tile_body<L: Lanes, const MR: usize, const A_STEP: usize, const PACKED_A: bool>(
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
    let w = L::LANES;
    // SAFETY: the caller runs on `L`'s instruction set; every pointer below stays inside the panels and C as the
    // contract describes.
    unsafe {
        let masks = [
            L::first(cols.min(w)),
            L::first(cols.saturating_sub(w).min(w)),
        ];
        // Only the last, partial panel needs masked loads (slow on some AVX2 CPUs); two copies of the loop keep
        // the masks out of the full panels' registers.
        let acc = if cols == 2 * w {
            chunks::<L, MR, A_STEP, PACKED_A, true>(kc, a, b, masks, prefetch)
        } else {
            chunks::<L, MR, A_STEP, PACKED_A, false>(kc, a, b, masks, prefetch)
        };
        let alpha_v = L::splat(alpha);
        let beta_v = L::splat(beta);
        if c.cs == 1 && cols == 2 * w {
            // Whole rows of the tile: plain loads and stores. Masked stores (`vmaskmovps`) cost several cycles
            // each on AMD cores, and a tile stores 2·MR vectors per pass over its depth.
            for (i, acc) in acc.iter().enumerate().take(rows) {
                for (h, &sum) in acc.iter().enumerate() {
                    let p = c.ptr.offset(i as isize * c.rs).add(w * h);
                    let mut v = L::mul(sum, alpha_v);
                    // β = 0 must not read C: it may hold NaN.
                    if beta != 0.0 {
                        v = L::fmadd(L::load(p), beta_v, v);
                    }
                    L::store(p, v);
                }
            }
        } else if c.cs == 1 {
            for (i, acc) in acc.iter().enumerate().take(rows) {
                for (h, (&mask, &sum)) in masks.iter().zip(acc).enumerate() {
                    let p = c.ptr.offset(i as isize * c.rs).wrapping_add(w * h);
                    let mut v = L::mul(sum, alpha_v);
                    if beta != 0.0 {
                        v = L::fmadd(L::load_masked(p, mask), beta_v, v);
                    }
                    L::store_masked(p, mask, v);
                }
            }
        } else {
            const { assert!(MR * 2 * L::LANES <= MAX_TILE, "the tile outgrows MAX_TILE") };
            let mut tile = [0.0f32; MAX_TILE];
            let nr = 2 * w;
            for (i, acc) in acc.iter().enumerate() {
                L::store(tile.as_mut_ptr().add(i * nr), L::mul(acc[0], alpha_v));
                L::store(tile.as_mut_ptr().add(i * nr + w), L::mul(acc[1], alpha_v));
            }
            store_strided(&tile, nr, beta, c, rows, cols);
        }
    }
}

/// Steps of the depth loop per iteration.
const UNROLL: usize = 4;

/// How far past the lines a step of an int8 or bf16 tile reads (128 bytes of B: 32 columns of a quad of int8
/// or of a pair of bf16) it asks L1 for B's lines: one depth block of either (16 KiB), so a block's first tile
/// asks for the next block's lines as it reads this one's and the later tiles find them in L1 already. On a Zen 5
/// core, W2's bf16 middle product ran alike from 4 to 32 KiB ahead and slower from 2 KiB down, its int8 one
/// fastest at 16 KiB (BENCHMARKS.md, forty-second run).
const B_AHEAD_BYTES: usize = 16 << 10;

/// The distance in bytes at which a tile that can (`asks`) asks for B's lines as it goes ([`ask_b_ahead`]) in a
/// block of `tiles` row tiles over `rows` rows, on a core whose L2 hints do not keep B streaming
/// ([`Processor::prefetch_b_into_l1`]); 0 elsewhere, where the drivers ask for each next block into L2
/// ([`Prefetch`]) instead, and for a lone tile of fewer than [`LONE_TILE_ASKS_FROM`] rows (a decoding step of one
/// to three sequences), which asks for nothing, as [`Prefetch::share`] does not.
///
/// [`Processor::prefetch_b_into_l1`]: crate::cpu::processor::Processor::prefetch_b_into_l1
#[inline(always)]
pub fn b_ahead(asks: bool, tiles: usize, rows: usize) -> usize {
    let many_rows = tiles > 1 || rows >= LONE_TILE_ASKS_FROM;
    if asks && many_rows && crate::cpu::processor::Processor::get().prefetch_b_into_l1 {
        B_AHEAD_BYTES
    } else {
        0
    }
}

/// Rows from which a lone row tile asks for B ahead (a decoding step of that many sequences). A tile of one row
/// streams B at about the memory's rate, and the hardware's prefetcher follows it; asking made W5's int8 batch-1
/// step slower. A tile of several rows does enough arithmetic per line of B that, unasked, it waits on each line
/// and then computes: on a Zen 5 core W5's int8 products of 8 rows read their weights from memory at 12–18 GB/s
/// on one thread (34 from memory, 40–51 from cache), and at 20–33 asking (`gemm_bench --decode --rows 8`,
/// BENCHMARKS.md, forty-eighth run); at 4 rows 24–28 against 27–36, at 2 rows no faster and slower in cache.
const LONE_TILE_ASKS_FROM: usize = 4;

/// Asks L1 for the two lines `ahead` bytes past `step` (a step's 128 bytes of B); nothing when `ahead` is 0.
#[inline(always)]
pub fn ask_b_ahead<T>(step: *const T, ahead: usize) {
    if ahead > 0 {
        let at = step.cast::<u8>().wrapping_add(ahead);
        crate::cpu::rows::prefetch(at);
        crate::cpu::rows::prefetch(at.wrapping_add(64));
    }
}

/// Steps of the depth loop between two of a tile's requests for lines of the next block: the requests stay out
/// of the loop itself, whose registers they would crowd (asked for every iteration of four steps, they measured
/// 3–7 % slower on W3's shapes).
const CHUNK: usize = 32;

/// A·B over `kc` steps into MR × 2 vectors of accumulators, a chunk of [`CHUNK`] steps at a time with `prefetch`'s
/// lines asked for between them; `FULL` panels load B without masks.
///
/// # Safety
/// As [`tile_body`].
#[inline(always)]
unsafe fn chunks<
    L: Lanes,
    const MR: usize,
    const A_STEP: usize,
    const PACKED_A: bool,
    const FULL: bool,
>(
    kc: usize,
    a: Strided<*const f32>,
    b: Strided<*const f32>,
    masks: [L::Mask; 2],
    mut prefetch: Prefetch,
) -> [[L::V; 2]; MR] {
    // SAFETY: see `tile_body`.
    unsafe {
        let mut acc = [[L::zero(); 2]; MR];
        for l0 in (0..kc).step_by(CHUNK) {
            accumulate::<L, MR, A_STEP, PACKED_A, FULL>(
                l0..kc.min(l0 + CHUNK),
                a,
                b,
                masks,
                &mut acc,
            );
            prefetch.issue();
        }
        acc
    }
}

/// A·B over steps `steps` added to MR × 2 vectors of accumulators; `FULL` panels load B without masks.
///
/// # Safety
/// As [`tile_body`].
#[inline(always)]
unsafe fn accumulate<
    L: Lanes,
    const MR: usize,
    const A_STEP: usize,
    const PACKED_A: bool,
    const FULL: bool,
>(
    steps: std::ops::Range<usize>,
    a: Strided<*const f32>,
    b: Strided<*const f32>,
    masks: [L::Mask; 2],
    acc: &mut [[L::V; 2]; MR],
) {
    // SAFETY: see `tile_body`. With one vector's columns or fewer the second B pointer is past B (`wrapping_add`), and its
    // empty mask reads nothing.
    unsafe {
        // Four steps per iteration: the loop's own counter and branch then cost a quarter as much per step.
        let whole = steps.start + steps.len() / UNROLL * UNROLL;
        for l0 in (steps.start..whole).step_by(UNROLL) {
            for l in l0..l0 + UNROLL {
                step::<L, MR, A_STEP, PACKED_A, FULL>(l, a, b, masks, acc);
            }
        }
        for l in whole..steps.end {
            step::<L, MR, A_STEP, PACKED_A, FULL>(l, a, b, masks, acc);
        }
    }
}

/// Step `l` of [`accumulate`]: one row of the B panel times one column of the A panel into the accumulators.
///
/// # Safety
/// As [`tile_body`], with `l` < kc. (A function, not a closure: a closure would not inherit the caller's target
/// features, and its intrinsics would become calls.)
#[inline(always)]
unsafe fn step<
    L: Lanes,
    const MR: usize,
    const A_STEP: usize,
    const PACKED_A: bool,
    const FULL: bool,
>(
    l: usize,
    a: Strided<*const f32>,
    b: Strided<*const f32>,
    masks: [L::Mask; 2],
    acc: &mut [[L::V; 2]; MR],
) {
    // SAFETY: see `accumulate`.
    unsafe {
        let row = b.ptr.offset(l as isize * b.rs);
        let (b0, b1) = if FULL {
            (L::load(row), L::load(row.add(L::LANES)))
        } else {
            (
                L::load_masked(row, masks[0]),
                L::load_masked(row.wrapping_add(L::LANES), masks[1]),
            )
        };
        for (i, acc) in acc.iter_mut().enumerate() {
            let ai = L::splat(if PACKED_A {
                *a.ptr.add(l * A_STEP + i)
            } else {
                *a.ptr.offset(i as isize * a.rs).add(l)
            });
            acc[0] = L::fmadd(ai, b0, acc[0]);
            acc[1] = L::fmadd(ai, b1, acc[1]);
        }
    }
}
