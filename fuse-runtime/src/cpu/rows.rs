//! Row primitives on contiguous f32 slices: reductions, softmax and normalisation.
//!
//! Reductions keep [`LANES`] independent partial sums (the norms' passes `WIDE`). A single running sum is a serial
//! dependency chain that LLVM may not reorder (float addition is not associative), so it would stay scalar;
//! independent lanes map straight onto SIMD registers (16 = one AVX-512 register, or four SSE registers). Everything is
//! `#[inline(always)]` so that a generated kernel compiled under `#[target_feature]` (see
//! [`super::math::dispatch_avx512`]) gets copies vectorised for its instruction set.

use super::math;

/// Number of independent accumulators in the row sums, maxima and the softmax's exp pass.
pub const LANES: usize = 16;

/// Independent accumulators of the normalisations' passes: four AVX-512 registers. With one, each pass over a row
/// is a chain of dependent adds (24 of them for a row of 384, four cycles each): a layer norm of 64 such rows in
/// cache took 9.5 µs with [`LANES`] accumulators and takes 4.4 µs with these (BENCHMARKS.md, thirty-second run).
const WIDE: usize = 4 * LANES;

/// Pairwise sum of the lane accumulators (keeps the rounding error of the final step at log₂ N adds).
#[inline(always)]
fn reduce_sum<const N: usize>(mut acc: [f32; N]) -> f32 {
    let mut width = N / 2;
    while width > 0 {
        for i in 0..width {
            acc[i] += acc[i + width];
        }
        width /= 2;
    }
    acc[0]
}

/// Σ f(x) over the row with N lane accumulators.
#[inline(always)]
fn lane_sum<const N: usize>(row: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0.0f32; N];
    let chunks = row.chunks_exact(N);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (a, &x) in acc.iter_mut().zip(chunk) {
            *a += f(x);
        }
    }
    for (a, &x) in acc.iter_mut().zip(tail) {
        *a += f(x);
    }
    reduce_sum(acc)
}

/// Asks the cache for the line holding `p`, ahead of its use. A hint only: it never faults, so `p` may point
/// anywhere (one past a buffer, a row that does not exist) without harm.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` is a hint that reads nothing architecturally and cannot fault, whatever `p` is.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// [`prefetch`] into the second-level cache only: for data a loop needs after what it is reading now, which must
/// not push that out of L1.
#[inline(always)]
pub fn prefetch_l2<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as in `prefetch`: a hint that cannot fault.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Sum of the row (0 for an empty row).
#[inline(always)]
pub fn sum(row: &[f32]) -> f32 {
    lane_sum::<LANES>(row, |x| x)
}

/// The running sums of `row` into `out` (`out[j]` = `row[0] + .. + row[j]`), summed in f64 and each rounded once
/// to f32, as PyTorch's CPU `cumsum` sums f32 (a mask's running count stays exact however long the row). A scan
/// is a chain of additions, each on the one before.
#[inline(always)]
pub fn cumsum(row: &[f32], out: &mut [f32]) {
    let mut total = 0.0f64;
    for (o, &x) in out.iter_mut().zip(row) {
        total += f64::from(x);
        *o = total as f32;
    }
}

/// Largest element, NaN where the row holds one (PyTorch's `amax`); -∞ for an empty row.
#[inline(always)]
pub fn max(row: &[f32]) -> f32 {
    lane_max(row, super::math::maximum)
}

/// Largest element with NaN elements skipped: the softmax's shift, whose exp turns a NaN into NaNs anyway.
#[inline(always)]
fn max_of_numbers(row: &[f32]) -> f32 {
    lane_max(row, larger)
}

/// `row` folded by `larger` on [`LANES`] lanes from -∞, then across them.
#[inline(always)]
fn lane_max(row: &[f32], larger: impl Fn(f32, f32) -> f32) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (a, &x) in acc.iter_mut().zip(chunk) {
            *a = larger(*a, x);
        }
    }
    for (a, &x) in acc.iter_mut().zip(tail) {
        *a = larger(*a, x);
    }
    acc.iter().fold(f32::NEG_INFINITY, |m, &x| larger(m, x))
}

