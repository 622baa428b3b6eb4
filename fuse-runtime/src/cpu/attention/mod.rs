//! Attention by blocks of query rows: `out = softmax(f(Q·Kᵀ)) · V`, where the generated task applies `f` and the
//! softmax to each row of a block of scores. A block's scores live in a scratch small enough for L2, so the
//! `[batch.., m, n]` score tensors are never written to memory.

use rayon::prelude::*;

use super::gemm::bf16::{gemm_operands_on, Bf16Kernel};
use super::gemm::{sgemm, Strided};
use super::par::{batch_offsets, SharedOut, SimdTask};
use super::scratch::{with_buffer, ATTENTION_ROWS, QUERIES, SCORES};

mod few_rows;
mod split;

use few_rows::{few_rows, FewRows};

/// Where a matrix operand's element `(row, col)` of one batch is: `offset + row·rs + col·cs` (plus the batch's
/// offset), in elements.
#[derive(Clone, Copy, Debug)]
pub struct Operand {
    pub offset: usize,
    pub rs: usize,
    pub cs: usize,
}

/// `out[b] = softmax(f(Q[b] · K[b])) · V[b]` with `batch` dims: Q is m×d, K (already transposed) d×n, V n×dv;
/// `out`'s rows where `out` says. Batch strides are per operand (0 broadcasts).
#[derive(Clone, Copy, Debug)]
pub struct AttentionSpec<'s> {
    pub batch: &'s [usize],
    pub q_batch: &'s [usize],
    pub k_batch: &'s [usize],
    pub v_batch: &'s [usize],
    pub m: usize,
    pub n: usize,
    pub d: usize,
    pub dv: usize,
    pub q: Operand,
    pub k: Operand,
    pub v: Operand,
    pub out: Placement<'s>,
    /// The arithmetic of the two products.
    pub products: Products,
}

/// The arithmetic of attention's two products (Q·Kᵀ and P·V). The task on the scores (scaling, masking, softmax)
/// runs in f32 in every case, and a block of a few query rows (a decoding step's, [`FEW_ROWS`]) always multiplies
/// in f32: it is bound by reading the keys and values, not by the multiply-adds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Products {
    /// f32 operands and sums.
    #[default]
    F32,
    /// Operands rounded to bf16 (keys and values as each block packs them, queries and probabilities per row
    /// block), f32 sums, on this kernel (`gemm::bf16`).
    Bf16(Bf16Kernel),
}

impl Products {
    /// What a model whose weight products run in `precision` uses: bf16 in bf16 and int8 where the chosen bf16
    /// kernel multiplies bf16 itself (`vdpbf16ps` or AMX), which it is chosen for only where that outruns f32; f32
    /// otherwise (the widening kernels run at f32's rate at best, and would only add the rounding).
    pub fn for_precision(precision: super::CpuPrecision) -> Products {
        use super::CpuPrecision::{Bf16, Int8};
        let kernel = Bf16Kernel::best();
        let native = matches!(
            kernel,
            Bf16Kernel::Amx | Bf16Kernel::Avx512 | Bf16Kernel::Avx512Ymm
        );
        match precision {
            Bf16 | Int8 if native => Products::Bf16(kernel),
            _ => Products::F32,
        }
    }

    /// How the plan report names it.
    pub fn describe(self) -> &'static str {
        match self {
            Products::F32 => "f32",
            Products::Bf16(_) => "bf16 operands, f32 sums",
        }
    }
}

/// C = A·B (`dims` = (m, k, n)) in `products`' arithmetic.
///
/// # Safety
/// As [`sgemm`] with β = 0; C has a unit column stride.
unsafe fn product(
    products: Products,
    dims: (usize, usize, usize),
    a: Strided<*const f32>,
    b: Strided<*const f32>,
    c: Strided<*mut f32>,
) {
    // SAFETY (both): forwarded; a kernel named by `Products` is one this CPU runs.
    match products {
        Products::F32 => unsafe { sgemm(dims, 1.0, a, b, 0.0, c) },
        Products::Bf16(kernel) => unsafe {
            gemm_operands_on(kernel.for_rows(dims.0), dims, a, b, c)
        },
    }
}

