//! Products of few rows (a decoder's step: one row per sequence) against a B packed at load. The register tile
//! computes MR rows at a time, so one row wasted most of its FMAs and, worse, paced the stream of B by the
//! tile's loop; a step is bound by reading the weights once. Here each panel of B (k rows of NR floats, as
//! [`super::PackedB`] lays it out) is read once, front to back, into the rows' accumulators: memory-bound as it
//! should be.
//!
//! Two kernels ([`GemvKernel`]). With AVX2's 16 registers, rows go in pairs over the same panel, so the panel
//! comes from cache after the first pair. With AVX-512's 32 registers every row (up to 8) takes one pass over
//! the panel, A's elements broadcast straight from memory into the FMAs: 8 rows read each panel once instead of
//! four times, which matters once the step is bound by arithmetic rather than the stream (W5's batch-8 step).
//!
//! Panels held in f16 ([`super::PackedB::new_f16`]) run the same kernels with each load widened by `vcvtph2ps`:
//! the step streams half the bytes and the arithmetic is unchanged.

use core::arch::x86_64::*;
use std::sync::OnceLock;

use super::half::f16;
use super::Strided;

/// Most rows a product takes this path with: a decoding step of 8 sequences still streams B (W5's batch-8 step
/// spent 109 ms in its GEMMs through the 6-row tile on a Zen 3 core pair, 60 ms here, BENCHMARKS.md); somewhere
/// above it the register tile's reuse of B wins.
pub const GEMV_MAX_ROWS: usize = 8;

/// Which kernel runs few-row products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemvKernel {
    /// AVX2 and FMA: rows in pairs, two accumulator sets per row (even and odd depths).
    Avx2Pairs,
    /// AVX-512: all rows in one pass over each panel, 512-bit vectors.
    Avx512,
}

impl GemvKernel {
    /// The kernel few-row products run on here: AVX-512 wherever the CPU has it (on a core that splits 512-bit
    /// operations too, for its registers rather than its width).
    pub fn best() -> GemvKernel {
        static BEST: OnceLock<GemvKernel> = OnceLock::new();
        *BEST.get_or_init(|| GemvKernel::supported()[0])
    }

    /// Every kernel this CPU runs, preferred first (the packed GEMM needs AVX2, so that one is always here).
    pub fn supported() -> Vec<GemvKernel> {
        let mut all = Vec::new();
        if crate::cpu::math::dispatch_avx512() {
            all.push(GemvKernel::Avx512);
        }
        all.push(GemvKernel::Avx2Pairs);
        all
    }
}

/// The first panel a few-row product reads, by element type: f32, or f16 widened as it is loaded (`vcvtph2ps`).
#[derive(Clone, Copy)]
pub enum Panels {
    F32(*const f32),
    F16(*const f16),
}

impl Panels {
    /// `count` elements further on.
    fn offset(self, count: usize) -> Panels {
        match self {
            Panels::F32(p) => Panels::F32(p.wrapping_add(count)),
            Panels::F16(p) => Panels::F16(p.wrapping_add(count)),
        }
    }
}

/// C ← α·A·B + β·C for `m` ≤ [`GEMV_MAX_ROWS`] rows on `kernel` (see [`gemv_packed_avx2`]).
///
/// # Safety
/// As [`gemv_packed_avx2`]; `kernel` is one of [`GemvKernel::supported`], and the CPU has F16C for f16 panels.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemv_packed_on(
    kernel: GemvKernel,
    dims: (usize, usize, usize),
    nr: usize,
    alpha: f32,
    a: Strided<*const f32>,
    panels: Panels,
    beta: f32,
    c: Strided<*mut f32>,
) {
    // SAFETY (both): the caller's contract, on a kernel this CPU runs.
    match kernel {
        GemvKernel::Avx512 => unsafe { gemv_packed_avx512(dims, nr, alpha, a, panels, beta, c) },
        GemvKernel::Avx2Pairs => unsafe { gemv_packed_avx2(dims, nr, alpha, a, panels, beta, c) },
    }
}

