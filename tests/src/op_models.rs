//! The per-op models: one small model per op family, shared by the CPU parity tests (`tests/ops.rs`, against
//! the f64 reference) and the GPU parity tests (`tests/gpu.rs`, GPU against CPU).

use fuse_runtime::{fused_model, Tensor};

#[fused_model]
pub mod ops {
    pub const D: usize = 24;

    pub struct Elementwise {}
    impl Elementwise {
        pub fn forward(
            &self,
            #[shape(batch, D)] x: Tensor,
            #[shape(batch, D)] y: Tensor,
        ) -> (Tensor, Tensor, Tensor) {
            let arith = (x + y) * 0.5 - x / (y.abs() + 1.0) + x.max(&y) - x.min(&y);
            let pos = x.abs() + 0.5;
            let trans = pos.log()
                + pos.sqrt()
                + pos.rsqrt()
                + pos.pow(&y)
                + (-x).exp()
                + x.tanh()
                + x.sigmoid()
                + (x * 3.0).erf();
            let acts = x.relu() + x.gelu() + x.gelu_tanh() + x.silu() + x.neg().abs() + x.square()
                - x.clamp(-0.5, 0.75)
                + y.clamp(&x, 0.25);
            (arith, trans, acts)
        }
    }

    /// Sine and cosine, near 0 and at large arguments (up to ~10⁶, where the reduction is Payne–Hanek). The
    /// scales are powers of two, so the angle is exact in f32 and the f64 reference sees the same one.
    pub struct Trig {}
    impl Trig {
        pub fn forward(&self, #[shape(batch, D)] x: Tensor) -> (Tensor, Tensor, Tensor) {
            (x.sin() + x.cos(), (x * 1024.0).cos(), (x * 1048576.0).sin())
        }
    }

    pub struct Broadcasts {
        #[shape(D)]
        row: Tensor,
    }
    impl Broadcasts {
        pub fn forward(&self, #[shape(batch, 1, D)] x: Tensor, #[shape(3, 1)] y: Tensor) -> Tensor {
            x * &self.row + y - 2.0
        }
    }

    pub struct Masks {}
    impl Masks {
        pub fn forward(
            &self,
            #[shape(batch, D)] x: Tensor,
            #[shape(batch, D)] y: Tensor,
        ) -> (Tensor, Tensor, Tensor) {
            let a = where_(x.gt(&y), x, y) + where_(x.lt(0.0), 1.0, 0.0);
            let b = where_(x.ge(&y), 2.0, x) + where_(x.le(&y), y, 0.5);
            let c = where_(x.eq(&x), x, 0.0) + where_(x.ne(&y), 1.0, -1.0);
            (a, b, c)
        }
    }