/// `x` where it is larger than `a` (which is never NaN here), else `a`: a NaN `x` is skipped, as `f32::max` skips
/// it. Written as a comparison, which is one `vmaxps`: `f32::max` (LLVM's `maxnum`) adds a NaN test and a blend to
/// each, and in a row of static length LLVM left it as one scalar `vmaxss` per element.
#[inline(always)]
fn larger(a: f32, x: f32) -> f32 {
    if x > a {
        x
    } else {
        a
    }
}

/// Softmax of the row, in place, shifted by the row maximum so exp never overflows.
///
/// A row whose entries are all -∞ (every position masked) becomes all zeros rather than NaN, so a fully
/// padded attention row contributes nothing instead of poisoning the output. NaN anywhere gives NaN everywhere.
#[inline(always)]
pub fn softmax_in_place(row: &mut [f32]) {
    softmax_rows(row, row.len());
}

/// [`softmax_in_place`] on each whole row of `n` in `block` (a last partial row is left as it is), as the attention
/// kernel runs it on a block of scores: on the fastest path this CPU runs ([`SoftmaxPath::best`]).
///
/// With AVX-512 the rows go a few at a time, each pass over the group's rows before the next: the maxima, then the
/// exponentials and their sums, then the scaling. Taken one row at a time, the passes of a row wait on each other
/// (the maximum's reduction, then the exponentials, their sum, its reciprocal), and in an attention block's rows of
/// 128 the latency of that chain cost about as much as the arithmetic.
#[inline(always)]
pub fn softmax_rows(block: &mut [f32], n: usize) {
    // SAFETY: `best` is a path this CPU runs.
    unsafe { softmax_rows_unchecked(SoftmaxPath::best(), block, n) }
}

/// A copy of the softmax ([`softmax_rows_on`]). Each gives the same numbers: the maximum is exact, and the
/// exponentials and their sum are the same pass's on every path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SoftmaxPath {
    /// 512-bit intrinsics for every pass: LLVM compiled the portable maximum as pieces of vectors and a scalar fold
    /// of its 16 lanes.
    Avx512,
    /// The portable passes compiled for AVX2 and FMA.
    Avx2,
    /// The portable passes compiled for the caller's features.
    Portable,
}

impl SoftmaxPath {
    /// Fastest first.
    pub const ALL: [SoftmaxPath; 3] = [
        SoftmaxPath::Avx512,
        SoftmaxPath::Avx2,
        SoftmaxPath::Portable,
    ];

    /// The fastest this CPU runs.
    #[inline(always)]
    pub fn best() -> SoftmaxPath {
        if SoftmaxPath::Avx512.runs_here() {
            SoftmaxPath::Avx512
        } else if SoftmaxPath::Avx2.runs_here() {
            SoftmaxPath::Avx2
        } else {
            SoftmaxPath::Portable
        }
    }

    /// Whether this CPU runs it (the x86 paths only on x86-64, where they are compiled).
    #[inline(always)]
    pub fn runs_here(self) -> bool {
        match self {
            SoftmaxPath::Avx512 => cfg!(target_arch = "x86_64") && math::dispatch_avx512(),
            SoftmaxPath::Avx2 => cfg!(target_arch = "x86_64") && math::dispatch_avx2(),
            SoftmaxPath::Portable => true,
        }
    }
}

/// [`softmax_rows`] on `path`.
///
/// # Panics
/// If this CPU does not run `path` (ask [`SoftmaxPath::runs_here`]).
#[inline(always)]
pub fn softmax_rows_on(path: SoftmaxPath, block: &mut [f32], n: usize) {
    assert!(
        path.runs_here(),
        "softmax path {path:?} does not run on this CPU"
    );
    // SAFETY: asserted above.
    unsafe { softmax_rows_unchecked(path, block, n) }
}

/// [`softmax_rows_on`] without its check, for [`softmax_rows`], whose path is [`SoftmaxPath::best`] already.
///
/// # Safety
/// This CPU runs `path`.
#[inline(always)]
unsafe fn softmax_rows_unchecked(path: SoftmaxPath, block: &mut [f32], n: usize) {
    if n == 0 {
        return;
    }
    match path {
        // SAFETY (both): the CPU has every feature the path is compiled for (the caller's contract).
        #[cfg(target_arch = "x86_64")]
        SoftmaxPath::Avx512 => unsafe { softmax_rows_avx512(block, n) },
        #[cfg(target_arch = "x86_64")]
        SoftmaxPath::Avx2 => unsafe { softmax_rows_avx2(block, n) },
        _ => softmax_rows_portable(block, n),
    }
}