/// C ← α·A·B + β·C for `m` ≤ [`GEMV_MAX_ROWS`] rows, B the packed panels starting at `panels` (`nr` columns
/// each, depth `k`), over `n` columns (the last panel may be partial: its padding columns are read, not stored).
///
/// # Safety
/// The CPU runs AVX2 and FMA (and F16C for f16 panels); `nr` is 16 or 32; the panels hold `n.div_ceil(nr)` panels
/// of `k × nr` elements; A and C satisfy `super::sgemm`'s contract for (m, k, n).
#[target_feature(enable = "avx2,fma")]
unsafe fn gemv_packed_avx2(
    (m, k, n): (usize, usize, usize),
    nr: usize,
    alpha: f32,
    a: Strided<*const f32>,
    panels: Panels,
    beta: f32,
    c: Strided<*mut f32>,
) {
    debug_assert!(m <= GEMV_MAX_ROWS && (nr == 16 || nr == 32));
    let mut col0 = 0;
    while col0 < n {
        let cols = nr.min(n - col0);
        // Panel `col0 / nr`, inside the packed panels (the caller's contract).
        let panel = panels.offset(col0 * k);
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
            macro_rules! on {
                ($rows:literal, $v:literal) => {
                    match panel {
                        Panels::F32(p) => {
                            panel_rows_avx2::<$rows, $v>(k, cols, alpha, a_at, p, beta, c_at)
                        }
                        Panels::F16(p) => {
                            panel_rows_avx2_f16::<$rows, $v>(k, cols, alpha, a_at, p, beta, c_at)
                        }
                    }
                };
            }
            // SAFETY: rows `row..row + pair` and columns `col0..col0 + cols` of A and C are the caller's; F16C
            // is there for f16 panels (the caller's contract).
            unsafe {
                match (pair, nr) {
                    (1, 16) => on!(1, 2),
                    (2, 16) => on!(2, 2),
                    (1, _) => on!(1, 4),
                    _ => on!(2, 4),
                }
            }
            row += pair;
        }
        col0 += nr;
    }
}

/// [`gemv_packed_avx2`] with AVX-512: every row in one pass over each panel.
///
/// # Safety
/// As [`gemv_packed_avx2`], and the CPU runs AVX-512F.
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
unsafe fn gemv_packed_avx512(
    (m, k, n): (usize, usize, usize),
    nr: usize,
    alpha: f32,
    a: Strided<*const f32>,
    panels: Panels,
    beta: f32,
    c: Strided<*mut f32>,
) {
    debug_assert!(m <= GEMV_MAX_ROWS && (nr == 16 || nr == 32));
    let mut col0 = 0;
    while col0 < n {
        let cols = nr.min(n - col0);
        // Panel `col0 / nr`, inside the packed panels (the caller's contract).
        let panel = panels.offset(col0 * k);
        let c_at = Strided::new(c.ptr.wrapping_offset(col0 as isize * c.cs), c.rs, c.cs);
        macro_rules! on {
            ($rows:literal, $v:literal) => {
                match panel {
                    Panels::F32(p) => {
                        panel_rows_avx512::<$rows, $v>(k, cols, alpha, a, p, beta, c_at)
                    }
                    Panels::F16(p) => {
                        panel_rows_avx512_f16::<$rows, $v>(k, cols, alpha, a, p, beta, c_at)
                    }
                }
            };
        }
        macro_rules! rows {
            ($($m:literal)*) => {
                match (m, nr) {
                    $(
                        ($m, 16) => on!($m, 1),
                        ($m, _) => on!($m, 2),
                    )*
                    _ => {}
                }
            };
        }
        // SAFETY: rows 0..m and columns col0..col0 + cols of A and C are the caller's.
        unsafe { rows!(1 2 3 4 5 6 7 8) };
        col0 += nr;
    }
}