    /// Rounding to integers, on values whose f32 rounding is exact (quarters and halves, made from inputs the tests
    /// keep exact in bf16 and f16 too) so that the f64 reference and every storage precision round the same numbers:
    /// `round`'s ties go to even, `trunc` toward zero, and NaN and ±∞ pass through. The last output is the use they
    /// are for: integer buckets of relative positions (0.75·(j − i) rounded toward zero, or up in magnitude and
    /// offset by 4 when negative, at most 3) compared with each bucket's index, a one-hot matrix a product turns into
    /// a per-bucket bias, as T5's and MPNet's relative attention biases do.
    pub struct Rounding {
        #[shape(8, D)]
        bias: Tensor,
    }
    impl Rounding {
        pub fn forward(
            &self,
            #[shape(batch, D)] x: Tensor,
        ) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) {
            let q = x * 4.0;
            let halves = q.floor() * 0.5;
            let s = x.dim(0);
            let distance = (arange(0, s).reshape([1, s]).to_f32()
                - arange(0, s).reshape([s, 1]).to_f32())
                * 0.75;
            let bucket = where_(
                distance.lt(0.0),
                distance.abs().ceil().min(3.0) + 4.0,
                distance.trunc().min(3.0),
            );
            let one_hot = bucket
                .reshape([s, s, 1])
                .eq(&arange(0, 8).to_f32().reshape([1, 1, 8]))
                .to_f32();
            (
                q.floor(),
                q.ceil(),
                halves.round(),
                q.trunc(),
                halves.round() - halves.floor() + (q * 0.5).trunc(),
                one_hot.matmul(&self.bias),
            )
        }
    }

    /// Running sums: along the last axis with a prologue and an epilogue in its kernel; along `seq` (an axis
    /// before the last, over a dynamic length); over each sequence's `seq · D` values at once (a dynamic row that
    /// outgrows a GPU warp's register cache from 22 positions on); along a parameter's static rows of 1200 (a GPU
    /// block per row); and RoBERTa's position ids, the running count of each sequence's tokens that are not padding
    /// (id 1), zero at the padding, offset by the padding id.
    pub struct Cumsum {
        #[shape(3, 1200)]
        long: Tensor,
    }
    impl Cumsum {
        pub fn forward(
            &self,
            #[shape(batch, seq, D)] x: Tensor,
            #[shape(batch, seq)] ids: Tensor<i64>,
        ) -> (Tensor, Tensor, Tensor, Tensor, Tensor) {
            let b = x.dim(0);
            let s = x.dim(1);
            let tokens = ids.to_f32().ne(1.0).to_f32();
            (
                (x * 2.0 - 1.0).cumsum(2) * 0.5,
                x.cumsum(1),
                x.reshape([b, s * D]).cumsum(1),
                self.long.cumsum(1),
                tokens.cumsum(1) * tokens + 1.0,
            )
        }
    }

    /// Ids the model computes, looked up in a table of 40 rows: RoBERTa's position ids (from 1 to `seq + 1`), and
    /// positions from an `arange` shifted by 2 (from 2 to `seq + 1`). Both fit the table up to 38 positions, which
    /// the runtime checks when it binds `seq`.
    pub struct ComputedIds {
        #[shape(40, D)]
        positions: Tensor,
    }
    impl ComputedIds {
        pub fn forward(&self, #[shape(batch, seq)] ids: Tensor<i64>) -> (Tensor, Tensor) {
            let tokens = ids.to_f32().ne(1.0).to_f32();
            let position_ids = (tokens.cumsum(1) * tokens + 1.0).to_i64();
            let shifted = (arange(0, ids.dim(1)).to_f32() + 2.0).to_i64();
            (
                embedding(&self.positions, &position_ids),
                embedding(&self.positions, &shifted),
            )
        }
    }

    /// Logits' length for [`FirstExtremes`]: past the whole numbers bf16 (256) and f16 (2048) hold exactly.
    pub const VOCAB: usize = 2100;

    /// `argmax` and `argmin`, PyTorch's (the first position of the largest or smallest value, or of the first NaN):
    /// along the last axis of `VOCAB` values, as greedy decoding picks a token from its logits; along `seq`, an axis
    /// before the last, keeping it; the picked positions read as ids (the picked tokens' embedding rows); a mask's
    /// first true (CLIP's end-of-text token, `ids.eq(end)`'s first); and both picks side by side (a concat's copy).
    pub struct FirstExtremes {
        #[shape(VOCAB, D)]
        embed: Tensor,
    }
    impl FirstExtremes {
        pub fn forward(
            &self,
            #[shape(batch, seq, VOCAB)] x: Tensor,
        ) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) {
            let (b, s) = (x.dim(0), x.dim(1));
            let token = x.argmax(2, false);
            let smallest = x.argmin(-1, true);
            (
                token,
                smallest,
                x.argmax(1, true),
                embedding(&self.embed, &token.to_i64()),
                x.gt(2.0).argmax(2, false),
                concat([token.reshape([b, s, 1]), smallest], 2),
            )
        }
    }

    /// RoBERTa's position ids clamped to a table of 8 rows: the clamp bounds them whatever `seq`, so any length
    /// runs, positions past the table reading its last row.
    pub struct ClampedIds {
        #[shape(8, D)]
        positions: Tensor,
    }
    impl ClampedIds {
        pub fn forward(&self, #[shape(batch, seq)] ids: Tensor<i64>) -> Tensor {
            let tokens = ids.to_f32().ne(1.0).to_f32();
            let position_ids = (tokens.cumsum(1) * tokens + 1.0).clamp(0.0, 7.0).to_i64();
            embedding(&self.positions, &position_ids)
        }
    }

    /// RoBERTa's 514 positions read at the ids it computes: whole numbers past what bf16 holds exactly (256).
    pub struct LongPositions {
        #[shape(514, D)]
        positions: Tensor,
    }
    impl LongPositions {
        pub fn forward(&self, #[shape(batch, seq)] ids: Tensor<i64>) -> Tensor {
            let tokens = ids.to_f32().ne(1.0).to_f32();
            embedding(&self.positions, &(tokens.cumsum(1) * tokens + 1.0).to_i64())
        }
    }

    /// Each op named as PyTorch names it, for a test that states the expected values itself (the reference
    /// interprets the graph the front end made, so it cannot tell a method lowered to the wrong ops).
    pub struct Named {}
    impl Named {
        pub fn forward(
            &self,
            #[shape(batch, D)] x: Tensor,
            #[shape(batch, D)] lo: Tensor,
            #[shape(batch, D)] hi: Tensor,
        ) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) {
            (
                x.floor(),
                x.ceil(),
                x.round(),
                x.trunc(),
                x.clamp(&lo, &hi),
                hi.min(1, true),
                lo.min(-1, false),
            )
        }
    }

    /// Cheap values broadcast into their readers, which recompute them per element rather than read them from
    /// a kernel of their own: in an elementwise kernel, as a softmax's row input, in a matmul's epilogue and in
    /// a written-out norm; and a transcendental one, which keeps its own kernel.
    pub struct RecomputedBroadcasts {
        #[shape(D, D)]
        w: Tensor,
    }
    impl RecomputedBroadcasts {
        pub fn forward(
            &self,
            #[shape(batch, seq, D)] x: Tensor,
            #[shape(seq, D)] m: Tensor,
        ) -> (Tensor, Tensor, Tensor, Tensor, Tensor) {
            let gated = x * where_(m.gt(0.0), m * 2.0, m.neg());
            let shifted = (x + (m - 0.5).relu()).softmax(-1);
            let projected = x.matmul(&self.w) + m.abs() * 0.5;
            let centred = x - m.min(1.0);
            let normed = &centred * (centred.square().mean(-1, true) + 1e-5).rsqrt();
            let kept = x + m.exp();
            (gated, shifted, projected, normed, kept)
        }
    }

    pub struct Reductions {}
    impl Reductions {
        pub fn forward(
            &self,
            #[shape(batch, seq, D)] x: Tensor,
        ) -> (
            Tensor,
            Tensor,
            Tensor,
            Tensor,
            Tensor,
            Tensor,
            Tensor,
            Tensor,
        ) {
            (
                x.sum(-1, true) * 2.0,
                x.mean(2, false),
                x.max(-1, false),
                x.sum(1, false),
                x.mean(0, true),
                x.max(1, true),
                x.min(-1, true) + 1.0,
                (x * 2.0).min(1, false),
            )
        }
    }

    /// Softmaxes and log-softmaxes along the last axis and a middle one; the first log-softmax's logits are wide
    /// enough (±100s) that `softmax().log()` would give `-inf` for most of them.
    pub struct Softmaxes {}
    impl Softmaxes {
        pub fn forward(
            &self,
            #[shape(batch, seq, D)] x: Tensor,
        ) -> (Tensor, Tensor, Tensor, Tensor) {
            (
                (x * 3.0).softmax(-1),
                x.softmax(1),
                (x * 200.0).log_softmax(-1),
                x.log_softmax(1),
            )
        }
    }

    pub struct Norms {
        #[shape(D)]
        gamma: Tensor,
        #[shape(D)]
        beta: Tensor,
    }
    impl Norms {
        pub fn forward(
            &self,
            #[shape(batch, D)] x: Tensor,
            #[shape(batch, D)] y: Tensor,
        ) -> (Tensor, Tensor, Tensor) {
            let ln = (x + y).layer_norm(&self.gamma, &self.beta, 1e-5) * 2.0 + y;
            let rms = x.rms_norm(&self.gamma, 1e-6).relu();
            // One tensor as both gain and bias (the CPU writer once bound it twice: a build error).
            let same = y.layer_norm(&self.gamma, &self.gamma, 1e-5);
            (ln, rms, same)
        }
    }

    /// Norms written out with reductions and broadcasts, as users write their own variants: each output must be
    /// one kernel, like the built-ins of [`BuiltinNorms`].
    pub struct WrittenNorms {
        #[shape(D)]
        gamma: Tensor,
        #[shape(D)]
        beta: Tensor,
    }
    impl WrittenNorms {
        pub fn forward(
            &self,
            #[shape(batch, seq, D)] x: Tensor,
            #[shape(batch, seq, D)] y: Tensor,
        ) -> (Tensor, Tensor, Tensor, Tensor) {
            let rms = x * (x.square().mean(-1, true) + 1e-6).rsqrt() * &self.gamma;
            let mean = x.mean(-1, true);
            let centred = x - mean;
            let var = centred.square().mean(-1, true);
            let ln = centred * (var + 1e-5).rsqrt() * &self.gamma + &self.beta;
            let shifted = (x - x.max(-1, true)).exp();
            let softmax = shifted / shifted.sum(-1, true);
            // Gemma's RMSNorm: a residual sum as the row, `(1 + w)` as the weight.
            let h = x + y;
            let gemma = h * (h.square().mean(-1, true) + 1e-6).rsqrt() * (&self.gamma + 1.0);
            (rms, ln, softmax, gemma)
        }
    }

    /// The built-in forms of [`WrittenNorms`]' outputs (the Gemma variant with its weight as is).
    pub struct BuiltinNorms {
        #[shape(D)]
        gamma: Tensor,
        #[shape(D)]
        beta: Tensor,
    }
    impl BuiltinNorms {
        pub fn forward(
            &self,
            #[shape(batch, seq, D)] x: Tensor,
            #[shape(batch, seq, D)] y: Tensor,
        ) -> (Tensor, Tensor, Tensor, Tensor) {
            let rms = x.rms_norm(&self.gamma, 1e-6);
            let ln = x.layer_norm(&self.gamma, &self.beta, 1e-5);
            let softmax = x.softmax(-1);
            let gemma = (x + y).rms_norm(&self.gamma, 1e-6);
            (rms, ln, softmax, gemma)
        }
    }

    pub struct MatMuls {
        #[shape(16, D)]
        weight: Tensor,
        #[shape(16)]
        bias: Tensor,
    }
    impl MatMuls {
        pub fn forward(
            &self,
            #[shape(batch, seq, D)] x: Tensor,
            #[shape(batch, D, seq)] y: Tensor,
        ) -> (Tensor, Tensor, Tensor, Tensor) {
            let linear = (x.matmul(&self.weight.t()) + &self.bias).gelu() + 1.0;
            let batched = x.matmul(&y);
            let transposed = y.t().matmul(&x.t()).transpose(1, 2);
            let plain = self.weight.matmul(&self.weight.t());
            (linear, batched, transposed, plain)
        }
    }

    /// A product of few rows and many columns, whose columns the runtime splits between threads, with an
    /// epilogue reading a per-column bias, a transposed (strided) operand and a per-row value.
    pub struct WideEpilogue {
        #[shape(512, 64)]
        weight: Tensor,
        #[shape(512)]
        bias: Tensor,
    }
    impl WideEpilogue {
        pub fn forward(
            &self,
            #[shape(rows, 64)] x: Tensor,
            #[shape(512, rows)] z: Tensor,
            #[shape(rows, 1)] r: Tensor,
        ) -> Tensor {
            (x.matmul(&self.weight.t()) + &self.bias).gelu() * r + z.t()
        }
    }

    /// Attention in the shapes the planner fuses into one kernel, and one it must not fuse (the probabilities
    /// are also an output).
    pub struct Attentions {
        #[shape(16, D)]
        keys: Tensor,
        #[shape(16, 8)]
        values: Tensor,
    }
    impl Attentions {
        pub fn forward(
            &self,
            #[shape(batch, seq, D)] q: Tensor,
            #[shape(batch, keys, D)] k: Tensor,
            #[shape(batch, keys, 8)] v: Tensor,
            #[shape(batch, keys)] mask: Tensor,
        ) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) {
            let (b, s, t) = (q.dim(0), q.dim(1), k.dim(1));
            // Four heads of six, K and V through permuted views, a scale and an additive padding mask.
            let qh = q.reshape([b, s, 4, 6]).permute([0, 2, 1, 3]);
            let kh = k.reshape([b, t, 4, 6]).permute([0, 2, 1, 3]);
            let bias = (1.0 - mask.reshape([b, 1, 1, t])) * -10000.0;
            let masked = (qh.matmul(&kh.t()) * 0.4 + bias).softmax(-1).matmul(&kh);
            // No chain between the scores and the softmax.
            let plain = q.matmul(&k.t()).softmax(-1).matmul(&v);
            // Keys and values shared by every batch (batch stride 0), a nonlinear chain.
            let shared = q
                .matmul(&self.keys.t())
                .tanh()
                .softmax(-1)
                .matmul(&self.values);
            // The probabilities are an output too: they must reach memory, so this one is not fused.
            let probs = (q.matmul(&k.t()) * 0.2).softmax(-1);
            let kept = probs.matmul(&v);
            // Self-attention with one tensor as Q, K and V: each role reads it from its own base (the GPU writer
            // once read every query row from V's, the batch's first row).
            let own = (qh.matmul(&qh.t()) * 0.3).softmax(-1).matmul(&qh);
            (masked, plain, shared, kept, probs, own)
        }
    }

    /// NaN and ±∞ in the inputs, passed on as PyTorch passes them: `relu`, `max`/`min` and the max reduction
    /// keep a NaN (`f32::max` and `fmaxf` return the other operand, which hid it), alone, in a row region beside
    /// the reduction, and in a product's epilogue; a softmax over a NaN or +∞ is NaN, and over -∞ alone zeros,
    /// alone and in attention (a mask of -∞ over a whole row, and a NaN in it).
    pub struct NonFinite {
        #[shape(D, D)]
        w: Tensor,
        #[shape(D)]
        b: Tensor,
    }
    impl NonFinite {
        pub fn forward(
            &self,
            #[shape(batch, D)] x: Tensor,
            #[shape(batch, D)] y: Tensor,
            #[shape(batch, seq, 8)] q: Tensor,
            #[shape(batch, seq, seq)] mask: Tensor,
        ) -> (
            Tensor,
            Tensor,
            Tensor,
            Tensor,
            Tensor,
            Tensor,
            Tensor,
            Tensor,
        ) {
            let attention = (q.matmul(&q.t()) * 0.35 + mask).softmax(-1).matmul(&q);
            (
                attention,
                x.relu(),
                x.max(&y),
                x.min(&y),
                x.max(-1, false),
                x - x.max(-1, true),
                (x.matmul(&self.w) + &self.b).relu(),
                x.softmax(-1),
            )
        }
    }

    /// Attention whose queries broadcast to the scores, which the planner leaves as two products and a softmax:
    /// one head of queries against four heads of keys, and queries shared by every batch. (Fused, the kernels took
    /// Q's batch dims as the scores' and read past it.)
    pub struct BroadcastQueries {
        #[shape(4, 2, 6)]
        shared: Tensor,
    }
    impl BroadcastQueries {
        pub fn forward(
            &self,
            #[shape(batch, 1, seq, 6)] q: Tensor,
            #[shape(batch, 4, keys, 6)] k: Tensor,
        ) -> (Tensor, Tensor) {
            let one_head = (q.matmul(&k.t()) * 0.4).softmax(-1).matmul(&k);
            let shared = (self.shared.matmul(&k.t()) * 0.4).softmax(-1).matmul(&k);
            (one_head, shared)
        }
    }

    /// Attentions whose Q is computed from the input rather than read: rotated halves (RoPE's rotate-half, a
    /// concat), a plain elementwise chain, rotated heads shared by two query heads each (grouped-query), and two
    /// the planner must leave reading Q from memory (Q is also an output; Q is a permuted view of what is
    /// computed, so its rows are not the computed rows). The first and the third merge their heads back
    /// (`[b, s, heads · d]`), which their kernels write in place.
    pub struct ComputedQueries {}
    impl ComputedQueries {
        pub fn forward(
            &self,
            #[shape(batch, seq, D)] x: Tensor,
            #[shape(batch, keys, D)] k: Tensor,
            #[shape(batch, seq, 6)] cos: Tensor,
            #[shape(batch, seq, 6)] sin: Tensor,
        ) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) {
            let (b, s, t) = (x.dim(0), x.dim(1), k.dim(1));
            let q = x.reshape([b, s, 4, 6]).permute([0, 2, 1, 3]);
            let kh = k.reshape([b, t, 4, 6]).permute([0, 2, 1, 3]);
            let (cos, sin) = (cos.reshape([b, 1, s, 6]), sin.reshape([b, 1, s, 6]));
            let rotated = self.rotate(q, cos, sin);
            // Heads merged back, `[b, s, 4 · 6]`: the kernel writes them in that layout.
            let roped = (rotated.matmul(&kh.t()) * 0.4)
                .softmax(-1)
                .matmul(&kh)
                .permute([0, 2, 1, 3])
                .reshape([b, s, D]);
            let squashed = (q * 0.5).tanh().matmul(&kh.t()).softmax(-1).matmul(&kh);
            // Two key heads (the first 12 columns), each shared by two query heads through a broadcast dim.
            let kv = k
                .slice(2, 0, 12)
                .reshape([b, t, 2, 6])
                .permute([0, 2, 1, 3])
                .reshape([b, 2, 1, t, 6]);
            let grouped = self
                .rotate(q, cos, sin)
                .reshape([b, 2, 2, s, 6])
                .matmul(&kv.transpose(3, 4))
                .softmax(-1)
                .matmul(&kv)
                .reshape([b, 4, s, 6])
                .permute([0, 2, 1, 3])
                .reshape([b, s, D]);
            let seen = (q * 0.3).exp();
            let kept = seen.matmul(&kh.t()).softmax(-1).matmul(&kh);
            let heads = (x * 2.0).reshape([b, s, 4, 6]).permute([0, 2, 1, 3]);
            let permuted = heads.matmul(&kh.t()).softmax(-1).matmul(&kh);
            (roped, squashed, grouped, kept, seen, permuted)
        }

        /// RoPE's `x * cos + rotate_half(x) * sin` over heads of 6.
        pub fn rotate(&self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor {
            let (x1, x2) = (x.slice(3, 0, 3), x.slice(3, 3, 6));
            x * &cos + concat([x2.neg(), x1], 3) * &sin
        }
    }

    /// One tensor read both by the chain computing Q and by the chain over the scores (a per-position temperature
    /// scaling the queries and biasing the scores), at different ranks: Q's chain runs over `[b, heads, s, d]`,
    /// the grouped scores over `[b, kv_heads, group, s, t]`. Plain heads read it at the same rank.
    pub struct SharedQueryReads {}
    impl SharedQueryReads {
        pub fn forward(
            &self,
            #[shape(batch, seq, D)] x: Tensor,
            #[shape(batch, keys, D)] k: Tensor,
            #[shape(seq, 1)] temp: Tensor,
        ) -> (Tensor, Tensor) {
            let (b, s, t) = (x.dim(0), x.dim(1), k.dim(1));
            let q = x.reshape([b, s, 4, 6]).permute([0, 2, 1, 3]);
            let kh = k.reshape([b, t, 4, 6]).permute([0, 2, 1, 3]);
            let kv = k
                .slice(2, 0, 12)
                .reshape([b, t, 2, 6])
                .permute([0, 2, 1, 3])
                .reshape([b, 2, 1, t, 6]);
            let scores = (q * &temp)
                .reshape([b, 2, 2, s, 6])
                .matmul(&kv.transpose(3, 4));
            let grouped = (scores + &temp).softmax(-1).matmul(&kv);
            let plain = ((q * &temp).tanh().matmul(&kh.t()) * &temp)
                .softmax(-1)
                .matmul(&kh);
            (grouped, plain)
        }
    }

    /// The output is a reshape of a permuted view that merges dims the permute separated.
    pub struct ReshapedOutput {}
    impl ReshapedOutput {
        pub fn forward(&self, #[shape(batch, seq, D)] x: Tensor) -> Tensor {
            let (b, s) = (x.dim(0), x.dim(1));
            x.reshape([b, s, 4, 6])
                .permute([0, 2, 1, 3])
                .reshape([b, 4 * s, 6])
        }
    }

    pub struct Views {}
    impl Views {
        pub fn forward(
            &self,
            #[shape(batch, seq, D)] x: Tensor,
        ) -> (Tensor, Tensor, Tensor, Tensor) {
            let (b, s) = (x.dim(0), x.dim(1));
            let heads = x.reshape([b, s, 4, 6]).permute([0, 2, 1, 3]);
            let back = heads.permute([0, 2, 1, 3]).reshape([b * s, D]) + 1.0;
            let sliced = x.slice(2, 3, 10) * 2.0;
            let joined = concat([x.slice(2, 0, 4), x.exp().slice(2, 20, 24), x], 2);
            (heads * 1.0, back, sliced, joined)
        }
    }

    /// Concats whose inputs broadcast a size-1 axis outside the concat's: a `[1, 1, D]` parameter row before each
    /// sequence's rows (ViT's `[CLS]`), read by an elementwise op; a `[1, seq, 2]` input beside `[batch, seq, D]`,
    /// the concat itself an output; and one row of each sequence, `[batch, 1, D]`, repeated along the sequence
    /// before its rows.
    pub struct BroadcastConcats {
        #[shape(1, 1, D)]
        cls: Tensor,
    }
    impl BroadcastConcats {
        pub fn forward(
            &self,
            #[shape(batch, seq, D)] x: Tensor,
            #[shape(1, seq, 2)] y: Tensor,
        ) -> (Tensor, Tensor, Tensor) {
            let with_cls = concat([self.cls, x], 1) * 2.0;
            let wider = concat([x, y], 2);
            let first = x.narrow(1, 0, 1).exp();
            let repeated = concat(
                [
                    first.reshape([x.dim(0), 1, 1, D]),
                    x.reshape([x.dim(0), x.dim(1), 1, D]),
                ],
                2,
            );
            (with_cls, wider, repeated)
        }
    }

    /// Two reads strided along the output's inner axis by different strides in one kernel: `x` transposed
    /// (stride `D`) and a narrowed `y` transposed (stride `2·D`), in an elementwise kernel, a softmax's row
    /// input and a matmul's epilogue.
    pub struct TwoInnerStrides {
        #[shape(D, D)]
        w: Tensor,
    }
    impl TwoInnerStrides {
        pub fn forward(
            &self,
            #[shape(batch, D)] x: Tensor,
            #[shape(batch, 48)] y: Tensor,
        ) -> (Tensor, Tensor, Tensor) {
            let (xt, yt) = (x.t(), y.narrow(1, 5, D).t());
            let sum = xt * 2.0 + yt;
            let soft = (xt - yt * 0.5).softmax(-1);
            let projected = self.w.matmul(&xt) + xt * yt;
            (sum, soft, projected)
        }
    }

    /// Odd widths for the rotary models: halves of 5, and spans of 3, 1 and 6.
    pub const R: usize = 10;

    /// Concats that fuse into the elementwise kernel reading them, with their inputs' chains: Hugging Face's
    /// rotate-half RoPE on a permuted head view, a concat of three scaled/negated/exponentiated spans along the
    /// last axis, one along an outer (head) axis, and a concat of computed inputs that is itself an output. Each
    /// output is one kernel.
    pub struct Ropes {}
    impl Ropes {
        pub fn forward(
            &self,
            #[shape(batch, seq, 4, R)] x: Tensor,
            #[shape(seq, R)] cos: Tensor,
            #[shape(seq, R)] sin: Tensor,
        ) -> (Tensor, Tensor, Tensor, Tensor) {
            let heads = x.permute([0, 2, 1, 3]);
            let x1 = heads.slice(3, 0, R / 2);
            let x2 = heads.slice(3, R / 2, R);
            let rope = heads * &cos + concat([x2.neg(), x1], 3) * &sin;
            let spans = concat(
                [
                    x.slice(3, 0, 3) * 2.0,
                    x.slice(3, 3, 4).neg(),
                    (x.slice(3, 4, R) * 0.5).exp(),
                ],
                3,
            ) - x;
            let outer = concat(
                [
                    x.slice(2, 0, 1) * 0.5,
                    x.slice(2, 2, 4).neg(),
                    x.slice(2, 1, 2),
                ],
                2,
            ) * x
                + 1.0;
            let rotated = concat([x2.neg(), x1 + &cos.slice(1, 0, R / 2)], 3);
            (rope, spans, outer, rotated)
        }
    }

    /// Concats the planner must keep as kernels of their own, each for its reason: read twice, read by a
    /// reduction, and a concat of a concat (a kernel reads through one concat).
    pub struct UnfusedConcats {}
    impl UnfusedConcats {
        pub fn forward(&self, #[shape(batch, R)] x: Tensor) -> (Tensor, Tensor, Tensor) {
            let twice = concat([x.slice(1, 0, 3).neg(), x.slice(1, 3, R)], 1);
            let reduced = concat([x.slice(1, 4, R), x.slice(1, 0, 4).neg()], 1).sum(-1, true);
            let nested = concat(
                [
                    concat([x.slice(1, 0, 2), x.slice(1, 2, 5)], 1),
                    x.slice(1, 5, R),
                ],
                1,
            );
            (twice * &twice + 1.0, reduced, nested.neg())
        }
    }

    /// Rows a RoPE table holds: positions `0..MAX_POS`.
    pub const MAX_POS: usize = 16;

    /// A decoder step's RoPE: the table rows of the current positions, `[past, past + seq)`, read at a start
    /// bound from an argument and broadcast into the `[batch, heads, seq, R]` product with the rotated halves.
    pub struct NarrowRope {
        #[shape(MAX_POS, R)]
        cos: Tensor,
        #[shape(MAX_POS, R)]
        sin: Tensor,
    }
    impl NarrowRope {
        pub fn forward(&self, #[shape(batch, seq, 4, R)] x: Tensor, #[dim] past: usize) -> Tensor {
            let seq = x.dim(1);
            let heads = x.permute([0, 2, 1, 3]);
            let (cos, sin) = (self.cos.narrow(0, past, seq), self.sin.narrow(0, past, seq));
            let x1 = heads.slice(3, 0, R / 2);
            let x2 = heads.slice(3, R / 2, R);
            heads * &cos + concat([x2.neg(), x1], 3) * &sin
        }
    }

    /// Positions made inside the model: `arange` at a run-time start (`past`) and over a sum of dims (`past + seq`),
    /// compared into a causal mask added to attention scores, cast and scaled in an elementwise kernel, and used
    /// as the ids of an embedding (the table rows of the current positions).
    pub struct Positions {
        #[shape(MAX_POS, D)]
        table: Tensor,
    }
    impl Positions {
        pub fn forward(
            &self,
            #[shape(batch, seq, D)] q: Tensor,
            #[shape(batch, past + seq, D)] k: Tensor,
            #[dim] past: usize,
        ) -> (Tensor, Tensor, Tensor) {
            let s = q.dim(1);
            let t = past + s;
            let q_pos = arange(past, s).to_f32().reshape([1, s, 1]);
            let k_pos = arange(0, t).to_f32().reshape([1, 1, t]);
            let causal = where_(k_pos.gt(&q_pos), -1e9, 0.0);
            let attn = (q.matmul(&k.transpose(1, 2)) * 0.25 + causal)
                .softmax(-1)
                .matmul(&k);
            let rows = embedding(&self.table, &arange(past, s)) + &q;
            (attn, rows, q_pos * 0.5 - k_pos.max(1.0).log())
        }
    }

    /// A cache read: keys and values `[0, total)` of a `[batch, MAX_POS, D]` buffer (a length bound at run time,
    /// on an inner axis) into attention's matmuls, the rows `[past, past + seq)` into an elementwise kernel, and
    /// columns at a run-time start on the innermost axis.
    pub struct NarrowCache {}
    impl NarrowCache {
        pub fn forward(
            &self,
            #[shape(batch, seq, D)] q: Tensor,
            #[shape(batch, MAX_POS, D)] cache: Tensor,
            #[dim] past: usize,
            #[dim] total: usize,
        ) -> (Tensor, Tensor, Tensor, Tensor) {
            let keys = cache.narrow(1, 0, total);
            let attn = (q.matmul(&keys.t()) * 0.25).softmax(-1).matmul(&keys);
            let scores = q.matmul(&keys.t()) + 1.0;
            let rows = cache.narrow(1, past, q.dim(1)) * 2.0 + q;
            let cols = q.narrow(2, past, 4).exp();
            (attn, scores, rows, cols)
        }
    }

    /// The last position of a `seq`-long axis, as a language model's head reads it: PyTorch's negative start
    /// (`narrow(1, -1, 1)`) into a matmul, and `narrow(1, seq - 1, 1)` (a difference of dims, proved in range at
    /// build time) into an elementwise kernel with the first position. Runs at every `seq`, 1 included.
    pub struct LastPosition {
        #[shape(D, 6)]
        head: Tensor,
    }
    impl LastPosition {
        pub fn forward(&self, #[shape(batch, seq, D)] x: Tensor) -> (Tensor, Tensor) {
            let s = x.dim(1);
            let logits = x.narrow(1, -1, 1).matmul(&self.head);
            let ends = x.narrow(1, s - 1, 1) * 2.0 + x.narrow(1, 0, 1).exp();
            (logits, ends)
        }
    }

    /// Differences of dims the runtime checks: every position but the first (a length of `seq - 1`, empty at `seq`
    /// 1 as in PyTorch) beside the table rows from `past - 2` on (a start, which may be 0 but not negative); and
    /// the positions rolled by one, a concat of `1 + (seq - 1)` rows, which is `seq` again.
    pub struct AllButFirst {
        #[shape(MAX_POS, D)]
        table: Tensor,
    }
    impl AllButFirst {
        pub fn forward(
            &self,
            #[shape(batch, seq, D)] x: Tensor,
            #[dim] past: usize,
        ) -> (Tensor, Tensor) {
            let rest = x.dim(1) - 1;
            let shifted = x.narrow(1, 1, rest).tanh() + self.table.narrow(0, past - 2, rest);
            let rolled = concat([x.narrow(1, -1, 1), x.narrow(1, 0, rest)], 1) * 3.0 + &x;
            (shifted, rolled)
        }
    }

    /// Sums of dims: the concat of a `past`-long and a `seq`-long tensor is `past + seq` long, which a narrow of a
    /// cache to `past + seq` rows and a `[batch, seq, past + seq]` mask input match structurally; a narrow at
    /// `past` of the concat takes back its `seq` new rows.
    pub struct SumOfDims {}
    impl SumOfDims {
        pub fn forward(
            &self,
            #[shape(batch, past, D)] old: Tensor,
            #[shape(batch, seq, D)] new: Tensor,
            #[shape(batch, seq, past + seq)] mask: Tensor,
            #[shape(batch, MAX_POS, D)] cache: Tensor,
        ) -> (Tensor, Tensor, Tensor) {
            let (p, s) = (old.dim(1), new.dim(1));
            let all = concat([old, new], 1);
            let keys = cache.narrow(1, 0, p + s);
            let attn = (new.matmul(&all.t()) * 0.25 + mask)
                .softmax(-1)
                .matmul(&keys);
            let mixed = all * 2.0 + keys;
            let back = all.narrow(1, p, s) - new;
            (attn, mixed, back)
        }
    }

    /// A KV cache: a `[batch, MAX_POS, D]` state the call writes at `past` with its `seq` new rows, then reads
    /// `[0, past + seq)` of (attention over the cached and new rows, and the prefix itself).
    pub struct CacheWrite {
        #[state]
        #[shape(batch, MAX_POS, D)]
        cache: Tensor,
    }
    impl CacheWrite {
        pub fn forward(
            &self,
            #[shape(batch, seq, D)] x: Tensor,
            #[dim] past: usize,
        ) -> (Tensor, Tensor) {
            let seq = x.dim(1);
            let all = self.cache.write(1, past, x * 2.0 - 1.0);
            let keys = all.narrow(1, 0, past + seq);
            let attn = (x.matmul(&keys.t()) * 0.25).softmax(-1).matmul(&keys);
            (attn, keys + 0.5)
        }
    }

    /// A state beside a difference of dims a mean reads over (the positions from the third on): a session is made
    /// from the dims the state names alone, whatever `seq` the calls will have.
    pub struct StateBesideADifference {
        #[state]
        #[shape(batch, 2, D)]
        first: Tensor,
    }
    impl StateBesideADifference {
        pub fn forward(&self, #[shape(batch, seq, D)] x: Tensor) -> (Tensor, Tensor) {
            let rest = x.dim(1) - 2;
            let mean = x.narrow(1, 2, rest).mean(1, true);
            let first = self.first.write(1, 0, x.narrow(1, 0, 2));
            (mean * 2.0, first + 1.0)
        }
    }

    /// Writes whose values the kernel computes: RoPE of new keys (through a concat) into a `[batch, 2, MAX_POS,
    /// 6]` cache at positions `[past, past + seq)`, and an elementwise value of a permuted view written along the
    /// last axis of a `[batch, 4, MAX_POS]` state.
    pub struct ComputedWrites {
        #[state]
        #[shape(batch, 2, MAX_POS, 6)]
        keys: Tensor,
        #[state]
        #[shape(batch, 4, MAX_POS)]
        columns: Tensor,
    }
    impl ComputedWrites {
        pub fn forward(
            &self,
            #[shape(batch, seq, 12)] x: Tensor,
            #[shape(batch, seq, 6)] cos: Tensor,
            #[shape(batch, seq, 6)] sin: Tensor,
            #[dim] past: usize,
        ) -> (Tensor, Tensor) {
            let (b, s) = (x.dim(0), x.dim(1));
            let k = x.reshape([b, s, 2, 6]).permute([0, 2, 1, 3]);
            let (cos, sin) = (cos.reshape([b, 1, s, 6]), sin.reshape([b, 1, s, 6]));
            let rotated = k * &cos + concat([k.slice(3, 3, 6).neg(), k.slice(3, 0, 3)], 3) * &sin;
            let keys = self.keys.write(2, past, rotated).narrow(2, 0, past + s);
            let squashed = x.slice(2, 0, 4).permute([0, 2, 1]).tanh();
            let columns = self.columns.write(2, past, squashed).narrow(2, 0, past + s);
            (keys * 1.0, columns + 0.5)
        }
    }

    /// A constant slice of a dynamic axis: rows 2..5 of `seq`, which exist only when `seq >= 5`.
    pub struct SliceOfDynamicAxis {}
    impl SliceOfDynamicAxis {
        pub fn forward(&self, #[shape(batch, seq, D)] x: Tensor) -> Tensor {
            x.slice(1, 2, 5) * 2.0 + 1.0
        }
    }

    pub struct Embeddings {
        #[shape(50, D)]
        table: Tensor,
    }
    impl Embeddings {
        pub fn forward(&self, #[shape(batch, seq)] ids: Tensor<i64>) -> (Tensor, Tensor) {
            (embedding(&self.table, &ids) * 2.0, ids.to_f32() + 0.5)
        }
    }
}