/// The portable passes, one row at a time: the maximum and the scaling as loops LLVM vectorises for the caller's
/// features, the exponentials as [`exp_shifted`] dispatches them. In groups of four, as the AVX-512 path takes them,
/// these passes ran slower (an attention block's rows of 128, the AVX2 copy on an AVX-512 core: 970 µs against
/// 790–843; BENCHMARKS.md, thirty-ninth run).
#[inline(always)]
fn softmax_rows_portable(block: &mut [f32], n: usize) {
    let scale = |row: &mut [f32], by| {
        for x in row.iter_mut() {
            *x *= by;
        }
    };
    groups_of::<1>(block, n, (max_of_numbers, exp_shifted, scale))
}

/// [`softmax_rows_portable`] compiled for AVX2 and FMA.
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn softmax_rows_avx2(block: &mut [f32], n: usize) {
    softmax_rows_portable(block, n)
}

/// Rows of the AVX-512 path's groups while four fit in this many floats (16 KB, half of a 32 KiB L1 data cache, so a
/// group stays in L1 across its passes); longer rows go one at a time. An attention block's rows of 128 ran the
/// softmax in 625 µs one at a time, 539–558 µs in groups of 2, 8 or 16, and 530–539 µs in groups of 4
/// (BENCHMARKS.md, thirty-ninth run).
const GROUP_FLOATS: usize = 4096;

/// The softmax of `block`'s rows of `n` (not 0) from its three passes over a row, in groups of `G` rows: `max` (the
/// row's largest number, NaN skipped), `exp` (each x replaced by eˣ⁻ˢʰⁱᶠᵗ, returning their sum) and `scale` (each x
/// multiplied).
#[inline(always)]
fn groups_of<const G: usize>(
    block: &mut [f32],
    n: usize,
    (max, exp, scale): (
        impl Fn(&[f32]) -> f32,
        impl Fn(&mut [f32], f32) -> f32,
        impl Fn(&mut [f32], f32),
    ),
) {
    for group in block.chunks_mut(G * n) {
        // Each row's shift, then the reciprocal of its total.
        let mut by = [0f32; G];
        for (row, by) in group.chunks_exact_mut(n).zip(&mut by) {
            *by = shift_of(max(row));
        }
        for (row, by) in group.chunks_exact_mut(n).zip(&mut by) {
            *by = reciprocal_of_total(exp(row, *by));
        }
        for (row, by) in group.chunks_exact_mut(n).zip(&by) {
            scale(row, *by);
        }
    }
}

/// The softmax's shift for a row whose largest number is `m`: 0 when every entry is -∞ (so they stay -∞ and their
/// exponentials 0, rather than -∞ − -∞ = NaN).
#[inline(always)]
fn shift_of(m: f32) -> f32 {
    if m == f32::NEG_INFINITY {
        0.0
    } else {
        m
    }
}

/// What the exponentials are scaled by: 1/total, 0 for a row of zeros (every entry masked), NaN when one was NaN.
#[inline(always)]
fn reciprocal_of_total(total: f32) -> f32 {
    if total.is_nan() {
        f32::NAN
    } else if total > 0.0 {
        1.0 / total
    } else {
        0.0
    }
}

/// The passes on 512-bit vectors, in groups of four rows while they fit in [`GROUP_FLOATS`].
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
fn softmax_rows_avx512(block: &mut [f32], n: usize) {
    let passes = (
        |row: &[f32]| max_avx512(row),
        |row: &mut [f32], shift| exp_shifted_avx512(row, shift),
        |row: &mut [f32], by| scale_avx512(row, by),
    );
    if 4 * n <= GROUP_FLOATS {
        groups_of::<4>(block, n, passes)
    } else {
        groups_of::<1>(block, n, passes)
    }
}

