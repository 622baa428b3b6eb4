//! `gemm_bench --attention`: an encoder layer's attention on one thread ([`encoder_report`]), µs per call; then a
//! decoding step's attention (one query row per head) over a KV cache, grouped-query heads reading their key-value
//! head through a broadcast, as a decoder's attention kernel calls it, from a cache and from memory ([`report`]):
//! µs per layer and GB/s of the keys and values read.

use fuse_runtime::__private::math::Arith;
use fuse_runtime::__private::rows::{softmax_rows, softmax_rows_on, SoftmaxPath};
use fuse_runtime::__private::{
    attention, AttentionSpec, Operand, Placement, Products, Query, RowTask,
};
use fuse_runtime::cpu::attention::SCRATCH_ELEMENTS;
use fuse_runtime::cpu::par::SimdTask;
use fuse_runtime::Tensor;

use std::time::Instant;

use rayon::ThreadPool;

use super::decode::{one_and_all_threads, COLD_BYTES};
use super::{best_seconds, ROUNDS};

/// A scores task that leaves the scores as they are: the attention kernel's products alone.
struct Unchanged;

impl RowTask for Unchanged {
    #[inline(always)]
    fn run<A: Arith>(&self, _: usize, _: &mut [f32]) {}
}

struct Softmax {
    n: usize,
}

impl RowTask for Softmax {
    // Inlined into the vector-width dispatch, as the generated tasks are; the softmax of the block's rows, as the
    // generated task calls it after the elementwise chain on its rows.
    #[inline(always)]
    fn run<A: Arith>(&self, _: usize, rows: &mut [f32]) {
        softmax_rows(rows, self.n);
    }
}

/// A decoding step's attention for `seqs` sequences over one layer's cache, `[seqs, kv_heads, n, d]` each of K and
/// V, as a decoder's kernel calls it: one query row per head, each group of heads reading its key-value head.
struct Step {
    kv_heads: usize,
    group: usize,
    d: usize,
    n: usize,
    seqs: usize,
}

impl Step {
    /// Floats of K (and of V) per layer.
    fn cache_len(&self) -> usize {
        self.seqs * self.kv_heads * self.n * self.d
    }

    /// `out` ← the step's attention over `k` and `v` (one layer's cache each), queries `q`.
    fn run(&self, q: &[f32], k: &[f32], v: &[f32], out: &mut [f32]) {
        let &Step {
            kv_heads,
            group,
            d,
            n,
            seqs,
        } = self;
        let heads = kv_heads * group;
        let batch = [seqs, kv_heads, group];
        let q_batch = [heads * d, group * d, d];
        let kv_batch = [kv_heads * n * d, n * d, 0];
        let spec = AttentionSpec {
            batch: &batch,
            q_batch: &q_batch,
            k_batch: &kv_batch,
            v_batch: &kv_batch,
            m: 1,
            n,
            d,
            dv: d,
            q: Operand {
                offset: 0,
                rs: heads * d,
                cs: 1,
            },
            // The cache as a decoder holds it, `[kv_heads, positions, d]`; the products read K transposed.
            k: Operand {
                offset: 0,
                rs: 1,
                cs: d,
            },
            v: Operand {
                offset: 0,
                rs: d,
                cs: 1,
            },
            out: Placement {
                batch: &q_batch,
                rs: heads * d,
            },
            products: Products::F32,
        };
        attention(&spec, Query::Memory(q), k, v, out, &Softmax { n });
    }
}

/// (what, kv heads, heads per kv head, head dim, cached positions, sequences).
const SHAPES: [(&str, usize, usize, usize, usize, usize); 10] = [
    ("W5 (SmolLM-135M) layer, past 128", 3, 3, 64, 129, 1),
    ("W5 layer, past 1024", 3, 3, 64, 1025, 1),
    ("W5 layer, past 8192", 3, 3, 64, 8193, 1),
    // One block for all the pool's threads: a Llama-3-8B layer's share of one key-value head.
    ("one kv head of 4 heads, past 8192", 1, 4, 128, 8193, 1),
    ("W5 layer, past 128, batch 8", 3, 3, 64, 129, 8),
    ("W5 layer, past 1024, batch 8", 3, 3, 64, 1025, 8),
    // Every head its own keys: one query row a block.
    ("GPT-2 layer, past 1024", 12, 1, 64, 1025, 1),
    ("Llama-3-8B layer, past 512", 8, 4, 128, 513, 1),
    ("Llama-3-8B layer, past 2048", 8, 4, 128, 2049, 1),
    ("Llama-3-8B layer, past 8192", 8, 4, 128, 8193, 1),
];