/// The inputs of `NonFinite`: `x` and `y` of `[batch, ops::D]`, random but for NaN, +∞ and -∞ at places that
/// differ per row and between the two (so `max(x, y)` meets a NaN on either side), one row of neither, and in x
/// one row of -∞ alone; `q` of `[batch, seq, 8]`, and a mask of zeros but for a row of -∞ (every key masked)
/// and a NaN.
pub fn non_finite_inputs(batch: usize, seq: usize, seed: u64) -> Vec<Tensor> {
    let mut inputs: Vec<Tensor> = [0, 1]
        .map(|which| {
            let mut v = Tensor::randn(&[batch, ops::D], seed + which).to_f32_vec();
            if which == 0 && batch > 1 {
                v[(batch - 1) * ops::D..].fill(f32::NEG_INFINITY);
            }
            for row in 1..batch - 1 {
                let at = |k: usize| row * ops::D + (row * 5 + k * 7 + which as usize * 3) % ops::D;
                v[at(0)] = f32::NAN;
                if row % 2 == 0 {
                    v[at(1)] = f32::INFINITY;
                }
                if row % 3 == 0 {
                    v[at(2)] = f32::NEG_INFINITY;
                }
            }
            Tensor::from_f32(&[batch, ops::D], v).expect("a [batch, D] tensor")
        })
        .into();
    inputs.push(Tensor::randn(&[batch, seq, 8], seed + 2));
    let mut mask = vec![0.0f32; batch * seq * seq];
    // The last query of the first sequence sees no key; the first query of the last sequence reads a NaN.
    mask[(seq - 1) * seq..seq * seq].fill(f32::NEG_INFINITY);
    mask[(batch - 1) * seq * seq] = f32::NAN;
    inputs.push(Tensor::from_f32(&[batch, seq, seq], mask).expect("a [batch, seq, seq] tensor"));
    inputs
}

