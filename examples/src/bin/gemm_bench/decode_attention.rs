//! `gemm_bench --attention`: one decoding step's attention (one query row per head) over a KV cache, grouped-query
//! heads reading their key-value head through a broadcast, as a decoder's attention kernel calls it. Single
//! thread (`RAYON_NUM_THREADS=1` keeps the heads on it); µs per call, and the keys and values read per call over
//! that time, GB/s.

use fuse_runtime::__private::rows::softmax_in_place;
use fuse_runtime::__private::{attention, AttentionSpec, Operand, Placement, Query, RowTask};
use fuse_runtime::Tensor;

/// (what, kv heads, heads per kv head, head dim, cached positions).
const SHAPES: [(&str, usize, usize, usize, usize); 4] = [
    ("W5 (SmolLM-135M) layer, past 128", 3, 3, 64, 129),
    ("Llama-3-8B layer, past 512", 8, 4, 128, 513),
    ("Llama-3-8B layer, past 2048", 8, 4, 128, 2049),
    ("Llama-3-8B layer, past 8192", 8, 4, 128, 8193),
];

struct Softmax {
    n: usize,
}

impl RowTask for Softmax {
    fn run(&self, _: usize, rows: &mut [f32]) {
        rows.chunks_exact_mut(self.n).for_each(softmax_in_place);
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
        };
        let task = Softmax { n };
        let seconds = super::best_seconds(|| {
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
