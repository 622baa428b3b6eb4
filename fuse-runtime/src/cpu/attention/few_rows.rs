//! Attention for a block of a few query rows (a decoding step: one row per head, or a group of heads sharing their
//! keys and values) without the GEMM driver: each score a dot product of a query row with a key, then the scores'
//! task, then each output row a sum of value rows weighted by its probabilities.
//!
//! On x86-64 both steps run on vectors held in registers (`x86::on_lanes`): a key's dot products with every row, and
//! each output row's sums over a strip of columns across a block of value rows. As loops over slices (which stay
//! for CPUs without AVX2), with the output rows added to in memory and each dot product's lanes summed one after
//! another, the same work took 1.7× (a Llama-3-8B layer at 2048 positions) to 2.9× (W5's layer) as long
//! (BENCHMARKS.md, thirty-eighth run).

use super::FEW_ROWS;

/// One block's operands for [`few_rows`], each slice starting at the block's first element: Q's `rows` rows (`d`
/// long, `q_rs` apart), the `n` keys (`d` long, `k_cs` apart) and the `n` value rows (`dv` long, `v_rs` apart).
pub(super) struct FewRows<'a> {
    pub n: usize,
    pub d: usize,
    pub dv: usize,
    pub q: &'a [f32],
    pub q_rs: usize,
    pub k: &'a [f32],
    pub k_cs: usize,
    pub v: &'a [f32],
    pub v_rs: usize,
}

/// How [`few_rows_on`] computes: on 512-bit or 256-bit vectors, or the portable loops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Path {
    Avx512,
    Avx2,
    Portable,
}

impl Path {
    const ALL: [Path; 3] = [Path::Avx512, Path::Avx2, Path::Portable];

    /// The fastest this CPU runs.
    fn best() -> Path {
        Path::ALL
            .into_iter()
            .find(|path| path.runs_here())
            .unwrap_or(Path::Portable)
    }

    /// Whether this CPU runs it (the x86 paths only on x86-64, where they are compiled).
    fn runs_here(self) -> bool {
        use super::super::math::{dispatch_avx2, dispatch_avx512};
        match self {
            Path::Avx512 => cfg!(target_arch = "x86_64") && dispatch_avx512(),
            Path::Avx2 => cfg!(target_arch = "x86_64") && dispatch_avx2(),
            Path::Portable => true,
        }
    }
}

/// `block` (its rows of `dv`) = softmax(Q·Kᵀ)·V for the block's query rows (at most [`FEW_ROWS`]), `probs` (rows × n)
/// holding the scores, which `softmax` turns into probabilities in place.
pub(super) fn few_rows(
    ops: &FewRows<'_>,
    block: &mut [f32],
    probs: &mut [f32],
    softmax: &dyn Fn(&mut [f32]),
) {
    few_rows_on(Path::best(), ops, block, probs, softmax)
}

/// [`few_rows`] on `path`.
fn few_rows_on(
    path: Path,
    ops: &FewRows<'_>,
    block: &mut [f32],
    probs: &mut [f32],
    softmax: &dyn Fn(&mut [f32]),
) {
    let (n, dv) = (ops.n, ops.dv);
    let rows = block.len() / dv.max(1);
    assert!(
        (1..=FEW_ROWS).contains(&rows) && probs.len() >= rows * n,
        "few-rows attention with too many rows or too few scores: planner bug"
    );
    let probs = &mut probs[..rows * n];
    // SAFETY: `probs` holds rows × n scores at row stride n.
    unsafe { scores_on(path, ops, rows, probs.as_mut_ptr(), n) };
    if n > 0 {
        softmax(probs);
    }
    // SAFETY: as above.
    unsafe { values_on(path, ops, probs.as_ptr(), n, block) };
}