/// Where the output's rows go: row `r` of batch `b` at `Σ b_k · batch[k] + r · rs`, its `dv` elements
/// contiguous. Contiguous `[batch.., m, dv]` is the usual case; a kernel writing its heads straight into a
/// `[batch, seq, heads, dv]` buffer has `rs = heads · dv`.
#[derive(Clone, Copy, Debug)]
pub struct Placement<'s> {
    pub batch: &'s [usize],
    pub rs: usize,
}

/// Where Q comes from.
#[derive(Clone, Copy)]
pub enum Query<'a> {
    /// In memory, where the spec's `q` and `q_batch` say.
    Memory(&'a [f32]),
    /// Computed by the kernel (RoPE of a projection): `run(first_row, rows)` writes Q's rows `first_row..`,
    /// counted over `[batch.., m]`, each `d` long. A block's rows go to a scratch as the block starts.
    Computed(&'a dyn SimdTask),
}

/// Scores per block: 64 KB, so a block, its rows of Q and the output rows stay in L2 between the two GEMMs.
pub const SCRATCH_ELEMENTS: usize = 1 << 14;

/// Below this many multiply-adds the whole attention runs on the calling thread.
const PARALLEL_MIN_FLOPS: usize = 1 << 20;

/// A decoding step's attention (a few query rows per sequence and head) does few multiply-adds per key and value
/// it reads, and reads them from memory (the cache was written a step ago, and the weights streamed since have
/// evicted it): from this many floats of keys and values read, its heads are split between threads.
const PARALLEL_MIN_STREAMED: usize = 1 << 16;

/// Most query rows of a block that take the direct path ([`few_rows`]): a decoding step has one per sequence and
/// head, and the GEMM driver's set-up (packing a 64×129 K per head, a 6-row tile for one row) cost 20 µs for
/// 33 k multiply-adds.
const FEW_ROWS: usize = 4;

/// Runs the attention of `spec`; `scores.run(first_row, block)` turns a block of raw scores (rows of `n`,
/// `first_row` counted over `[batch.., m]`) into probabilities in place.
pub fn attention(
    spec: &AttentionSpec<'_>,
    q: Query<'_>,
    k: &[f32],
    v: &[f32],
    out: &mut [f32],
    scores: &dyn SimdTask,
) {
    let batches: usize = spec.batch.iter().product();
    if batches == 0 || spec.m == 0 || spec.dv == 0 {
        return;
    }
    // Whether to split between threads is decided per head, before a group's heads become one block's rows.
    let flops = batches * spec.m * spec.n * (spec.d + spec.dv);
    let streams_cache =
        spec.m <= FEW_ROWS && batches > 1 && flops / spec.m >= PARALLEL_MIN_STREAMED;
    let serial =
        (flops < PARALLEL_MIN_FLOPS && !streams_cache) || rayon::current_num_threads() == 1;
    let grouped = grouped_rows(spec);
    let spec = grouped.as_ref().unwrap_or(spec);
    let batches: usize = spec.batch.iter().product();
    let (m, n, dv) = (spec.m, spec.n, spec.dv);
    // A computed Q's block goes to a scratch of the scores' size too.
    let query_row = match q {
        Query::Memory(_) => 1,
        Query::Computed(_) => spec.d,
    };
    // Rows placed elsewhere than contiguously go through a scratch of the scores' size in a block of a few rows.
    let contiguous = spec.out.rs == dv
        && (0..spec.batch.len())
            .all(|i| spec.out.batch[i] == spec.batch[i + 1..].iter().product::<usize>() * m * dv);
    let out_row = if contiguous { 1 } else { dv };
    // A few rows (a group of heads sharing K and V) stay one block even over a long cache, whose scores then
    // outgrow the scratch's usual size: splitting them would read K and V once per row again.
    let rows_per_block = (SCRATCH_ELEMENTS / n.max(query_row).max(out_row).max(1))
        .clamp(1, m)
        .max(m.min(FEW_ROWS));
    let blocks_per_batch = m.div_ceil(rows_per_block);
    // Each block's scores go to its thread's scratch (reserved at load), which the first GEMM overwrites. The
    // output rows go to `block`, or where `placed` says when it is given and the block takes the products' path;
    // whether `block` was written is returned.
    let run = |t: usize, block: &mut [f32], placed: Option<Strided<*mut f32>>| {
        let (b, row0) = (
            t / blocks_per_batch,
            (t % blocks_per_batch) * rows_per_block,
        );
        let rows = block.len() / dv;
        let to = BlockOut { block, placed };
        with_buffer(&SCORES, rows * n, |probs| {
            block_attention(spec, q, k, v, b, row0, to, scores, probs)
        })
    };
    // A step's few rows per block over a long cache, with fewer blocks than the threads want: each block's keys
    // are split between threads too (`split.rs`).
    let direct = m <= FEW_ROWS
        && spec.k.rs == 1
        && spec.v.cs == 1
        && (matches!(q, Query::Computed(_)) || spec.q.cs == 1);
    let parts = split::parts(batches, n, rayon::current_num_threads());
    if direct && !serial && parts > 1 {
        assert!(
            last_output(spec) < out.len(),
            "attention output placed out of bounds: planner bug"
        );
        return split::split_attention(spec, q, (k, v), out, scores, parts);
    }
    if contiguous {
        let mut blocks: Vec<&mut [f32]> = Vec::with_capacity(batches * blocks_per_batch);
        for batch in out.chunks_mut(m * dv).take(batches) {
            blocks.extend(batch.chunks_mut(rows_per_block * dv));
        }
        if serial {
            blocks.into_iter().enumerate().for_each(|(t, b)| {
                run(t, b, None);
            });
        } else {
            blocks.into_par_iter().enumerate().for_each(|(t, b)| {
                run(t, b, None);
            });
        }
        return;
    }
    // Every row written below is inside `out`.
    assert!(
        last_output(spec) < out.len(),
        "attention output placed out of bounds: planner bug"
    );
    let placed = SharedOut(out.as_mut_ptr());
    let run_placed = |t: usize| {
        let (b, row0) = (
            t / blocks_per_batch,
            (t % blocks_per_batch) * rows_per_block,
        );
        let rows = rows_per_block.min(m - row0);
        let [base] = batch_offsets(spec.batch, [spec.out.batch], b);
        // SAFETY: in bounds (`last` above). The planner places every output element once, so blocks, which own
        // disjoint rows, write disjoint elements, whether the products write them there or the copy below does.
        let first = unsafe { placed.at(base + row0 * spec.out.rs) };
        let rows_at = Strided::new(first, spec.out.rs as isize, 1);
        with_buffer(&ATTENTION_ROWS, rows * dv, |block| {
            // A few rows (the direct path) come back in `block`, to be placed row by row.
            if run(t, block, Some(rows_at)) {
                for (r, row) in block.chunks_exact(dv).enumerate() {
                    // SAFETY: as for `first`.
                    unsafe {
                        let to = placed.at(base + (row0 + r) * spec.out.rs);
                        std::ptr::copy_nonoverlapping(row.as_ptr(), to, dv);
                    }
                }
            }
        });
    };
    let blocks = batches * blocks_per_batch;
    if serial {
        (0..blocks).for_each(run_placed);
    } else {
        (0..blocks).into_par_iter().for_each(run_placed);
    }
}

/// The last element any output row is placed at (the spec has at least one batch, row and column).
fn last_output(spec: &AttentionSpec<'_>) -> usize {
    (0..spec.batch.len())
        .map(|i| (spec.batch[i] - 1) * spec.out.batch[i])
        .sum::<usize>()
        + (spec.m - 1) * spec.out.rs
        + spec.dv
        - 1
}

/// A decoding step's grouped-query attention as one block per group: when each head has one query row and the last
/// batch axis (the heads sharing a key-value head) broadcasts K and V, that axis becomes the rows, so the group's
/// queries go over the keys and values together and read them once rather than once per head. With one row per
/// head, a row's index counted over `[batch.., m]` (the tasks' and the computed Q's) is the same either way.
fn grouped_rows<'s>(spec: &AttentionSpec<'s>) -> Option<AttentionSpec<'s>> {
    let last = spec.batch.len().checked_sub(1)?;
    let group = spec.batch[last];
    let broadcast = spec.k_batch.get(last) == Some(&0) && spec.v_batch.get(last) == Some(&0);
    let out_rs = *spec.out.batch.get(last)?;
    // A computed Q has no strides (its rows come from its task, by index).
    let q_rs = spec.q_batch.get(last).copied().unwrap_or(spec.q.rs);
    (spec.m == 1 && group > 1 && broadcast).then(|| AttentionSpec {
        batch: &spec.batch[..last],
        q_batch: spec.q_batch.get(..last).unwrap_or(spec.q_batch),
        k_batch: &spec.k_batch[..last],
        v_batch: &spec.v_batch[..last],
        m: group,
        q: Operand { rs: q_rs, ..spec.q },
        out: Placement {
            batch: &spec.out.batch[..last],
            rs: out_rs,
        },
        ..*spec
    })
}

