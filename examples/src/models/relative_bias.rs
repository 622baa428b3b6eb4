//! The relative position bias of T5 and MPNet (`examples/src/models/t5.rs`, `mpnet.rs`), as one library both use:
//! transformers makes it the same way in both (`T5Attention._relative_position_bucket` with `bidirectional=True`,
//! `MPNetEncoder.relative_position_bucket`).

use fuse_runtime::fused_model;

#[fused_model(library)]
pub mod relative_bias {
    /// Distances from here on share buckets (`relative_attention_max_distance`, 128 in both families' configs).
    pub const MAX_DISTANCE: f64 = 128.0;

    /// The `[1, HEADS, s, s]` bias of each query and key position, from a `[BUCKETS, HEADS]` table. Half the buckets
    /// are for keys up to the query, half for keys after it; in each half a distance below a quarter of `BUCKETS`
    /// is its own bucket, and a larger one n goes to `q + trunc(log(n / q) / log(MAX_DISTANCE / q) · q)`, at most
    /// the half's last (q = `BUCKETS / 4`). Each pair's row of the table is then picked by a one-hot of its bucket
    /// times the table, summed over the buckets (`embedding` takes ids from inputs and positions, not computed ones).
    /// Written as a product summed over the last axis, the one-hot is made inside that sum's row kernel and never
    /// stored; as a `matmul` it would be a `[s, s, BUCKETS]` operand in memory (19 MB at 384 positions and 32).
    pub struct RelativePositionBias<const BUCKETS: usize, const HEADS: usize> {
        #[rename("weight")]
        #[shape(BUCKETS, HEADS)]
        table: Tensor,
    }

    impl<const BUCKETS: usize, const HEADS: usize> RelativePositionBias<BUCKETS, HEADS> {
        /// The bucket of each (query, key) pair, `[s, s]`, as integer-valued floats.
        fn buckets(&self, s: usize) -> Tensor {
            let keys = arange(0, s).reshape([1, s]).to_f32();
            let queries = arange(0, s).reshape([s, 1]).to_f32();
            let relative = keys - queries;
            let half = (BUCKETS / 2) as f64;
            let exact = (BUCKETS / 4) as f64;
            let after = where_(relative.gt(0.0), half, 0.0);
            let n = relative.abs();
            let log_scale = (n / exact).log() / (MAX_DISTANCE / exact).ln() * (half - exact);
            let far = (log_scale.trunc() + exact).min(half - 1.0);
            after + where_(n.lt(exact), n, far)
        }

        pub fn forward(&self, s: usize) -> Tensor {
            let buckets = self.buckets(s).reshape([s, s, 1, 1]);
            let index = arange(0, BUCKETS).to_f32().reshape([1, 1, 1, BUCKETS]);
            let table = self.table.t().reshape([1, 1, HEADS, BUCKETS]);
            (buckets.eq(&index).to_f32() * table)
                .sum(-1, false)
                .permute([2, 0, 1])
                .reshape([1, HEADS, s, s])
        }
    }
}