/// Each shape's step: "hot" on one thread over one layer's cache again and again (it stays in L2 or L3, so the
/// kernel's own rate shows); "cold" over as many layers' caches as make [`COLD_BYTES`] (a step's 30 layers of cache
/// and its weights are beyond L3 too), read in turn, so each comes from memory as in a model's step, on one thread
/// and on the pool's threads (from inside the pool, as a model's call runs, so the heads are split between them).
/// µs per layer and GB/s of K and V read.
pub fn report() {
    let Some((one, all)) = one_and_all_threads() else {
        return;
    };
    let (one, all) = (&one, &all);
    let threads = all.current_num_threads();
    println!("decode attention, one query row per head, K and V shared by each group of heads, f32 cache:");
    println!(
        "{:<36} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "layer",
        "µs hot",
        "GB/s",
        "µs cold",
        "GB/s",
        format!("µs {threads} thr"),
        "GB/s"
    );
    for (what, kv_heads, group, d, n, seqs) in SHAPES {
        let step = Step {
            kv_heads,
            group,
            d,
            n,
            seqs,
        };
        let heads = seqs * kv_heads * group;
        let len = step.cache_len();
        let layers = COLD_BYTES.div_ceil(2 * 4 * len).max(2);
        let q = Tensor::randn(&[heads * d], 1).to_f32_vec();
        let caches: Vec<(Vec<f32>, Vec<f32>)> = (0..layers as u64)
            .map(|l| {
                let [k, v] = [2, 3].map(|s| Tensor::randn(&[len], 2 * l + s).to_f32_vec());
                (k, v)
            })
            .collect();
        let mut out = vec![0f32; heads * d];
        // Wall seconds per layer: `count` layers of `caches` in turn, on `pool`'s threads.
        let mut per_layer = |pool: &ThreadPool, caches: &[(Vec<f32>, Vec<f32>)], count: usize| {
            pool.install(|| {
                let start = Instant::now();
                for (k, v) in caches.iter().cycle().take(count) {
                    step.run(&q, k, v, &mut out);
                }
                start.elapsed().as_secs_f64() / count as f64
            })
        };
        let reps = (64 << 20) / (8 * len) + 1;
        let (mut hot, mut cold, mut cold_all) = (f64::MAX, f64::MAX, f64::MAX);
        for _ in 0..ROUNDS {
            hot = hot.min(per_layer(one, &caches[..1], reps));
            cold = cold.min(per_layer(one, &caches, layers));
            cold_all = cold_all.min(per_layer(all, &caches, layers));
        }
        std::hint::black_box(&out);
        let rate = |seconds: f64| (8 * len) as f64 / seconds / 1e9;
        println!(
            "{what:<36} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
            hot * 1e6,
            rate(hot),
            cold * 1e6,
            rate(cold),
            cold_all * 1e6,
            rate(cold_all)
        );
    }
}

/// An encoder layer's attention (W3, W4: batch 8, 12 heads, 128 positions, head dim 32; Q, K and V read from
/// `[batch, seq, heads·32]` projections, the output placed back in that layout), one thread: the whole kernel,
/// the kernel with a task that leaves the scores as they are (its two products, packing and placement), and that
/// again with every head reading the same Q, K and V (in cache, as `gemm_bench`'s product rows are).
pub fn encoder_report() {
    let (batch, heads, s, d) = (8, 12, 128, 32);
    let width = heads * d;
    let [q, k, v] = [1, 2, 3].map(|seed| Tensor::randn(&[batch * s * width], seed).to_f32_vec());
    let mut out = vec![0f32; batch * s * width];
    let strides = [s * width, d];
    let spec = AttentionSpec {
        batch: &[batch, heads],
        q_batch: &strides,
        k_batch: &strides,
        v_batch: &strides,
        m: s,
        n: s,
        d,
        dv: d,
        q: Operand {
            offset: 0,
            rs: width,
            cs: 1,
        },
        k: Operand {
            offset: 0,
            rs: 1,
            cs: width,
        },
        v: Operand {
            offset: 0,
            rs: width,
            cs: 1,
        },
        out: Placement {
            batch: &strides,
            rs: width,
        },
        products: Products::F32,
    };
    let in_cache = AttentionSpec {
        q_batch: &[0, 0],
        k_batch: &[0, 0],
        v_batch: &[0, 0],
        ..spec
    };
    let mut time = |spec: &AttentionSpec<'_>, task: &dyn SimdTask| {
        best_seconds(|| {
            attention(spec, Query::Memory(&q), &k, &v, &mut out, task);
            out[0]
        })
    };
    let flops = 4.0 * (batch * heads * s * s * d) as f64;
    // In bf16 where a model in int8 or bf16 would use it on this CPU.
    let bf16 = Products::for_precision(fuse_runtime::CpuPrecision::Bf16);
    for products in [Products::F32, bf16]
        .into_iter()
        .take(1 + usize::from(bf16 != Products::F32))
    {
        let (spec, in_cache) = (
            AttentionSpec { products, ..spec },
            AttentionSpec {
                products,
                ..in_cache
            },
        );
        let whole = time(&spec, &Softmax { n: s });
        let without_softmax = time(&spec, &Unchanged);
        let cached = time(&in_cache, &Unchanged);
        println!(
            "encoder attention, batch {batch} × {heads} heads × {s} positions, head dim {d}, products {} (one \
             thread): {:.0} µs ({:.1} GFLOP/s of its products); without the softmax {:.0} µs, and {:.0} µs with \
             every head's operands in cache",
            products.describe(),
            whole * 1e6,
            flops / whole / 1e9,
            without_softmax * 1e6,
            cached * 1e6
        );
    }
    // The softmax alone, as the attention kernel runs it on each block's scores (one 64 KB block, so in cache),
    // once per block of the layer, on each path this CPU runs.
    let blocks = batch * heads * s * s / SCRATCH_ELEMENTS;
    let mut scores = Tensor::randn(&[SCRATCH_ELEMENTS], 4).to_f32_vec();
    let paths: Vec<String> = SoftmaxPath::ALL
        .into_iter()
        .filter(|path| path.runs_here())
        .map(|path| {
            let seconds = best_seconds(|| {
                for _ in 0..blocks {
                    softmax_rows_on(path, &mut scores, s);
                }
                scores[0]
            });
            format!("{path:?} {:.0} µs", seconds * 1e6)
        })
        .collect();
    println!(
        "  its softmax alone, {blocks} blocks of {} scores in cache: {}",
        SCRATCH_ELEMENTS,
        paths.join(", ")
    );
}