/// Where a block's output rows go: `block` (`rows × dv`, row-major), or where `placed` says (rows at its row
/// stride, each `dv` contiguous) when it is given and the block runs the two products; the direct path for a few
/// rows ([`few_rows`]) always writes `block`.
struct BlockOut<'a> {
    block: &'a mut [f32],
    placed: Option<Strided<*mut f32>>,
}

/// One block: rows `row0..` of batch `b`, written as `to` says (returns whether it wrote `to.block`); `probs`
/// (`rows × n`) holds its scores.
#[allow(clippy::too_many_arguments)]
fn block_attention(
    spec: &AttentionSpec<'_>,
    q: Query<'_>,
    k: &[f32],
    v: &[f32],
    b: usize,
    row0: usize,
    to: BlockOut<'_>,
    scores: &dyn SimdTask,
    probs: &mut [f32],
) -> bool {
    match q {
        Query::Memory(q) => {
            let [qb] = batch_offsets(spec.batch, [spec.q_batch], b);
            let at = Operand {
                offset: spec.q.offset + qb + row0 * spec.q.rs,
                ..spec.q
            };
            block_attention_of(spec, (q, at), k, v, b, row0, to, scores, probs)
        }
        Query::Computed(task) => {
            let rows = to.block.len() / spec.dv.max(1);
            with_buffer(&QUERIES, rows * spec.d, |rows_of_q| {
                if spec.d > 0 {
                    task.run_simd(b * spec.m + row0, rows_of_q);
                }
                // The block's rows of Q, row-major from the scratch's start.
                let at = Operand {
                    offset: 0,
                    rs: spec.d,
                    cs: 1,
                };
                block_attention_of(spec, (rows_of_q, at), k, v, b, row0, to, scores, probs)
            })
        }
    }
}