/// The row's largest number, NaN lanes skipped (`vmaxps` returns its second operand, the running maximum, when the
/// first is NaN); -∞ for a row of -∞.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
#[inline]
fn max_avx512(row: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let (whole, tail) = (row.len() / LANES * LANES, row.len() % LANES);
    let tail_mask: __mmask16 = ((1u32 << tail) - 1) as u16;
    let p = row.as_ptr();
    // SAFETY (every access): the CPU has AVX-512F; vectors start at multiples of 16 below `whole`, and the tail's
    // lanes past the row are masked off.
    unsafe {
        // Two running maxima, so the chain of dependent `vmaxps` is half the row's vectors long.
        let (mut m0, mut m1) = (
            _mm512_set1_ps(f32::NEG_INFINITY),
            _mm512_set1_ps(f32::NEG_INFINITY),
        );
        let mut i = 0;
        while i + 2 * LANES <= whole {
            m0 = _mm512_max_ps(_mm512_loadu_ps(p.add(i)), m0);
            m1 = _mm512_max_ps(_mm512_loadu_ps(p.add(i + LANES)), m1);
            i += 2 * LANES;
        }
        if i < whole {
            m0 = _mm512_max_ps(_mm512_loadu_ps(p.add(i)), m0);
        }
        if tail > 0 {
            let x = _mm512_maskz_loadu_ps(tail_mask, p.add(whole));
            m1 = _mm512_mask_max_ps(m1, tail_mask, x, m1);
        }
        _mm512_reduce_max_ps(_mm512_max_ps(m0, m1))
    }
}

/// Multiplies the row by `inv`.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
#[inline]
fn scale_avx512(row: &mut [f32], inv: f32) {
    use std::arch::x86_64::*;
    let (whole, tail) = (row.len() / LANES * LANES, row.len() % LANES);
    let tail_mask: __mmask16 = ((1u32 << tail) - 1) as u16;
    let p = row.as_mut_ptr();
    // SAFETY: as in `max_avx512`.
    unsafe {
        let inv = _mm512_set1_ps(inv);
        let mut i = 0;
        while i < whole {
            _mm512_storeu_ps(p.add(i), _mm512_mul_ps(_mm512_loadu_ps(p.add(i)), inv));
            i += LANES;
        }
        if tail > 0 {
            let x = _mm512_maskz_loadu_ps(tail_mask, p.add(whole));
            _mm512_mask_storeu_ps(p.add(whole), tail_mask, _mm512_mul_ps(x, inv));
        }
    }
}

/// Replaces each x of the row by eˣ⁻ˢʰⁱᶠᵗ and returns their sum. This is the softmax's costly pass, so where the
/// CPU has FMA it runs [`math::exp_in`] over [`math::Fused`]: one instruction per multiply-add of the polynomial
/// instead of [`math::exp`]'s two; with AVX-512, [`exp_shifted_avx512`]. The caller is usually compiled for FMA
/// already but cannot say so to an inlined function, hence the check here: one cached load per row.
#[inline(always)]
fn exp_shifted(row: &mut [f32], shift: f32) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2,fma")]
        fn avx2(row: &mut [f32], shift: f32) -> f32 {
            exp_shifted_in::<math::Fused>(row, shift)
        }
        if math::dispatch_avx512() {
            // SAFETY: the CPU has every feature `exp_shifted_avx512` is compiled for.
            return unsafe { exp_shifted_avx512(row, shift) };
        }
        if math::dispatch_avx2() {
            // SAFETY: the CPU has AVX2 and FMA.
            return unsafe { avx2(row, shift) };
        }
    }
    exp_shifted_in::<math::Plain>(row, shift)
}

/// [`exp_shifted_in`] 16 lanes a step with [`math::exp_zmm`], which also scales in one instruction: the same lanes
/// take the same values, so the sum is reduced in the same order.
///
/// # Safety
/// The CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
#[inline]
fn exp_shifted_avx512(row: &mut [f32], shift: f32) -> f32 {
    use std::arch::x86_64::*;
    let shift = _mm512_set1_ps(shift);
    let mut acc = _mm512_setzero_ps();
    let mut chunks = row.chunks_exact_mut(LANES);
    // SAFETY (both): the CPU has AVX-512F; each access is inside its chunk (the tail's under its mask).
    for chunk in &mut chunks {
        unsafe {
            let e = math::exp_zmm(_mm512_sub_ps(_mm512_loadu_ps(chunk.as_ptr()), shift));
            _mm512_storeu_ps(chunk.as_mut_ptr(), e);
            acc = _mm512_add_ps(acc, e);
        }
    }
    let tail = chunks.into_remainder();
    if !tail.is_empty() {
        let mask = (1u16 << tail.len()) - 1;
        unsafe {
            let x = _mm512_maskz_loadu_ps(mask, tail.as_ptr());
            let e = math::exp_zmm(_mm512_sub_ps(x, shift));
            _mm512_mask_storeu_ps(tail.as_mut_ptr(), mask, e);
            acc = _mm512_mask_add_ps(acc, mask, acc, e);
        }
    }
    let mut lanes = [0.0f32; LANES];
    // SAFETY: 16 floats.
    unsafe { _mm512_storeu_ps(lanes.as_mut_ptr(), acc) };
    reduce_sum(lanes)
}

