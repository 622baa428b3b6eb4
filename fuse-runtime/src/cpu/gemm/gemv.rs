//! Products of few rows (a decoder's step: one row per sequence) against a B packed at load. The register tile
//! computes MR rows at a time, so one row wasted most of its FMAs and, worse, paced the stream of B by the
//! tile's loop; a step is bound by reading the weights once. Here each panel of B (k rows of NR floats, as
//! [`super::PackedB`] lays it out) is read once, front to back, into a row's accumulators: memory-bound as it
//! should be. Rows go in pairs over the same panel, so the panel comes from cache after the first pair.

use core::arch::x86_64::*;

use super::Strided;

/// Most rows a product takes this path with: a decoding step of 8 sequences still streams B (W5's batch-8 step
/// spent 109 ms in its GEMMs through the 6-row tile on a Zen 3 core pair, 60 ms here, BENCHMARKS.md); somewhere
/// above it the register tile's reuse of B wins.
pub const GEMV_MAX_ROWS: usize = 8;

/// C ← α·A·B + β·C for `m` ≤ [`GEMV_MAX_ROWS`] rows, B the packed panels starting at `panels` (`nr` columns
/// each, depth `k`), over `n` columns (the last panel may be partial: its padding columns are read, not stored).
///
/// # Safety
/// The CPU runs AVX2 and FMA; `nr` is 16 or 32; the panels hold `n.div_ceil(nr)` panels of `k × nr` floats; A and
/// C satisfy `super::sgemm`'s contract for (m, k, n).
#[target_feature(enable = "avx2,fma")]
pub unsafe fn gemv_packed(
    (m, k, n): (usize, usize, usize),
    nr: usize,
    alpha: f32,
    a: Strided<*const f32>,
    panels: *const f32,
    beta: f32,
    c: Strided<*mut f32>,
) {
    debug_assert!(m <= GEMV_MAX_ROWS && (nr == 16 || nr == 32));
    let mut col0 = 0;
    while col0 < n {
        let cols = nr.min(n - col0);
        // SAFETY: panel `col0 / nr` lies inside the packed panels (the caller's contract).
        let panel = unsafe { panels.add(col0 * k) };
        let mut row = 0;
        while row < m {
            let pair = (m - row).min(2);
            let c_at = Strided::new(
                c.ptr
                    .wrapping_offset(row as isize * c.rs + col0 as isize * c.cs),
                c.rs,
                c.cs,
            );
            let a_at = Strided::new(a.ptr.wrapping_offset(row as isize * a.rs), a.rs, a.cs);
            // SAFETY: rows `row..row + pair` and columns `col0..col0 + cols` of A and C are the caller's.
            unsafe {
                match (pair, nr) {
                    (1, 16) => panel_rows::<1, 2>(k, cols, alpha, a_at, panel, beta, c_at),
                    (2, 16) => panel_rows::<2, 2>(k, cols, alpha, a_at, panel, beta, c_at),
                    (1, _) => panel_rows::<1, 4>(k, cols, alpha, a_at, panel, beta, c_at),
                    _ => panel_rows::<2, 4>(k, cols, alpha, a_at, panel, beta, c_at),
                }
            }
            row += pair;
        }
        col0 += nr;
    }
}

/// `M` rows of C over one panel of `8·V` columns, the first `cols` of which are stored. Two sets of
/// accumulators (even and odd depths) keep twice as many FMAs in flight as one, so the loop waits on memory, not
/// on the FMA's latency.
///
/// # Safety
/// As [`gemv_packed`], for this panel and these rows.
// The accumulators are indexed by row and vector alike, as the registers they stand for.
#[allow(clippy::needless_range_loop)]
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn panel_rows<const M: usize, const V: usize>(
    k: usize,
    cols: usize,
    alpha: f32,
    a: Strided<*const f32>,
    panel: *const f32,
    beta: f32,
    c: Strided<*mut f32>,
) {
    let nr = 8 * V;
    let mut even = [[_mm256_setzero_ps(); V]; M];
    let mut odd = [[_mm256_setzero_ps(); V]; M];
    let a_at = |r: usize, l: usize| {
        // SAFETY: (r, l) is inside A (the caller's contract).
        unsafe { *a.ptr.offset(r as isize * a.rs + l as isize * a.cs) }
    };
    let mut l = 0;
    while l + 2 <= k {
        // SAFETY: depths l and l + 1 of the panel are inside it.
        let (b0, b1) = unsafe { (panel.add(l * nr), panel.add((l + 1) * nr)) };
        for r in 0..M {
            let (x0, x1) = (_mm256_set1_ps(a_at(r, l)), _mm256_set1_ps(a_at(r, l + 1)));
            for v in 0..V {
                // SAFETY: 8 floats at 8·v < nr of each depth's row.
                unsafe {
                    even[r][v] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(b0.add(8 * v)), even[r][v]);
                    odd[r][v] = _mm256_fmadd_ps(x1, _mm256_loadu_ps(b1.add(8 * v)), odd[r][v]);
                }
            }
        }
        l += 2;
    }
    if l < k {
        // SAFETY: depth l of the panel is inside it.
        let b0 = unsafe { panel.add(l * nr) };
        for r in 0..M {
            let x0 = _mm256_set1_ps(a_at(r, l));
            for v in 0..V {
                // SAFETY: as above.
                unsafe {
                    even[r][v] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(b0.add(8 * v)), even[r][v]);
                }
            }
        }
    }
    let mut sums = [0.0f32; 32];
    for r in 0..M {
        for v in 0..V {
            // SAFETY: `sums` holds 32 ≥ 8·V floats.
            unsafe {
                _mm256_storeu_ps(
                    sums.as_mut_ptr().add(8 * v),
                    _mm256_add_ps(even[r][v], odd[r][v]),
                )
            };
        }
        for (j, &sum) in sums[..cols].iter().enumerate() {
            // SAFETY: (r, j) is inside C (the caller's contract); with β = 0 C is only written.
            unsafe {
                let dst = c.ptr.offset(r as isize * c.rs + j as isize * c.cs);
                *dst = if beta == 0.0 {
                    alpha * sum
                } else {
                    alpha * sum + beta * *dst
                };
            }
        }
    }
}