/// [`block_attention`] with the block's rows of Q in memory: its first row where `q_at` says.
#[allow(clippy::too_many_arguments)]
fn block_attention_of(
    spec: &AttentionSpec<'_>,
    (q, q_at): (&[f32], Operand),
    k: &[f32],
    v: &[f32],
    b: usize,
    row0: usize,
    to: BlockOut<'_>,
    scores: &dyn SimdTask,
    probs: &mut [f32],
) -> bool {
    let (n, d, dv) = (spec.n, spec.d, spec.dv);
    let BlockOut { block, placed } = to;
    let rows = block.len() / dv;
    let [kb, vb] = batch_offsets(spec.batch, [spec.k_batch, spec.v_batch], b);
    let (qo, ko, vo) = (q_at.offset, spec.k.offset + kb, spec.v.offset + vb);
    let last = |o: usize, r: usize, rs: usize, c: usize, cs: usize| o + (r - 1) * rs + (c - 1) * cs;
    let in_bounds = n == 0
        || (last(vo, n, spec.v.rs, dv, spec.v.cs) < v.len()
            && (d == 0
                || (last(qo, rows, q_at.rs, d, q_at.cs) < q.len()
                    && last(ko, d, spec.k.rs, n, spec.k.cs) < k.len())));
    assert!(in_bounds, "attention operand out of bounds: planner bug");
    // A key's d values and a value row's dv values each contiguous (K cached as [.., n, d] and read transposed,
    // V as [.., n, dv]): the direct path reads them as slices.
    if rows <= FEW_ROWS && q_at.cs == 1 && spec.k.rs == 1 && spec.v.cs == 1 {
        let operands = FewRows {
            n,
            d,
            dv,
            // Empty where nothing is read from it (d or n zero: not bounds-checked above).
            q: q.get(qo..).unwrap_or(&[]),
            q_rs: q_at.rs,
            k: k.get(ko..).unwrap_or(&[]),
            k_cs: spec.k.cs,
            v: v.get(vo..).unwrap_or(&[]),
            v_rs: spec.v.rs,
        };
        few_rows(&operands, block, probs, &|p: &mut [f32]| {
            scores.run_simd(b * spec.m + row0, p)
        });
        return true;
    }
    if n > 0 {
        // SAFETY: the last elements read from Q and K are in bounds (checked above); `probs` is rows × n.
        unsafe {
            product(
                spec.products,
                (rows, d, n),
                Strided::new(q.as_ptr().add(qo), q_at.rs as isize, q_at.cs as isize),
                Strided::new(k.as_ptr().add(ko), spec.k.rs as isize, spec.k.cs as isize),
                Strided::new(probs.as_mut_ptr(), n as isize, 1),
            );
        }
        scores.run_simd(b * spec.m + row0, probs);
    }
    let c = placed.unwrap_or(Strided::new(block.as_mut_ptr(), dv as isize, 1));
    // SAFETY: the last element read from V is in bounds (checked above); C is `block` (rows × dv, row-major) or
    // the block's own placed rows, which the caller checked are inside the output.
    unsafe {
        product(
            spec.products,
            (rows, n, dv),
            Strided::new(probs.as_ptr(), n as isize, 1),
            Strided::new(v.as_ptr().add(vo), spec.v.rs as isize, spec.v.cs as isize),
            c,
        );
    }
    placed.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::par::{FnTask, RowTask};
    use crate::cpu::rows::softmax_rows;
    use crate::tensor::Tensor;

    /// Scales by `scale`, then softmax: the task a plain `softmax(Q·Kᵀ·scale)` gets.
    pub(super) struct ScaledSoftmax {
        pub(super) n: usize,
        pub(super) scale: f32,
    }

    impl RowTask for ScaledSoftmax {
        fn run<A: crate::cpu::math::Arith>(&self, _: usize, rows: &mut [f32]) {
            rows.iter_mut().for_each(|x| *x *= self.scale);
            softmax_rows(rows, self.n);
        }
    }

    /// One output row of `softmax(q · Kᵀ · scale) · V` in f64, from element accessors: `q(c)`, `k(j, c)` (key `j`)
    /// and `v(j, t)`; with each element, how far `products` may put it from that value.
    ///
    /// In bf16, q, k, p and v are each rounded to 8 significant bits (relative error u = 2⁻⁸ at most), so a score
    /// moves by at most E = 2.01·u·scale·Σ_c |q_c·k_jc|, a probability by a factor within e^{±2E}, and an output
    /// element by (e^{2E} − 1 + 2.01·u)·Σ_j p_j·|v_jt|; the f32 sums add what the f32 tolerance allows.
    pub(super) fn f64_attention_row(
        (n, d, dv, scale): (usize, usize, usize, f32),
        products: Products,
        q: impl Fn(usize) -> f32,
        k: impl Fn(usize, usize) -> f32,
        v: impl Fn(usize, usize) -> f64,
    ) -> Vec<(f64, f64)> {
        let (q, k) = (&q, &k);
        let terms = |j: usize| (0..d).map(move |c| f64::from(q(c)) * f64::from(k(j, c)));
        let s: Vec<f64> = (0..n)
            .map(|j| terms(j).sum::<f64>() * f64::from(scale))
            .collect();
        let top = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = s.iter().map(|x| (x - top).exp()).sum();
        let p = |j: usize| (s[j] - top).exp() / z;
        let u = 2f64.powi(-8);
        let e = (0..n)
            .map(|j| 2.01 * u * f64::from(scale) * terms(j).map(f64::abs).sum::<f64>())
            .fold(0.0, f64::max);
        (0..dv)
            .map(|t| {
                let want: f64 = (0..n).map(|j| p(j) * v(j, t)).sum();
                let size: f64 = (0..n).map(|j| p(j) * v(j, t).abs()).sum();
                let rounding = match products {
                    Products::F32 => 0.0,
                    Products::Bf16(_) => ((2.0 * e).exp() - 1.0 + 2.01 * u) * size,
                };
                (want, rounding + 1e-5 * (1.0 + want.abs()))
            })
            .collect()
    }

    /// f32, and bf16 on every bf16 kernel this CPU runs (the portable one everywhere).
    fn every_products() -> Vec<Products> {
        let bf16 = Bf16Kernel::supported().into_iter().map(Products::Bf16);
        std::iter::once(Products::F32).chain(bf16).collect()
    }

    /// Against an f64 attention, with K given transposed through its strides, a broadcast V batch, enough keys
    /// that a batch takes several row blocks, and blocks of one to four query rows (a decoding step's), which take
    /// the direct path with V's rows contiguous and the GEMMs with V given transposed.
    #[test]
    fn matches_f64_attention() {
        let cases = [
            (3, 5, 7, 4, 6),
            (2, 300, 200, 16, 8),
            (1, 1, 1, 1, 1),
            (9, 1, 129, 64, 64),
            (4, 3, 37, 13, 5),
            (2, 4, 20, 8, 3),
            (2, 2, 50, 19, 17),
            // Several blocks of query rows per head.
            (2, 300, 70, 8, 4),
        ];
        let variants = cases.into_iter().flat_map(|case| {
            [
                (false, false, false),
                (true, false, false),
                (false, true, false),
                (false, false, true),
            ]
            .map(|(v, q, o)| (case, v, q, o))
        });
        for (((heads, m, n, d, dv), v_transposed, computed, placed), products) in
            variants.flat_map(|variant| every_products().into_iter().map(move |p| (variant, p)))
        {
            // Contiguous `[heads, m, dv]`, or placed as `[m, heads, dv]` (heads written into their columns).
            let (out_batch, out_rs) = if placed {
                ([dv], heads * dv)
            } else {
                ([m * dv], dv)
            };
            let qv = Tensor::randn(&[heads * m * d], 1).to_f32_vec();
            // K stored as [heads, n, d]: Kᵀ's (row = c, col = j) is at j·d + c.
            let kv = Tensor::randn(&[heads * n * d], 2).to_f32_vec();
            let vv = Tensor::randn(&[n * dv], 3).to_f32_vec();
            let spec = AttentionSpec {
                out: Placement {
                    batch: &out_batch,
                    rs: out_rs,
                },
                batch: &[heads],
                q_batch: &[m * d],
                k_batch: &[n * d],
                v_batch: &[0],
                m,
                n,
                d,
                dv,
                q: Operand {
                    offset: 0,
                    rs: d,
                    cs: 1,
                },
                k: Operand {
                    offset: 0,
                    rs: 1,
                    cs: d,
                },
                v: if v_transposed {
                    Operand {
                        offset: 0,
                        rs: 1,
                        cs: n,
                    }
                } else {
                    Operand {
                        offset: 0,
                        rs: dv,
                        cs: 1,
                    }
                },
                products,
            };
            let v_at = |j: usize, t: usize| {
                f64::from(if v_transposed {
                    vv[t * n + j]
                } else {
                    vv[j * dv + t]
                })
            };
            let scale = 0.5f32;
            let mut out = vec![f32::NAN; heads * m * dv];
            attend(&spec, (&qv, &qv, computed), (&kv, &vv), &mut out, scale);
            for h in 0..heads {
                for i in 0..m {
                    let want = f64_attention_row(
                        (n, d, dv, scale),
                        products,
                        |c| qv[h * m * d + i * d + c],
                        |j, c| kv[h * n * d + j * d + c],
                        v_at,
                    );
                    for (t, (want, tolerance)) in want.into_iter().enumerate() {
                        let got = f64::from(out[h * out_batch[0] + i * out_rs + t]);
                        assert!(
                            (got - want).abs() <= tolerance,
                            "{heads}x{m}x{n}x{d}x{dv} (V transposed: {v_transposed}, Q computed: {computed}, placed: {placed}, {products:?}) at ({h}, {i}, {t}): \
                             {got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    /// `out` ← `spec`'s attention with a scaled softmax, Q read from `q_mem` or, when `computed`, written a block
    /// of rows at a time by a task from `q_rows` (by head and row), as a kernel computing Q does.
    fn attend(
        spec: &AttentionSpec<'_>,
        (q_rows, q_mem, computed): (&[f32], &[f32], bool),
        (k, v): (&[f32], &[f32]),
        out: &mut [f32],
        scale: f32,
    ) {
        let d = spec.d;
        let rows_of_q = FnTask(|first: usize, rows: &mut [f32]| {
            rows.copy_from_slice(&q_rows[first * d..first * d + rows.len()])
        });
        let query = if computed {
            Query::Computed(&rows_of_q)
        } else {
            Query::Memory(q_mem)
        };
        let n = spec.n;
        attention(spec, query, k, v, out, &ScaledSoftmax { n, scale });
    }

    /// Grouped-query attention as a decoding step has it: `[kv_heads, group]` heads, K and V broadcast over the
    /// group, against an f64 attention. One query row per head takes the grouped path (a group of 3 on the direct
    /// path, of 8 through the GEMMs); two rows per head do not, and must agree too. On four threads, the long caches
    /// (1100 and 700 keys) are split between threads (`split.rs`: 4 parts of 275 keys, 2 of 350).
    #[test]
    fn grouped_heads_match_f64_attention() {
        let four = rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .build()
            .expect("a pool");
        for (((kv_heads, group, m, n, d, dv), computed, placed), products) in [
            (2, 3, 1, 129, 64, 64),
            (3, 8, 1, 40, 16, 8),
            (2, 3, 2, 33, 8, 8),
            (1, 4, 1, 1, 4, 4),
            (3, 3, 1, 1100, 64, 64),
            (1, 4, 1, 700, 20, 13),
        ]
        .into_iter()
        .flat_map(|case| [(false, false), (true, false), (false, true)].map(|(q, o)| (case, q, o)))
        .flat_map(|variant| every_products().into_iter().map(move |p| (variant, p)))
        {
            let heads = kv_heads * group;
            // Contiguous `[kv_heads, group, m, dv]`, or placed as `[m, heads, dv]`.
            let (out_batch, out_rs) = if placed {
                ([group * dv, dv], heads * dv)
            } else {
                ([group * m * dv, m * dv], dv)
            };
            // Q by head and row (`qv`, as a computed Q's rows come), and in memory as a projection lays it out,
            // `[m, heads, d]`, so a head's rows are `heads · d` apart and its neighbour's `d`.
            let qv = Tensor::randn(&[heads * m * d], 4).to_f32_vec();
            let mut q_mem = vec![0.0; heads * m * d];
            for (h, i) in (0..heads).flat_map(|h| (0..m).map(move |i| (h, i))) {
                q_mem[(i * heads + h) * d..][..d].copy_from_slice(&qv[(h * m + i) * d..][..d]);
            }
            let kv = Tensor::randn(&[kv_heads * n * d], 5).to_f32_vec();
            let vv = Tensor::randn(&[kv_heads * n * dv], 6).to_f32_vec();
            let spec = AttentionSpec {
                out: Placement {
                    batch: &out_batch,
                    rs: out_rs,
                },
                batch: &[kv_heads, group],
                q_batch: &[group * d, d],
                k_batch: &[n * d, 0],
                v_batch: &[n * dv, 0],
                m,
                n,
                d,
                dv,
                q: Operand {
                    offset: 0,
                    rs: heads * d,
                    cs: 1,
                },
                k: Operand {
                    offset: 0,
                    rs: 1,
                    cs: d,
                },
                v: Operand {
                    offset: 0,
                    rs: dv,
                    cs: 1,
                },
                products,
            };
            let mut out = vec![f32::NAN; heads * m * dv];
            let scale = 0.25f32;
            four.install(|| attend(&spec, (&qv, &q_mem, computed), (&kv, &vv), &mut out, scale));
            for h in 0..heads {
                let kvh = h / group;
                for i in 0..m {
                    let want = f64_attention_row(
                        (n, d, dv, scale),
                        products,
                        |c| qv[(h * m + i) * d + c],
                        |j, c| kv[(kvh * n + j) * d + c],
                        |j, t| f64::from(vv[(kvh * n + j) * dv + t]),
                    );
                    for (t, (want, tolerance)) in want.into_iter().enumerate() {
                        let at = kvh * out_batch[0] + (h % group) * out_batch[1] + i * out_rs + t;
                        let got = f64::from(out[at]);
                        assert!(
                            (got - want).abs() <= tolerance,
                            "{kv_heads}x{group}x{m}x{n}x{d}x{dv} (Q computed: {computed}, placed: {placed}, \
                             {products:?}) at ({h}, {i}, {t}): {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