#[inline(always)]
fn exp_shifted_in<A: math::Arith>(row: &mut [f32], shift: f32) -> f32 {
    let exp = math::exp_in::<A>;
    let mut acc = [0.0f32; LANES];
    let mut chunks = row.chunks_exact_mut(LANES);
    for chunk in &mut chunks {
        for (a, x) in acc.iter_mut().zip(chunk) {
            *x = exp(*x - shift);
            *a += *x;
        }
    }
    for (a, x) in acc.iter_mut().zip(chunks.into_remainder()) {
        *x = exp(*x - shift);
        *a += *x;
    }
    reduce_sum(acc)
}

/// Layer normalisation of `row` into `out`: (x − mean) / √(var + eps) · gamma + beta, with the biased variance.
///
/// The variance is taken in a second pass over (x − mean)² rather than as E(x²) − mean², which cancels
/// catastrophically in f32 when |mean| ≫ std (e.g. activations with a large offset).
///
/// # Panics
/// If `gamma`, `beta` or `out` is not as long as `row` (a bug in the caller, not bad data).
#[inline(always)]
pub fn layer_norm(row: &[f32], gamma: &[f32], beta: &[f32], eps: f32, out: &mut [f32]) {
    let n = row.len();
    assert!(
        gamma.len() == n && beta.len() == n && out.len() == n,
        "layer_norm: row {n}, gamma {}, beta {}, out {}",
        gamma.len(),
        beta.len(),
        out.len()
    );
    if n == 0 {
        return;
    }
    let mean = lane_sum::<WIDE>(row, |x| x) / n as f32;
    let var = lane_sum::<WIDE>(row, |x| (x - mean) * (x - mean)) / n as f32;
    let inv = math::rsqrt(var + eps);
    for (((o, &x), &g), &b) in out.iter_mut().zip(row).zip(gamma).zip(beta) {
        *o = (x - mean) * inv * g + b;
    }
}