/// Checks that `path` runs here and that `ops` holds what `rows` query rows read (the scores' and the values'
/// passes alike).
fn check_operands(path: Path, ops: &FewRows<'_>, rows: usize) {
    let &FewRows { n, d, dv, .. } = ops;
    assert!(
        path.runs_here()
            && (1..=FEW_ROWS).contains(&rows)
            && (n == 0
                || (ops.v.len() >= (n - 1) * ops.v_rs + dv
                    && (d == 0
                        || (ops.k.len() >= (n - 1) * ops.k_cs + d
                            && ops.q.len() >= (rows - 1) * ops.q_rs + d)))),
        "few-rows attention on a path this CPU lacks, or operands out of bounds: planner bug"
    );
}

/// The scores of `rows` query rows against the `ops.n` keys: row r's at `probs[r · probs_rs..][..n]`.
///
/// # Safety
/// Those `rows` runs of `n` floats are writable and no one else reads or writes them meanwhile.
pub(super) unsafe fn scores(ops: &FewRows<'_>, rows: usize, probs: *mut f32, probs_rs: usize) {
    // SAFETY: forwarded.
    unsafe { scores_on(Path::best(), ops, rows, probs, probs_rs) }
}

/// `block` (its rows of `dv`) = Σ_j probs[r · probs_rs + j] · value row j over the `ops.n` value rows.
///
/// # Safety
/// `probs` holds `block`'s rows of `n` probabilities at row stride `probs_rs`.
pub(super) unsafe fn values(
    ops: &FewRows<'_>,
    probs: *const f32,
    probs_rs: usize,
    block: &mut [f32],
) {
    // SAFETY: forwarded.
    unsafe { values_on(Path::best(), ops, probs, probs_rs, block) }
}

/// [`scores`] on `path`.
///
/// # Safety
/// As [`scores`].
unsafe fn scores_on(path: Path, ops: &FewRows<'_>, rows: usize, probs: *mut f32, probs_rs: usize) {
    check_operands(path, ops, rows);
    if ops.n == 0 {
        return;
    }
    let probs = ScoreRows {
        at: probs,
        rs: probs_rs,
    };
    // SAFETY (each): `path` runs on this CPU, the operands hold what they are read for (both checked above), and
    // the scores' rows are the caller's.
    match path {
        #[cfg(target_arch = "x86_64")]
        Path::Avx512 => unsafe { x86::scores_avx512(ops, rows, probs) },
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => unsafe { x86::scores_avx2(ops, rows, probs) },
        _ => unsafe { portable_scores(ops, rows, probs) },
    }
}

/// [`values`] on `path`.
///
/// # Safety
/// As [`values`].
unsafe fn values_on(
    path: Path,
    ops: &FewRows<'_>,
    probs: *const f32,
    probs_rs: usize,
    block: &mut [f32],
) {
    check_operands(path, ops, block.len() / ops.dv.max(1));
    let probs = ScoreRows {
        at: probs.cast_mut(),
        rs: probs_rs,
    };
    // SAFETY (each): as in `scores_on`; the probabilities' rows are the caller's.
    match path {
        #[cfg(target_arch = "x86_64")]
        Path::Avx512 => unsafe { x86::values_avx512(ops, probs, block) },
        #[cfg(target_arch = "x86_64")]
        Path::Avx2 => unsafe { x86::values_avx2(ops, probs, block) },
        _ => unsafe { portable_values(ops, probs, block) },
    }
}

/// Rows of scores (or probabilities) in memory: row r's score of key j at `at + r · rs + j`.
#[derive(Clone, Copy)]
struct ScoreRows {
    at: *mut f32,
    rs: usize,
}

impl ScoreRows {
    /// # Safety
    /// (r, j) is one of the rows' elements.
    #[inline(always)]
    unsafe fn get(self, r: usize, j: usize) -> f32 {
        // SAFETY: the caller's contract.
        unsafe { *self.ptr(r, j) }
    }

    /// # Safety
    /// As [`Self::get`], and the rows are writable.
    #[inline(always)]
    unsafe fn set(self, r: usize, j: usize, value: f32) {
        // SAFETY: the caller's contract.
        unsafe { *self.ptr(r, j) = value }
    }