/// [`ops::Cumsum`]'s inputs: random values, and ids from 0 to 9 whose sequences after the first end in more and
/// more padding (id 1; a 1 between tokens is padding too, as transformers counts it).
pub fn cumsum_inputs(batch: usize, seq: usize, seed: u64) -> Vec<Tensor> {
    let ids: Vec<i64> = (0..batch * seq)
        .map(|i| {
            let (row, pos) = (i / seq, i % seq);
            if pos >= seq - seq * row / (2 * batch) {
                1
            } else {
                ((i as u64 * 7 + seed * 3) % 10) as i64
            }
        })
        .collect();
    vec![
        Tensor::randn(&[batch, seq, ops::D], seed),
        Tensor::from_i64(&[batch, seq], ids).expect("a [batch, seq] tensor"),
    ]
}

/// [`ops::Rounding`]'s input: sixteenths from -4 to 4 (exact in f32, bf16 and f16, so every path rounds the same
/// values), and from the third row on a NaN, a +∞ and a -∞ in each row.
pub fn rounding_inputs(batch: usize, seed: u64) -> Tensor {
    let mut v: Vec<f32> = Tensor::randn(&[batch, ops::D], seed)
        .to_f32_vec()
        .iter()
        .map(|x| (x * 16.0).round().clamp(-64.0, 64.0) / 16.0)
        .collect();
    for row in 2..batch {
        let at = |k: usize| row * ops::D + (row * 5 + k * 7) % ops::D;
        v[at(0)] = f32::NAN;
        v[at(1)] = f32::INFINITY;
        v[at(2)] = f32::NEG_INFINITY;
    }
    Tensor::from_f32(&[batch, ops::D], v).expect("a [batch, D] tensor")
}