/// RMS normalisation of `row` into `out`: x / √(mean(x²) + eps) · gamma.
///
/// # Panics
/// If `gamma` or `out` is not as long as `row`.
#[inline(always)]
pub fn rms_norm(row: &[f32], gamma: &[f32], eps: f32, out: &mut [f32]) {
    let n = row.len();
    assert!(
        gamma.len() == n && out.len() == n,
        "rms_norm: row {n}, gamma {}, out {}",
        gamma.len(),
        out.len()
    );
    if n == 0 {
        return;
    }
    let inv = math::rsqrt(lane_sum::<WIDE>(row, |x| x * x) / n as f32 + eps);
    for ((o, &x), &g) in out.iter_mut().zip(row).zip(gamma) {
        *o = x * inv * g;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::Tensor;

    const LENGTHS: [usize; 6] = [1, 7, 16, 33, 384, 1000];

    fn randv(n: usize, seed: u64, scale: f32, offset: f32) -> Vec<f32> {
        let t = Tensor::randn(&[n], seed);
        t.as_f32()
            .unwrap()
            .iter()
            .map(|&x| x * scale + offset)
            .collect()
    }

    fn f64s(v: &[f32]) -> Vec<f64> {
        v.iter().map(|&x| f64::from(x)).collect()
    }

    #[test]
    fn sum_and_max() {
        for (i, &n) in LENGTHS.iter().enumerate() {
            let row = randv(n, i as u64, 3.0, 0.5);
            let want: f64 = f64s(&row).iter().sum();
            let scale: f64 = f64s(&row).iter().map(|x| x.abs()).sum();
            assert!(
                (f64::from(sum(&row)) - want).abs() <= 1e-6 * scale,
                "n = {n}"
            );
            let want_max = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(max(&row), want_max, "n = {n}");
        }
        assert_eq!(sum(&[]), 0.0);
        assert_eq!(max(&[]), f32::NEG_INFINITY);
        assert!(max(&[f32::NAN, 1.0, -2.0]).is_nan());
        assert!(max(&[1.0, -2.0, f32::NAN]).is_nan());
        assert_eq!(max_of_numbers(&[f32::NAN, 1.0, -2.0]), 1.0);
    }

    #[test]
    fn softmax_matches_f64() {
        for path in softmax_paths() {
            for (i, &n) in LENGTHS.iter().enumerate() {
                let mut row = randv(n, 100 + i as u64, 4.0, 30.0);
                let x = f64s(&row);
                let m = x.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = x.iter().map(|v| (v - m).exp()).sum();
                softmax_row_on(path, &mut row);
                for (got, v) in row.iter().zip(&x) {
                    let want = (v - m).exp() / z;
                    assert!(
                        (f64::from(*got) - want).abs() <= 1e-6 * want + 1e-9,
                        "{path:?}, n = {n}: {got} vs {want}"
                    );
                }
            }
        }
    }

    /// A maximum the shift misses overflows exp (e¹⁰⁰ > f32::MAX) and turns the row into NaN: so the largest entry,
    /// put in each place of rows with a pair of whole vectors, an odd one and a tail, must come out as 1.
    #[test]
    fn softmax_shifts_by_the_maximum_wherever_it_is() {
        for path in softmax_paths() {
            for n in [37, 48, 55] {
                for at in 0..n {
                    let mut row = randv(n, 9, 1.0, 0.0);
                    row[at] = 100.0;
                    softmax_row_on(path, &mut row);
                    assert_eq!(row[at], 1.0, "{path:?}, n = {n}, largest at {at}");
                    assert!(
                        row.iter().all(|x| x.is_finite()),
                        "{path:?}, n = {n}, largest at {at}"
                    );
                }
            }
        }
    }

    /// A block's rows (AVX-512: rows of 128 four at a time, rows past the group's size one at a time), on every
    /// path this CPU runs, give each row what the portable path gives it alone, to the bit: the same maximum,
    /// exponentials, sum and scaling. A last partial row is left as it was.
    #[test]
    fn softmax_rows_match_each_row_alone_on_every_path() {
        for (i, n) in [1usize, 7, 37, 128, 1100, 1500].into_iter().enumerate() {
            for rows in [1usize, 3, 4, 9] {
                let block = randv(rows * n + n / 2, 800 + i as u64, 4.0, 0.0);
                let mut want = block.clone();
                for row in want.chunks_exact_mut(n) {
                    softmax_rows_on(SoftmaxPath::Portable, row, n);
                }
                for path in softmax_paths() {
                    let mut got = block.clone();
                    softmax_on(path, &mut got, n);
                    assert_eq!(got, want, "{path:?}, rows of {n}, {rows} rows");
                }
            }
        }
        softmax_rows(&mut [1.0, 2.0], 0);
    }

    /// The paths the softmax tests run: the one this CPU dispatches to (`None`), and each it runs.
    fn softmax_paths() -> Vec<Option<SoftmaxPath>> {
        let runs = SoftmaxPath::ALL.into_iter().filter(|p| p.runs_here());
        std::iter::once(None).chain(runs.map(Some)).collect()
    }

    /// The softmax of `row` on `path`.
    fn softmax_row_on(path: Option<SoftmaxPath>, row: &mut [f32]) {
        let n = row.len();
        softmax_on(path, row, n);
    }

    /// The softmax of `block`'s rows of `n` on `path`.
    fn softmax_on(path: Option<SoftmaxPath>, block: &mut [f32], n: usize) {
        match path {
            None => softmax_rows(block, n),
            Some(path) => softmax_rows_on(path, block, n),
        }
    }

    /// The softmax's exp pass, both the copy this CPU dispatches to and the plain one every CPU can run, against
    /// f64: each value within exp's 4e-7, and the sum within its lanes' rounding.
    #[test]
    fn exp_pass_matches_f64_on_every_path() {
        for (i, &n) in LENGTHS.iter().enumerate() {
            let row = randv(n, 700 + i as u64, 4.0, 30.0);
            let shift = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let want: Vec<f64> = f64s(&row)
                .iter()
                .map(|v| (v - f64::from(shift)).exp())
                .collect();
            let plain = |r: &mut [f32]| exp_shifted_in::<math::Plain>(r, shift);
            let dispatched = |r: &mut [f32]| exp_shifted(r, shift);
            for (path, pass) in [
                ("plain", &plain as &dyn Fn(&mut [f32]) -> f32),
                ("dispatched", &dispatched),
            ] {
                let mut got = row.clone();
                let total = pass(&mut got);
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (f64::from(*g) - w).abs() <= 4e-7 * w,
                        "{path}, n = {n}: {g} vs {w}"
                    );
                }
                let z: f64 = want.iter().sum();
                assert!(
                    (f64::from(total) - z).abs() <= 1e-6 * z,
                    "{path}, n = {n}: sum {total} vs {z}"
                );
            }
        }
    }

    #[test]
    fn softmax_masking() {
        for path in softmax_paths() {
            let mut row = [0.0, f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY];
            softmax_row_on(path, &mut row);
            assert_eq!(row, [0.5, 0.0, 0.5, 0.0], "{path:?}");
            // Whole vectors and a tail, every entry masked.
            for n in [5, 16, 37] {
                let mut masked = vec![f32::NEG_INFINITY; n];
                softmax_row_on(path, &mut masked);
                assert_eq!(masked, vec![0.0; n], "{path:?}, n = {n}");
            }
            // A NaN in the first vector, the second, and the tail.
            for at in [1, 20, 35] {
                let mut nan = randv(37, 7, 1.0, 0.0);
                nan[at] = f32::NAN;
                softmax_row_on(path, &mut nan);
                assert!(nan.iter().all(|x| x.is_nan()), "{path:?}, NaN at {at}");
            }
            softmax_row_on(path, &mut []);
        }
    }

    fn layer_norm_ref(x: &[f64], g: &[f64], b: &[f64], eps: f64) -> Vec<f64> {
        let n = x.len() as f64;
        let mean = x.iter().sum::<f64>() / n;
        let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
        let inv = 1.0 / (var + eps).sqrt();
        x.iter()
            .zip(g)
            .zip(b)
            .map(|((v, g), b)| (v - mean) * inv * g + b)
            .collect()
    }

    #[test]
    fn layer_norm_matches_f64() {
        // The offset case fails with a one-pass E[x²] − mean² variance.
        for (offset, tol) in [(0.0f32, 2e-6), (1000.0, 2e-4)] {
            for (i, &n) in LENGTHS.iter().enumerate() {
                let row = randv(n, 200 + i as u64, 2.0, offset);
                let gamma = randv(n, 300 + i as u64, 1.0, 1.0);
                let beta = randv(n, 400 + i as u64, 0.1, 0.0);
                let mut out = vec![f32::NAN; n];
                layer_norm(&row, &gamma, &beta, 1e-5, &mut out);
                let want = layer_norm_ref(&f64s(&row), &f64s(&gamma), &f64s(&beta), 1e-5);
                for ((&got, w), &g) in out.iter().zip(&want).zip(&gamma) {
                    let err = (f64::from(got) - w).abs();
                    assert!(
                        err <= tol * (1.0 + w.abs() + f64::from(g).abs()),
                        "offset {offset} n {n}: {got} vs {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn rms_norm_matches_f64() {
        for (i, &n) in LENGTHS.iter().enumerate() {
            let row = randv(n, 500 + i as u64, 2.0, 0.3);
            let gamma = randv(n, 600 + i as u64, 1.0, 1.0);
            let mut out = vec![f32::NAN; n];
            rms_norm(&row, &gamma, 1e-6, &mut out);
            let x = f64s(&row);
            let inv = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() / n as f64 + 1e-6).sqrt();
            for ((&got, v), &g) in out.iter().zip(&x).zip(&gamma) {
                let want = v * inv * f64::from(g);
                assert!(
                    (f64::from(got) - want).abs() <= 2e-6 * (1.0 + want.abs()),
                    "n {n}: {got} vs {want}"
                );
            }
        }
    }

    #[test]
    #[should_panic(expected = "layer_norm")]
    fn layer_norm_length_mismatch_panics() {
        let mut out = [0.0; 3];
        layer_norm(&[1.0, 2.0, 3.0], &[1.0; 2], &[0.0; 3], 1e-5, &mut out);
    }
}
