//! A decoding step's attention over a long cache with fewer blocks than threads want: each block's keys and values
//! cut into parts that threads take in turn (as "flash decoding" does on a GPU). A step has one block per sequence
//! and key-value head, so a batch of one has as many blocks as the model has key-value heads (3 in SmolLM, 8 in
//! Llama-3-8B): with more threads than that, or a count that does not divide among them, threads waited while the
//! others read their heads' caches, which are large in a long context (a Llama-3-8B layer's keys and values at 8192
//! positions are 67 MB in f32, a third of the layer's int8 weights). On two threads, one key-value head's block of
//! four heads at 8192 positions ran 1.4-1.5× as fast split (`gemm_bench --attention`, BENCHMARKS.md, forty-seventh
//! run).
//!
//! Four passes: each part's scores into one buffer of the step's rows; each block's task (scaling, mask, softmax)
//! over its whole rows; each part's sums of its value rows weighted by their probabilities; each block's parts
//! added into its output rows. Each pass is split between threads; the probabilities are the same as unsplit, and
//! the output rows are sums over the parts in a fixed order, so a result does not depend on which thread took which
//! part; the count of parts follows the pool's threads, so between pools of different sizes a result may differ in
//! its last bits (the sums' rounding), as PyTorch's reductions on the CPU do.

use rayon::prelude::*;

use super::few_rows::{scores, values, FewRows};
use super::{AttentionSpec, Query};
use crate::cpu::par::{batch_offsets, SharedOut, SimdTask};
use crate::cpu::scratch::{put, take, with_buffer, ATTENTION_ROWS, QUERIES, SCORES};

/// Keys a part holds at the least: a part's work (64 KiB of keys and as much of values at a head dim of 64) must
/// outweigh the passes' extra forks and joins.
const MIN_PART_KEYS: usize = 256;

/// Tasks per thread a split aims at, so that blocks that do not divide among the threads still balance.
const TASKS_PER_THREAD: usize = 4;

/// Parts to cut each of `blocks` blocks of `n` keys into for `threads` threads; 1 where splitting would not pay
/// (as many blocks as threads want already, or too few keys).
pub(super) fn parts(blocks: usize, n: usize, threads: usize) -> usize {
    let wanted = (TASKS_PER_THREAD * threads).div_ceil(blocks.max(1));
    wanted.min(n / MIN_PART_KEYS).max(1)
}

/// Part `p`'s keys of `n` cut into `parts`: equal runs in order, the last shorter, or empty where rounding left the
/// last parts none (a part of `n.div_ceil(parts)` keys each can cover `n` in fewer).
fn part_keys(p: usize, parts: usize, n: usize) -> std::ops::Range<usize> {
    let per_part = n.div_ceil(parts.max(1));
    (p * per_part).min(n)..((p + 1) * per_part).min(n)
}

/// The step's attention in `parts` parts per block: one block per batch (its `spec.m` rows, at most a few), each
/// of whose keys and values is contiguous (`spec.k.rs == 1`, `spec.v.cs == 1`, Q's rows contiguous too), and the
/// output rows placed where `spec.out` says, inside `out` (the caller checked).
pub(super) fn split_attention(
    spec: &AttentionSpec<'_>,
    q: Query<'_>,
    (k, v): (&[f32], &[f32]),
    out: &mut [f32],
    task: &dyn SimdTask,
    parts: usize,
) {
    let batches: usize = spec.batch.iter().product();
    let (m, n, dv) = (spec.m, spec.n, spec.dv);
    let tasks = batches * parts;
    // The step's scores, `[batches, m, n]`, and each part's sums, `[batches, parts, m, dv]`, shared by the passes.
    let mut probs = take(&SCORES, batches * m * n);
    let mut sums = take(&ATTENTION_ROWS, tasks * m * dv);
    let (probs_at, sums_at) = (SharedOut(probs.as_mut_ptr()), SharedOut(sums.as_mut_ptr()));
    let keys = |p: usize| part_keys(p, parts, n);
    (0..tasks).into_par_iter().for_each(|t| {
        let (b, p) = (t / parts, t % parts);
        let ops = keys_and_values(spec, (k, v), b, keys(p));
        with_query(spec, q, b, ops, |ops| {
            // SAFETY: block b's rows of scores, at the part's keys, lie inside `probs` and are this task's alone.
            unsafe { scores(ops, m, probs_at.at(b * m * n + keys(p).start), n) }
        });
    });
    (0..batches).into_par_iter().for_each(|b| {
        // SAFETY: block b's m rows of n scores lie inside `probs` and are this task's alone.
        let rows = unsafe { std::slice::from_raw_parts_mut(probs_at.at(b * m * n), m * n) };
        task.run_simd(b * m, rows);
    });
    (0..tasks).into_par_iter().for_each(|t| {
        let (b, p) = (t / parts, t % parts);
        // The values' pass reads neither Q nor K: no query rows are computed for it, and a depth of 0 says so.
        let ops = FewRows {
            d: 0,
            k: &[],
            ..keys_and_values(spec, (k, v), b, keys(p))
        };
        // SAFETY: task t's m rows of sums lie inside `sums` and are its alone; the probabilities at the part's keys
        // are block b's, written by the passes before.
        unsafe {
            let block = std::slice::from_raw_parts_mut(sums_at.at(t * m * dv), m * dv);
            values(&ops, probs_at.at(b * m * n + keys(p).start), n, block);
        }
    });
    let out_at = SharedOut(out.as_mut_ptr());
    (0..batches).into_par_iter().for_each(|b| {
        let [base] = batch_offsets(spec.batch, [spec.out.batch], b);
        for r in 0..m {
            // SAFETY: the caller checked that every output row lies inside `out`; blocks own disjoint rows.
            let row =
                unsafe { std::slice::from_raw_parts_mut(out_at.at(base + r * spec.out.rs), dv) };
            let part_row = |p: usize| &sums[((b * parts + p) * m + r) * dv..][..dv];
            row.copy_from_slice(part_row(0));
            for p in 1..parts {
                for (o, &x) in row.iter_mut().zip(part_row(p)) {
                    *o += x;
                }
            }
        }
    });
    put(&SCORES, probs);
    put(&ATTENTION_ROWS, sums);
}