    /// The address of (r, j).
    ///
    /// # Safety
    /// As [`Self::get`].
    #[inline(always)]
    unsafe fn ptr(self, r: usize, j: usize) -> *mut f32 {
        // SAFETY: the caller's contract.
        unsafe { self.at.add(r * self.rs + j) }
    }
}

/// The scores' loops over slices, for a CPU without AVX2: a multiply and an add per term (the scalar code's
/// rounding). Keys in the outer loop: each is read once for all the rows (a group of heads sharing them).
///
/// # Safety
/// The operands hold what they are read for; `probs` holds `rows` rows of `n`.
unsafe fn portable_scores(ops: &FewRows<'_>, rows: usize, probs: ScoreRows) {
    let &FewRows { n, d, .. } = ops;
    for j in 0..n {
        let key = &ops.k[j * ops.k_cs..][..d];
        for r in 0..rows {
            let query = &ops.q[r * ops.q_rs..][..d];
            let score = query.iter().zip(key).map(|(x, y)| x * y).sum();
            // SAFETY: (r, j) is one of the scores (the caller's contract).
            unsafe { probs.set(r, j, score) };
        }
    }
}

/// The values' loops over slices, for a CPU without AVX2.
///
/// # Safety
/// The operands hold what they are read for; `probs` holds `block`'s rows of `n`.
unsafe fn portable_values(ops: &FewRows<'_>, probs: ScoreRows, block: &mut [f32]) {
    let &FewRows { n, dv, .. } = ops;
    let rows = block.len() / dv;
    block.fill(0.0);
    for j in 0..n {
        let value = &ops.v[j * ops.v_rs..][..dv];
        for r in 0..rows {
            // SAFETY: (r, j) is one of the probabilities (the caller's contract).
            let p = unsafe { probs.get(r, j) };
            for (o, &x) in block[r * dv..][..dv].iter_mut().zip(value) {
                *o += p * x;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::super::gemm::{Lanes, Ymm, Zmm};
    use super::super::super::rows::{prefetch, prefetch_l2};
    use super::{FewRows, ScoreRows, FEW_ROWS};

    /// Defines a pass's entry point for one instruction set: `$pass` on `$lanes`' vectors, compiled for `$features`.
    macro_rules! entry {
        ($name:ident, $features:literal, $lanes:ty, scores) => {
            /// # Safety
            /// The CPU runs the instruction set; the operands hold what they are read for; `probs` holds `rows`
            /// rows of `n` scores.
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $name(ops: &FewRows<'_>, rows: usize, probs: ScoreRows) {
                // SAFETY: forwarded.
                unsafe { scores_on_lanes::<$lanes>(ops, rows, probs) }
            }
        };
        ($name:ident, $features:literal, $lanes:ty, values) => {
            /// # Safety
            /// The CPU runs the instruction set; the operands hold what they are read for; `probs` holds
            /// `block`'s rows of `n` probabilities.
            #[target_feature(enable = $features)]
            pub(super) unsafe fn $name(ops: &FewRows<'_>, probs: ScoreRows, block: &mut [f32]) {
                // SAFETY: forwarded.
                unsafe { values_on_lanes::<$lanes>(ops, probs, block) }
            }
        };
    }

    entry!(scores_avx512, "avx512f,avx512vl,avx2,fma", Zmm, scores);
    entry!(values_avx512, "avx512f,avx512vl,avx2,fma", Zmm, values);
    entry!(scores_avx2, "avx2,fma", Ymm, scores);
    entry!(values_avx2, "avx2,fma", Ymm, values);

    /// Keys ahead of the one being multiplied that are asked into L1 (2 KiB at a head dim of 64).
    ///
    /// A decoding step's attention reads each head's keys, then its values, once, from memory (a step's 30 layers
    /// of cache and its weights pass through the caches between two reads of one layer); each head's read is short
    /// (66 KB at W5's past 128), and the hardware's prefetchers, which follow a stream only once it has run for a
    /// while, left the kernel waiting at about half the memory's rate. With the values asked for while the keys are
    /// multiplied and the keys a few rows ahead, W5's batch-8 layer ran at 1.3–1.5× the rate and a Llama-3-8B
    /// layer at past 512 1.3× (`gemm_bench --attention`, BENCHMARKS.md, forty-seventh run).
    const KEYS_AHEAD: usize = 8;

    /// Asks for the lines of `len` floats from `p` with `hint` (a prefetch: it reads nothing and cannot fault).
    #[inline(always)]
    fn ask_for_row(p: *const f32, len: usize, hint: fn(*const f32)) {
        for c in (0..len).step_by(16) {
            hint(p.wrapping_add(c));
        }
        // The row's last line, where the row does not start on a line (one that does has every line asked for).
        if len > 0 && !(p as usize).is_multiple_of(64) {
            hint(p.wrapping_add(len - 1));
        }
    }

    /// Vectors of a strip of output columns per row, by rows (`S` below): eight sums in registers at most, which
    /// leaves AVX2's sixteen room for the value row and the splat probability. Each sum is a chain of fused
    /// multiply-adds, one a value row, so one or two rows need the wider strip to keep enough chains in flight (a
    /// block of one row: a model whose every head has its own keys, as GPT-2's).
    const fn strip_vectors(rows: usize) -> usize {
        if rows <= 2 {
            4
        } else {
            2
        }
    }

    /// Floats of value rows (32 KiB) that every strip of output columns passes over before the next rows: they stay
    /// in L1 from the first strip to the last. With the strips outermost, a cache larger than L2 (a long
    /// context's) was read from L3 once per strip, four times for a head dim of 128.
    const VALUE_BLOCK: usize = 8192;

    /// Keys whose dot products are formed together: each query vector is loaded once for the four, and their
    /// sums' lanes are added in one tree ([`Lanes::store_sums4`]), a third of the shuffles and adds of a tree per
    /// key. Only where the sums leave a register of `L`'s free (every row count on AVX-512; up to three rows on
    /// AVX2), otherwise one key at a time: four rows' sixteen sums took all of AVX2's registers, and spilled to the
    /// stack in the depth loop they ran a Llama-3-8B layer (four rows a block) at 0.6–0.9× the rate of one key at a
    /// time from cache, and from memory at 0.7× and, in one sitting, 0.07–0.15× (BENCHMARKS.md, forty-eighth run).
    const KEY_GROUP: usize = 4;

    /// Whether `R` rows form [`KEY_GROUP`] keys' dot products together on `L`'s registers.
    const fn keys_grouped<L: Lanes, const R: usize>() -> bool {
        R * KEY_GROUP < L::REGISTERS
    }

    /// The scores on `L`'s vectors: each a fused multiply-add chain over the depth, the lanes of a group of keys'
    /// sums added together (the row count a constant, so the sums are registers rather than an array indexed at
    /// run time).
    ///
    /// # Safety
    /// `L`'s instruction set runs here; the operands hold what they are read for; `probs` holds `rows` rows of `n`.
    #[inline(always)]
    unsafe fn scores_on_lanes<L: Lanes>(ops: &FewRows<'_>, rows: usize, probs: ScoreRows) {
        // SAFETY (each): forwarded.
        match rows {
            1 => unsafe { scores_rows::<L, 1>(ops, probs) },
            2 => unsafe { scores_rows::<L, 2>(ops, probs) },
            3 => unsafe { scores_rows::<L, 3>(ops, probs) },
            _ => unsafe { scores_rows::<L, FEW_ROWS>(ops, probs) },
        }
    }

    /// [`scores_on_lanes`] for `R` rows.
    ///
    /// # Safety
    /// As [`scores_on_lanes`], with `R` rows.
    #[inline(always)]
    unsafe fn scores_rows<L: Lanes, const R: usize>(ops: &FewRows<'_>, probs: ScoreRows) {
        let n = ops.n;
        let grouped = if keys_grouped::<L, R>() {
            n - n % KEY_GROUP
        } else {
            0
        };
        // SAFETY: every key and the rows' queries hold d elements (the caller's contract); the groups' keys and
        // the keys after them are below n; (r, j) is one of the scores for every r < R and j < n.
        unsafe {
            for j0 in (0..grouped).step_by(KEY_GROUP) {
                for j in j0..j0 + KEY_GROUP {
                    ask_ahead(ops, j);
                }
                let sums = dots::<L, R, KEY_GROUP>(ops, j0);
                for (r, &sums) in sums.iter().enumerate() {
                    L::store_sums4(probs.ptr(r, j0), sums);
                }
            }
            for j in grouped..n {
                ask_ahead(ops, j);
                let sums = dots::<L, R, 1>(ops, j);
                for (r, &[sum]) in sums.iter().enumerate() {
                    probs.set(r, j, L::sum(sum));
                }
            }
        }
    }

    /// While key `j` is multiplied, its value row asked into L2 (from which the second pass reads it; a long
    /// context's, evicted from L2 by then, comes from L3) and a key a few rows ahead into L1 (see `KEYS_AHEAD`).
    #[inline(always)]
    fn ask_ahead(ops: &FewRows<'_>, j: usize) {
        ask_for_row(
            ops.v.as_ptr().wrapping_add(j * ops.v_rs),
            ops.dv,
            prefetch_l2,
        );
        if j + KEYS_AHEAD < ops.n {
            let key = ops.k.as_ptr().wrapping_add((j + KEYS_AHEAD) * ops.k_cs);
            ask_for_row(key, ops.d, prefetch);
        }
    }

    /// The `R` query rows' dot products with keys `j0..j0 + G`, each still in `L`'s lanes.
    ///
    /// # Safety
    /// `L`'s instruction set runs here; the keys are below n; the operands hold what they are read for.
    #[inline(always)]
    unsafe fn dots<L: Lanes, const R: usize, const G: usize>(
        ops: &FewRows<'_>,
        j0: usize,
    ) -> [[L::V; G]; R] {
        let d = ops.d;
        let (whole, rest) = (d / L::LANES, d % L::LANES);
        // Formed without `add`: with d = 0 no key is read, and `k` may then be empty.
        let key = |g: usize| ops.k.as_ptr().wrapping_add((j0 + g) * ops.k_cs);
        let query = |r: usize| ops.q.as_ptr().wrapping_add(r * ops.q_rs);
        let mut sums = [[L::zero(); G]; R];
        // SAFETY: the keys and queries hold d elements (the caller's contract); a masked load reads only its lanes.
        unsafe {
            for i in 0..whole {
                let k: [L::V; G] = std::array::from_fn(|g| L::load(key(g).add(i * L::LANES)));
                for (r, row) in sums.iter_mut().enumerate() {
                    let q = L::load(query(r).add(i * L::LANES));
                    for (sum, &k) in row.iter_mut().zip(&k) {
                        *sum = L::fmadd(q, k, *sum);
                    }
                }
            }
            if rest > 0 {
                let mask = L::first(rest);
                let at = whole * L::LANES;
                let k: [L::V; G] = std::array::from_fn(|g| L::load_masked(key(g).add(at), mask));
                for (r, row) in sums.iter_mut().enumerate() {
                    let q = L::load_masked(query(r).add(at), mask);
                    for (sum, &k) in row.iter_mut().zip(&k) {
                        *sum = L::fmadd(q, k, *sum);
                    }
                }
            }
        }
        sums
    }

    /// `block` from the probabilities on `L`'s vectors: each output strip's sums in registers across every value
    /// row.
    ///
    /// # Safety
    /// `L`'s instruction set runs here; the operands hold what they are read for; `probs` holds `block`'s rows of
    /// `n`.
    #[inline(always)]
    unsafe fn values_on_lanes<L: Lanes>(ops: &FewRows<'_>, probs: ScoreRows, block: &mut [f32]) {
        let rows = block.len() / ops.dv;
        const S1: usize = strip_vectors(1);
        const S2: usize = strip_vectors(2);
        const S3: usize = strip_vectors(3);
        const S4: usize = strip_vectors(FEW_ROWS);
        // SAFETY (each): forwarded.
        match rows {
            1 => unsafe { values_rows::<L, 1, S1>(ops, probs, block) },
            2 => unsafe { values_rows::<L, 2, S2>(ops, probs, block) },
            3 => unsafe { values_rows::<L, 3, S3>(ops, probs, block) },
            _ => unsafe { values_rows::<L, FEW_ROWS, S4>(ops, probs, block) },
        }
    }

    /// [`values_on_lanes`] for `R` rows, in strips of `S` vectors.
    ///
    /// # Safety
    /// As [`values_on_lanes`], with `block` holding `R` rows.
    #[inline(always)]
    unsafe fn values_rows<L: Lanes, const R: usize, const S: usize>(
        ops: &FewRows<'_>,
        probs: ScoreRows,
        block: &mut [f32],
    ) {
        let &FewRows { n, dv, .. } = ops;
        if n == 0 {
            // A sum over no value rows.
            block.fill(0.0);
        }
        let (width, keys) = (S * L::LANES, (VALUE_BLOCK / dv).max(1));
        for j0 in (0..n).step_by(keys) {
            let value_rows = j0..(j0 + keys).min(n);
            for c0 in (0..dv).step_by(width) {
                let cols = width.min(dv - c0);
                // SAFETY: forwarded; the strip's columns lie inside every value row and every row of `block`.
                unsafe {
                    if cols == width {
                        strip::<L, R, S, true>(ops, probs, block, (c0, cols), value_rows.clone())
                    } else {
                        strip::<L, R, S, false>(ops, probs, block, (c0, cols), value_rows.clone())
                    }
                }
            }
        }
    }

    /// Output columns `c0..c0 + cols` (at most `S` vectors) of `block`'s `R` rows: Σ_j `probs(r, j)` ·
    /// value row j over `value_rows`, the sums in registers, added to what the earlier value rows left in `block`
    /// (nothing before the first). `WHOLE`: the strip is `S` whole vectors, loaded and stored without masks (a
    /// constant, so the loop over the value rows has no branch).
    ///
    /// # Safety
    /// As [`on_lanes`]; the columns lie inside every value row and every row of `block` (R rows of dv).
    #[inline(always)]
    unsafe fn strip<L: Lanes, const R: usize, const S: usize, const WHOLE: bool>(
        ops: &FewRows<'_>,
        probs: ScoreRows,
        block: &mut [f32],
        (c0, cols): (usize, usize),
        value_rows: std::ops::Range<usize>,
    ) {
        let dv = ops.dv;
        // Each vector's lanes inside the strip and their mask (an empty one is never read or written).
        let masks: [(usize, L::Mask); S] = std::array::from_fn(|s| {
            let lanes = cols.saturating_sub(s * L::LANES).min(L::LANES);
            // SAFETY: `lanes` ≤ L::LANES.
            (lanes, unsafe { L::first(lanes) })
        });
        // SAFETY: every value row holds the strip's columns (the caller's contract); a vector is loaded and
        // stored whole only where all its lanes lie inside the strip, otherwise under its mask, and not at all
        // where it has none.
        unsafe {
            let mut sums = [[L::zero(); S]; R];
            if value_rows.start > 0 {
                for (r, row_sums) in sums.iter_mut().enumerate() {
                    let out = block.as_ptr().add(r * dv + c0);
                    *row_sums = std::array::from_fn(|s| load_part::<L, WHOLE>(out, s, masks[s]));
                }
            }
            for j in value_rows {
                let value = ops.v.as_ptr().add(j * ops.v_rs + c0);
                let v: [L::V; S] =
                    std::array::from_fn(|s| load_part::<L, WHOLE>(value, s, masks[s]));
                for (r, row_sums) in sums.iter_mut().enumerate() {
                    let p = L::splat(probs.get(r, j));
                    for (sum, &x) in row_sums.iter_mut().zip(&v) {
                        *sum = L::fmadd(p, x, *sum);
                    }
                }
            }
            for (r, row_sums) in sums.iter().enumerate() {
                let out = block.as_mut_ptr().add(r * dv + c0);
                for (s, &sum) in row_sums.iter().enumerate() {
                    let at = out.wrapping_add(s * L::LANES);
                    match masks[s] {
                        _ if WHOLE => L::store(at, sum),
                        (0, _) => {}
                        (_, mask) => L::store_masked(at, mask, sum),
                    }
                }
            }
        }
    }

    /// Vector `s` of a strip that starts at `p`, with `lanes` of it inside the strip under `mask`: loaded whole
    /// (`WHOLE`), under the mask, or zeros where it has no lanes (its address is then never read).
    ///
    /// # Safety
    /// `L`'s instruction set runs here; the vector's lanes inside the strip are readable.
    #[inline(always)]
    unsafe fn load_part<L: Lanes, const WHOLE: bool>(
        p: *const f32,
        s: usize,
        (lanes, mask): (usize, L::Mask),
    ) -> L::V {
        let at = p.wrapping_add(s * L::LANES);
        // SAFETY: the caller's contract.
        unsafe {
            match lanes {
                _ if WHOLE => L::load(at),
                0 => L::zero(),
                _ => L::load_masked(at, mask),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{f64_attention_row, ScaledSoftmax};
    use super::super::Products;
    use super::*;
    use crate::cpu::par::SimdTask;
    use crate::tensor::Tensor;

    /// Every path against f64, on random operands at strides, over row counts 1–4, depths and widths on either
    /// side of the vectors' lanes (whole vectors, a masked one, fewer than one lane's worth) and enough keys for
    /// several blocks of value rows; the scores' task is a scaled softmax, as a plain attention's.
    #[test]
    fn every_path_matches_f64() {
        let shapes = [
            (1, 129, 64, 64),
            (3, 129, 64, 64),
            (4, 37, 13, 5),
            (2, 20, 8, 40),
            (1, 1, 1, 1),
            (4, 3, 31, 33),
            (3, 50, 17, 16),
            // Value rows in several blocks, with a strip under a mask.
            (2, 300, 8, 40),
            (4, 260, 16, 37),
        ];
        for (rows, n, d, dv) in shapes {
            let (q_rs, k_cs, v_rs) = (d + 3, d + 1, dv + 5);
            let q = Tensor::randn(&[rows * q_rs], 11).to_f32_vec();
            let k = Tensor::randn(&[n * k_cs], 12).to_f32_vec();
            let v = Tensor::randn(&[n * v_rs], 13).to_f32_vec();
            let ops = FewRows {
                n,
                d,
                dv,
                q: &q,
                q_rs,
                k: &k,
                k_cs,
                v: &v,
                v_rs,
            };
            let scale = 0.3;
            let task = ScaledSoftmax { n, scale };
            let softmax = |p: &mut [f32]| task.run_simd(0, p);
            for path in Path::ALL.into_iter().filter(|path| path.runs_here()) {
                let mut block = vec![f32::NAN; rows * dv];
                let mut probs = vec![f32::NAN; rows * n];
                few_rows_on(path, &ops, &mut block, &mut probs, &softmax);
                for r in 0..rows {
                    let want = f64_attention_row(
                        (n, d, dv, scale),
                        Products::F32,
                        |c| q[r * q_rs + c],
                        |j, c| k[j * k_cs + c],
                        |j, t| f64::from(v[j * v_rs + t]),
                    );
                    for (t, (want, tolerance)) in want.into_iter().enumerate() {
                        let got = f64::from(block[r * dv + t]);
                        assert!(
                            (got - want).abs() <= tolerance,
                            "{path:?} {rows}x{n}x{d}x{dv} at ({r}, {t}): {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