/// Defines a panel kernel on one instruction set over panels of one element type (`$load` turns `lanes` of them into
/// a vector of f32): `M` rows of C over one panel of `lanes·V` columns, the first `cols` of which are stored, each
/// row's sums in `V` vectors. Where `$two_sets(M, V)` holds, a second set of
/// accumulators takes the odd depths, which keeps twice as many FMAs in flight, so the loop waits on memory, not
/// on the FMA's latency.
macro_rules! panel_rows {
    ($name:ident, $features:literal, $elem:ty, $lanes:literal, $two_sets:ident, $zero:ident, $splat:ident,
     $load:ident, $fma:ident, $add:ident, $store:ident) => {
        /// # Safety
        /// As [`gemv_packed_avx2`], for this panel and these rows, on this kernel's instruction set.
        // The accumulators are indexed by row and vector alike, as the registers they stand for.
        #[allow(clippy::needless_range_loop)]
        #[inline]
        #[target_feature(enable = $features)]
        unsafe fn $name<const M: usize, const V: usize>(
            k: usize,
            cols: usize,
            alpha: f32,
            a: Strided<*const f32>,
            panel: *const $elem,
            beta: f32,
            c: Strided<*mut f32>,
        ) {
            let nr = $lanes * V;
            let mut even = [[$zero(); V]; M];
            let mut odd = [[$zero(); V]; M];
            let a_at = |r: usize, l: usize| {
                // SAFETY: (r, l) is inside A (the caller's contract).
                unsafe { *a.ptr.offset(r as isize * a.rs + l as isize * a.cs) }
            };
            let mut l = 0;
            if $two_sets(M, V) {
                while l + 2 <= k {
                    // SAFETY: depths l and l + 1 of the panel are inside it.
                    let (b0, b1) = unsafe { (panel.add(l * nr), panel.add((l + 1) * nr)) };
                    for r in 0..M {
                        let (x0, x1) = ($splat(a_at(r, l)), $splat(a_at(r, l + 1)));
                        for v in 0..V {
                            // SAFETY: `lanes` floats at lanes·v < nr of each depth's row.
                            unsafe {
                                even[r][v] = $fma(x0, $load(b0.add($lanes * v)), even[r][v]);
                                odd[r][v] = $fma(x1, $load(b1.add($lanes * v)), odd[r][v]);
                            }
                        }
                    }
                    l += 2;
                }
            }
            while l < k {
                // SAFETY: depth l of the panel is inside it.
                let b0 = unsafe { panel.add(l * nr) };
                for r in 0..M {
                    let x0 = $splat(a_at(r, l));
                    for v in 0..V {
                        // SAFETY: as above.
                        unsafe { even[r][v] = $fma(x0, $load(b0.add($lanes * v)), even[r][v]) };
                    }
                }
                l += 1;
            }
            let mut sums = [0.0f32; 32];
            for r in 0..M {
                for v in 0..V {
                    // SAFETY: `sums` holds 32 ≥ lanes·V floats.
                    unsafe {
                        $store(
                            sums.as_mut_ptr().add($lanes * v),
                            $add(even[r][v], odd[r][v]),
                        )
                    };
                }
                // SAFETY: row r's first `cols` columns are inside C (the caller's contract).
                unsafe { store_row(&sums[..cols], r, alpha, beta, c) };
            }
        }
    };
}

/// AVX2's rows come in pairs of at most 4 vectors: two sets fit its 16 registers, and always pay.
const fn avx2_two_sets(_rows: usize, _vectors: usize) -> bool {
    true
}

/// With 32 registers, 8 or more accumulators already cover the FMA latency; fewer take a second set.
const fn avx512_two_sets(rows: usize, vectors: usize) -> bool {
    rows * vectors < 8
}

/// 8 f16 values widened.
///
/// # Safety
/// 16 bytes are readable at `p`; the CPU has F16C.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_f16x8(p: *const f16) -> __m256 {
    // SAFETY: the caller's contract; f16 is a u16 in memory.
    unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
}

/// 16 f16 values widened.
///
/// # Safety
/// 32 bytes are readable at `p`; the CPU has AVX-512F.
#[inline]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma,f16c")]
unsafe fn load_f16x16(p: *const f16) -> __m512 {
    // SAFETY: the caller's contract; f16 is a u16 in memory.
    unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
}

panel_rows!(
    panel_rows_avx2,
    "avx2,fma",
    f32,
    8,
    avx2_two_sets,
    _mm256_setzero_ps,
    _mm256_set1_ps,
    _mm256_loadu_ps,
    _mm256_fmadd_ps,
    _mm256_add_ps,
    _mm256_storeu_ps
);
panel_rows!(
    panel_rows_avx512,
    "avx512f,avx512vl,avx2,fma",
    f32,
    16,
    avx512_two_sets,
    _mm512_setzero_ps,
    _mm512_set1_ps,
    _mm512_loadu_ps,
    _mm512_fmadd_ps,
    _mm512_add_ps,
    _mm512_storeu_ps
);
panel_rows!(
    panel_rows_avx2_f16,
    "avx2,fma,f16c",
    f16,
    8,
    avx2_two_sets,
    _mm256_setzero_ps,
    _mm256_set1_ps,
    load_f16x8,
    _mm256_fmadd_ps,
    _mm256_add_ps,
    _mm256_storeu_ps
);
panel_rows!(
    panel_rows_avx512_f16,
    "avx512f,avx512vl,avx2,fma,f16c",
    f16,
    16,
    avx512_two_sets,
    _mm512_setzero_ps,
    _mm512_set1_ps,
    load_f16x16,
    _mm512_fmadd_ps,
    _mm512_add_ps,
    _mm512_storeu_ps
);

/// C[r][j] ← α·sums[j] + β·C[r][j] for every j of `sums` (C is only written when β = 0, so it may hold NaN).
///
/// # Safety
/// Row `r`'s first `sums.len()` columns are inside C.
#[inline(always)]
unsafe fn store_row(sums: &[f32], r: usize, alpha: f32, beta: f32, c: Strided<*mut f32>) {
    for (j, &sum) in sums.iter().enumerate() {
        // SAFETY: (r, j) is inside C (the caller's contract).
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