/// Block `b`'s keys' and values' rows over `keys` (from `keys.start` on), without its query rows (see
/// [`with_query`]).
fn keys_and_values<'a>(
    spec: &AttentionSpec<'_>,
    (k, v): (&'a [f32], &'a [f32]),
    b: usize,
    keys: std::ops::Range<usize>,
) -> FewRows<'a> {
    let [kb, vb] = batch_offsets(spec.batch, [spec.k_batch, spec.v_batch], b);
    let (ko, vo) = (
        spec.k.offset + kb + keys.start * spec.k.cs,
        spec.v.offset + vb + keys.start * spec.v.rs,
    );
    FewRows {
        n: keys.len(),
        d: spec.d,
        dv: spec.dv,
        q: &[],
        q_rs: 0,
        // Empty where nothing is read from it (no keys or no depth).
        k: k.get(ko..).unwrap_or(&[]),
        k_cs: spec.k.cs,
        v: v.get(vo..).unwrap_or(&[]),
        v_rs: spec.v.rs,
    }
}

/// Runs `f` on `ops` with block `b`'s query rows: in memory, or computed into this thread's scratch.
fn with_query(
    spec: &AttentionSpec<'_>,
    q: Query<'_>,
    b: usize,
    ops: FewRows<'_>,
    f: impl FnOnce(&FewRows<'_>),
) {
    let (m, d) = (spec.m, spec.d);
    match q {
        Query::Memory(q) => {
            let [qb] = batch_offsets(spec.batch, [spec.q_batch], b);
            f(&FewRows {
                q: q.get(spec.q.offset + qb..).unwrap_or(&[]),
                q_rs: spec.q.rs,
                ..ops
            });
        }
        Query::Computed(rows_of_q) => with_buffer(&QUERIES, m * d, |rows| {
            if d > 0 {
                rows_of_q.run_simd(b * m, rows);
            }
            f(&FewRows {
                q: rows,
                q_rs: d,
                ..ops
            });
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_split_only_where_threads_would_wait_and_the_cache_is_long() {
        // W5 at past 128 (too few keys), Llama-3-8B's 8 blocks on 2 threads (enough blocks): not split.
        assert_eq!(parts(3, 129, 2), 1);
        assert_eq!(parts(8, 8193, 2), 1);
        // W5's 3 blocks on 2 threads at past 1024; one block on 2 threads; 8 blocks on 32 threads.
        assert_eq!(parts(3, 1025, 2), 3);
        assert_eq!(parts(1, 8193, 2), 8);
        assert_eq!(parts(8, 8193, 32), 16);
        // As many parts as the keys allow at the least per part.
        assert_eq!(parts(1, 700, 64), 2);
    }

    #[test]
    fn parts_cover_the_keys_once_in_order() {
        for (n, parts) in [
            (1100, 4),
            (700, 2),
            (513, 2),
            (70_000, 273),
            (10, 4),
            (10, 6),
            (9, 6),
        ] {
            let mut next = 0;
            for p in 0..parts {
                let keys = part_keys(p, parts, n);
                assert_eq!(keys.start, next, "{n} keys in {parts} parts: part {p}");
                assert!(keys.end >= keys.start && keys.end <= n);
                next = keys.end;
            }
            assert_eq!(next, n, "{n} keys in {parts} parts");
        }
        // 10 keys in 6 parts of 2: five cover them, the last is empty.
        assert!(part_keys(5, 6, 10).is_empty());
    }
}
