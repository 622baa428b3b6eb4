//! `gemm_bench --attention`: an encoder layer's attention ([`encoder_report`]), then one decoding step's attention
//! (one query row per head) over a KV cache, grouped-query heads reading their key-value head through a broadcast,
//! as a decoder's attention kernel calls it. Single thread (`RAYON_NUM_THREADS=1` keeps the heads on it); µs per
//! call, and for the decoding steps the keys and values read per call over that time, GB/s.

use fuse_runtime::__private::math::Arith;
use fuse_runtime::__private::rows::{softmax_rows, softmax_rows_on, SoftmaxPath};
use fuse_runtime::__private::{
    attention, AttentionSpec, Operand, Placement, Products, Query, RowTask,
};
use fuse_runtime::cpu::attention::SCRATCH_ELEMENTS;
use fuse_runtime::cpu::par::SimdTask;
use fuse_runtime::Tensor;

use super::best_seconds;

/// (what, kv heads, heads per kv head, head dim, cached positions).
const SHAPES: [(&str, usize, usize, usize, usize); 4] = [
    ("W5 (SmolLM-135M) layer, past 128", 3, 3, 64, 129),
    ("Llama-3-8B layer, past 512", 8, 4, 128, 513),
    ("Llama-3-8B layer, past 2048", 8, 4, 128, 2049),
    ("Llama-3-8B layer, past 8192", 8, 4, 128, 8193),
];

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

pub fn report() {
    println!("decode attention, one query row per head, K and V shared by each group of heads (one thread):");
    for (what, kv_heads, group, d, n) in SHAPES {
        let heads = kv_heads * group;
        let q = Tensor::randn(&[heads * d], 1).to_f32_vec();
        // The cache as a decoder holds it, `[kv_heads, positions, d]`; the products read K transposed.
        let k = Tensor::randn(&[kv_heads * n * d], 2).to_f32_vec();
        let v = Tensor::randn(&[kv_heads * n * d], 3).to_f32_vec();
        let mut out = vec![0f32; heads * d];
        let spec = AttentionSpec {
            batch: &[kv_heads, group],
            q_batch: &[group * d, d],
            k_batch: &[n * d, 0],
            v_batch: &[n * d, 0],
            m: 1,
            n,
            d,
            dv: d,
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
                rs: d,
                cs: 1,
            },
            out: Placement {
                batch: &[group * d, d],
                rs: heads * d,
            },
            products: Products::F32,
        };
        let task = Softmax { n };
        let seconds = best_seconds(|| {
            attention(&spec, Query::Memory(&q), &k, &v, &mut out, &task);
            out[0]
        });
        let bytes = 2.0 * (kv_heads * n * d * 4) as f64;
        println!(
            "  {what:<40} {:8.1} µs  {:6.1} GB/s of K and V",
            seconds * 1e6,
            bytes / seconds / 1e9
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
