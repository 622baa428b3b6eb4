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
    /// The mask of the first `n` lanes (`n` ≤ LANES).
    unsafe fn first(n: usize) -> Self::Mask;
}

/// Floats of the largest tile (12×32), for the strided-C store.
const MAX_TILE: usize = 12 * 32;

/// C[rows×cols] ← α·A·B + β·C with an MR × (2 vectors) tile: the contract of `super::driver::Tile::tile`, with a
/// packed A panel holding `A_STEP` floats per step (the driver's tile height, which a shorter tile for the last
/// rows of a block reads the first MR of).
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
            accumulate::<L, MR, A_STEP, PACKED_A, true>(kc, a, b, masks)
        } else {
            accumulate::<L, MR, A_STEP, PACKED_A, false>(kc, a, b, masks)
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

/// A·B over `kc` steps into MR × 2 vectors of accumulators; `FULL` panels load B without masks.
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
    kc: usize,
    a: Strided<*const f32>,
    b: Strided<*const f32>,
    masks: [L::Mask; 2],
) -> [[L::V; 2]; MR] {
    // SAFETY: see `tile_body`. With one vector's columns or fewer the second B pointer is past B (`wrapping_add`), and its
    // empty mask reads nothing.
    unsafe {
        let mut acc = [[L::zero(); 2]; MR];
        // Four steps per iteration: the loop's own counter and branch then cost a quarter as much per step.
        let whole = kc / UNROLL * UNROLL;
        for l0 in (0..whole).step_by(UNROLL) {
            for l in l0..l0 + UNROLL {
                step::<L, MR, A_STEP, PACKED_A, FULL>(l, a, b, masks, &mut acc);
            }
        }
        for l in whole..kc {
            step::<L, MR, A_STEP, PACKED_A, FULL>(l, a, b, masks, &mut acc);
        }
        acc
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