/// [`ops::FirstExtremes`]'s input, `[batch, seq, VOCAB]`: whole numbers from -3 to 3 (exact in every storage type,
/// and each row's largest and smallest many times over, so the first one is what is asked for), and, row by row in
/// turn, a NaN, +∞ twice, only -∞, and +0.0 and -0.0 as the only largest.
pub fn extremes_inputs(batch: usize, seq: usize, seed: u64) -> Tensor {
    let n = ops::VOCAB;
    let mut v: Vec<f32> = Tensor::randn(&[batch, seq, n], seed)
        .to_f32_vec()
        .iter()
        .map(|x| (x * 2.0).round().clamp(-3.0, 3.0))
        .collect();
    for (r, row) in v.chunks_mut(n).enumerate() {
        let at = (r * 389 + seed as usize * 97) % n;
        match r % 5 {
            1 => row[at] = f32::NAN,
            2 => {
                row[at] = f32::INFINITY;
                row[(at + 700) % n] = f32::INFINITY;
            }
            3 => row.fill(f32::NEG_INFINITY),
            4 => {
                for x in row.iter_mut() {
                    *x = x.min(-1.0);
                }
                row[at] = -0.0;
                row[(at + 300) % n] = 0.0;
            }
            _ => {}
        }
    }
    Tensor::from_f32(&[batch, seq, n], v).expect("a [batch, seq, VOCAB] tensor")
}
