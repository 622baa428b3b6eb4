//! Llama-family decoders (RMSNorm, rotary position embeddings, grouped-query attention, SwiGLU) with Hugging Face's
//! parameter names (`model.embed_tokens.weight`, `model.layers.N.self_attn.q_proj.weight`, ..., `model.norm.weight`,
//! `lm_head.weight`), so a `LlamaForCausalLM` checkpoint loads as it is.
//!
//! The blocks are one library, generic over the sizes; each configuration is a model of its own: `tiny` (the
//! configuration `tests/tests/llama.rs` checks token for token against transformers), `tiny_llama3` (the same with
//! Llama 3.1's rope scaling, `Llama3Rotary`) and `smollm` (SmolLM-135M's shape, benchmark W5). `TinyLlama` and `SmolLm` run the whole sequence on each call; `TinyLlamaCached` and
//! `SmolLmCached` (the same parameters) keep a KV cache in the caller's session and run only the new positions
//! (`CachedDecoder` drives them). A call takes the token ids and Hugging Face's `attention_mask` (1 for a real
//! token, 0 for padding; `inputs` builds both for a left-padded batch, `step_inputs` for one cached step); the
//! positions, the rotary tables (`Rotary`) and the causal mask (`CausalMask`) are made inside the model from them,
//! as `transformers`' `generate` makes them.

use fuse_runtime::{fused_model, CompiledModel, PlanMode, Result, Session, Tensor};

#[fused_model(library)]
pub mod llama_blocks {
    /// `x · Wᵀ`, PyTorch's `nn.Linear` layout without a bias.
    pub struct Linear<const IN: usize, const OUT: usize> {
        #[shape(OUT, IN)]
        weight: Tensor,
    }

    impl<const IN: usize, const OUT: usize> Linear<IN, OUT> {
        pub fn forward(&self, x: Tensor) -> Tensor {
            x.matmul(&self.weight.t())
        }
    }

    pub struct RmsNorm<const H: usize> {
        #[shape(H)]
        weight: Tensor,
    }

    impl<const H: usize> RmsNorm<H> {
        pub fn forward(&self, x: Tensor) -> Tensor {
            x.rms_norm(&self.weight, 1e-5)
        }
    }

    /// The additive attention mask `[batch, seq, past + seq]` of a left-padded batch, from Hugging Face's
    /// `attention_mask` (`[batch, past + seq]`, 1 for a real token, 0 for padding): the token at position
    /// `past + i` sees itself and the real tokens before it (0), nothing else (-1e9). A padding token sees only
    /// itself, so no row of the softmax is empty.
    pub struct CausalMask {}

    impl CausalMask {
        pub fn forward(&self, attention_mask: Tensor, past: usize, seq: usize) -> Tensor {
            let b = attention_mask.dim(0);
            let t = past + seq;
            let padding = (attention_mask.reshape([b, 1, t]) - 1.0) * 1e9;
            // Values of the dims alone: each comparison's kernel computes its own copy (the mask is one kernel).
            let cols = arange(0, t).reshape([1, 1, t]).to_f32();
            let rows = arange(past, seq).reshape([1, seq, 1]).to_f32();
            where_(cols.eq(&rows), 0.0, where_(cols.lt(&rows), padding, -1e9))
        }
    }

    /// The rotary tables `(cos, sin)`, each `[batch, seq, D]`, of the positions `[past, past + seq)` of a
    /// left-padded batch, as Hugging Face's `LlamaRotaryEmbedding` makes them: a token's position counts the real
    /// tokens before it (`attention_mask`'s running sum, less one; 0 in the padding), the frequencies are
    /// `THETA^(-2i/D)` for `i < D/2`, and the table repeats them over both halves.
    pub struct Rotary<const D: usize, const THETA: usize> {}

    impl<const D: usize, const THETA: usize> Rotary<D, THETA> {
        pub fn forward(&self, attention_mask: Tensor, past: usize, seq: usize) -> (Tensor, Tensor) {
            let positions = self.positions(attention_mask, past, seq);
            self.tables(positions, self.inv_freq())
        }

        /// `[batch, seq, 1]`: each new token's position, the real tokens before it.
        pub fn positions(&self, attention_mask: Tensor, past: usize, seq: usize) -> Tensor {
            let b = attention_mask.dim(0);
            let t = past + seq;
            let upto = arange(0, t)
                .reshape([1, 1, t])
                .to_f32()
                .le(&arange(past, seq).reshape([1, seq, 1]).to_f32());
            let real_so_far = where_(upto, attention_mask.reshape([b, 1, t]), 0.0).sum(-1, false);
            (real_so_far - 1.0).relu().reshape([b, seq, 1])
        }

        /// `[1, 1, D]`: column j's frequency, of i = j mod D/2 (no concat of two halves), computed as
        /// exp(−2i·ln THETA / D) where transformers takes 1 / THETA^(2i/D) (the same to an ulp).
        pub fn inv_freq(&self) -> Tensor {
            let j = arange(0, D).to_f32();
            let i = j - where_(j.ge((D / 2) as f64), (D / 2) as f64, 0.0);
            (i * (-2.0 * (THETA as f64).ln() / D as f64))
                .exp()
                .reshape([1, 1, D])
        }

        /// `(cos, sin)` of the positions times the frequencies.
        pub fn tables(&self, positions: Tensor, inv_freq: Tensor) -> (Tensor, Tensor) {
            // The angles read the positions, a tensor: written out for each of their two readers, so that the
            // cosines' kernel and the sines' compute them rather than a third kernel storing them.
            ((positions * &inv_freq).cos(), (positions * &inv_freq).sin())
        }
    }

    /// [`Rotary`] with Llama 3.1's rope scaling (`rope_scaling: {rope_type: "llama3", factor, low_freq_factor,
    /// high_freq_factor, original_max_position_embeddings}`, as transformers' `_compute_llama3_parameters`): a
    /// frequency whose wavelength 2π/f is longer than `OLD_CONTEXT / LOW` is divided by `FACTOR`, one shorter than
    /// `OLD_CONTEXT / HIGH` is kept, and one between is interpolated, `(1 − s)·f/FACTOR + s·f` with
    /// `s = (OLD_CONTEXT/wavelength − LOW) / (HIGH − LOW)`. The wavelength is compared through the frequency, so
    /// no division by a tensor is needed. Llama 3.1 and 3.2 use 8 (3.2: 32), 1, 4 and 8192.
    pub struct Llama3Rotary<
        const D: usize,
        const THETA: usize,
        const FACTOR: usize,
        const LOW: usize,
        const HIGH: usize,
        const OLD_CONTEXT: usize,
    > {
        rotary: Rotary<D, THETA>,
    }

    impl<
            const D: usize,
            const THETA: usize,
            const FACTOR: usize,
            const LOW: usize,
            const HIGH: usize,
            const OLD_CONTEXT: usize,
        > Llama3Rotary<D, THETA, FACTOR, LOW, HIGH, OLD_CONTEXT>
    {
        pub fn forward(&self, attention_mask: Tensor, past: usize, seq: usize) -> (Tensor, Tensor) {
            let two_pi = 6.283_185_307_179_586; // 2π (the model sees only its own names)
            let f = self.rotary.inv_freq();
            let divided = f * (1.0 / FACTOR as f64);
            let s = (f * (OLD_CONTEXT as f64 / two_pi) - LOW as f64) * (1.0 / (HIGH - LOW) as f64);
            let smoothed = (s * -1.0 + 1.0) * &divided + s * &f;
            // 2π/f > OLD_CONTEXT/LOW ⟺ f < 2π·LOW/OLD_CONTEXT; 2π/f < OLD_CONTEXT/HIGH ⟺ f > 2π·HIGH/OLD_CONTEXT.
            let long = f.lt(two_pi * LOW as f64 / OLD_CONTEXT as f64);
            let short = f.gt(two_pi * HIGH as f64 / OLD_CONTEXT as f64);
            let scaled = where_(long, divided, where_(short, f, smoothed));
            let positions = self.rotary.positions(attention_mask, past, seq);
            self.rotary.tables(positions, scaled)
        }
    }

    pub struct Embedding<const V: usize, const H: usize> {
        #[shape(V, H)]
        weight: Tensor,
    }

    impl<const V: usize, const H: usize> Embedding<V, H> {
        pub fn forward(&self, ids: Tensor) -> Tensor {
            embedding(&self.weight, &ids)
        }

        /// Tied embeddings: the output layer is the embedding table.
        pub fn logits(&self, x: Tensor) -> Tensor {
            x.matmul(&self.weight.t())
        }
    }

    /// What [`Attention`] and [`CachedAttention`] share, with no parameters of its own: heads split from a
    /// projection, rotary position embeddings, and grouped-query attention over the heads.
    pub struct HeadOps<const HEADS: usize, const KV_HEADS: usize, const D: usize> {}

    impl<const HEADS: usize, const KV_HEADS: usize, const D: usize> HeadOps<HEADS, KV_HEADS, D> {
        /// `[batch, seq, heads · D]` → `[batch, heads, seq, D]`.
        pub fn split(&self, x: Tensor, heads: usize) -> Tensor {
            let (b, s) = (x.dim(0), x.dim(1));
            x.reshape([b, s, heads, D]).permute([0, 2, 1, 3])
        }

        /// Hugging Face's `x * cos + rotate_half(x) * sin`, `rotate_half(x) = [-x2, x1]`; `x`: `[batch, heads,
        /// seq, D]`, `cos`/`sin`: `[batch, seq, D]`.
        pub fn rope(&self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor {
            let (b, s) = (x.dim(0), x.dim(2));
            let (cos, sin) = (cos.reshape([b, 1, s, D]), sin.reshape([b, 1, s, D]));
            let x1 = x.slice(3, 0, D / 2);
            let x2 = x.slice(3, D / 2, D);
            x * &cos + concat([x2.neg(), x1], 3) * &sin
        }

        /// `softmax(q·kᵀ / √D + mask) · v` with the query heads of one KV head sharing it through a broadcast batch
        /// dim (grouped-query attention); `q`: `[batch, HEADS, seq, D]`, `k`/`v`: `[batch, KV_HEADS, t, D]`, `mask`:
        /// `[batch, seq, t]`; the result is `[batch, seq, HEADS · D]`.
        pub fn attend(&self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor {
            let (b, s, t) = (q.dim(0), q.dim(2), k.dim(2));
            let q = q.reshape([b, KV_HEADS, HEADS / KV_HEADS, s, D]);
            let k = k.reshape([b, KV_HEADS, 1, t, D]);
            let v = v.reshape([b, KV_HEADS, 1, t, D]);
            let scale = 1.0 / (D as f64).sqrt();
            let scores = q.matmul(&k.transpose(3, 4)) * scale + &mask.reshape([b, 1, 1, s, t]);
            let out = scores.softmax(-1).matmul(&v).reshape([b, HEADS, s, D]);
            out.permute([0, 2, 1, 3]).reshape([b, s, HEADS * D])
        }
    }

    /// `KV_DIM` is `KV_HEADS · D` (a model checks it in its shapes).
    pub struct Attention<
        const H: usize,
        const HEADS: usize,
        const KV_HEADS: usize,
        const D: usize,
        const KV_DIM: usize,
    > {
        q_proj: Linear<H, H>,
        k_proj: Linear<H, KV_DIM>,
        v_proj: Linear<H, KV_DIM>,
        o_proj: Linear<H, H>,
        heads: HeadOps<HEADS, KV_HEADS, D>,
    }

    impl<
            const H: usize,
            const HEADS: usize,
            const KV_HEADS: usize,
            const D: usize,
            const KV_DIM: usize,
        > Attention<H, HEADS, KV_HEADS, D, KV_DIM>
    {
        /// `x`: `[batch, seq, H]`; `cos`/`sin`: `[batch, seq, D]`; `mask`: `[batch, seq, seq]`, added to the scores.
        pub fn forward(&self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor) -> Tensor {
            let q = self.heads.split(self.q_proj.forward(x), HEADS);
            let k = self.heads.split(self.k_proj.forward(x), KV_HEADS);
            let v = self.heads.split(self.v_proj.forward(x), KV_HEADS);
            let (q, k) = (self.heads.rope(q, cos, sin), self.heads.rope(k, cos, sin));
            self.o_proj.forward(self.heads.attend(q, k, v, mask))
        }
    }

    /// [`Attention`] with a KV cache: k and v (after RoPE) of the new positions are written into per-layer caches
    /// at `past`, and the queries attend over `[0, past + seq)` of them. The caches are `#[state]`: they belong to
    /// the caller's session, sized for `MAX_SEQ` positions.
    pub struct CachedAttention<
        const H: usize,
        const HEADS: usize,
        const KV_HEADS: usize,
        const D: usize,
        const KV_DIM: usize,
        const MAX_SEQ: usize,
    > {
        q_proj: Linear<H, H>,
        k_proj: Linear<H, KV_DIM>,
        v_proj: Linear<H, KV_DIM>,
        o_proj: Linear<H, H>,
        heads: HeadOps<HEADS, KV_HEADS, D>,
        #[state]
        #[shape(batch, KV_HEADS, MAX_SEQ, D)]
        k_cache: Tensor,
        #[state]
        #[shape(batch, KV_HEADS, MAX_SEQ, D)]
        v_cache: Tensor,
    }

    impl<
            const H: usize,
            const HEADS: usize,
            const KV_HEADS: usize,
            const D: usize,
            const KV_DIM: usize,
            const MAX_SEQ: usize,
        > CachedAttention<H, HEADS, KV_HEADS, D, KV_DIM, MAX_SEQ>
    {
        /// `x`: `[batch, seq, H]` (the new positions); `cos`/`sin`: `[batch, seq, D]` at their positions; `mask`:
        /// `[batch, seq, past + seq]` over the cached and the new positions, added to the scores.
        pub fn forward(
            &self,
            x: Tensor,
            cos: Tensor,
            sin: Tensor,
            mask: Tensor,
            past: usize,
        ) -> Tensor {
            let t = past + x.dim(1);
            let q = self.heads.split(self.q_proj.forward(x), HEADS);
            let k = self.heads.split(self.k_proj.forward(x), KV_HEADS);
            let v = self.heads.split(self.v_proj.forward(x), KV_HEADS);
            let (q, k) = (self.heads.rope(q, cos, sin), self.heads.rope(k, cos, sin));
            // The new keys and values join the cache; attention reads every position so far from it.
            let k = self.k_cache.write(2, past, k).narrow(2, 0, t);
            let v = self.v_cache.write(2, past, v).narrow(2, 0, t);
            self.o_proj.forward(self.heads.attend(q, k, v, mask))
        }
    }

    pub struct Mlp<const H: usize, const F: usize> {
        gate_proj: Linear<H, F>,
        up_proj: Linear<H, F>,
        down_proj: Linear<F, H>,
    }

    impl<const H: usize, const F: usize> Mlp<H, F> {
        pub fn forward(&self, x: Tensor) -> Tensor {
            self.down_proj
                .forward(self.gate_proj.forward(x).silu() * self.up_proj.forward(x))
        }
    }

    pub struct DecoderLayer<
        const H: usize,
        const HEADS: usize,
        const KV_HEADS: usize,
        const D: usize,
        const KV_DIM: usize,
        const F: usize,
    > {
        input_layernorm: RmsNorm<H>,
        self_attn: Attention<H, HEADS, KV_HEADS, D, KV_DIM>,
        post_attention_layernorm: RmsNorm<H>,
        mlp: Mlp<H, F>,
    }

    impl<
            const H: usize,
            const HEADS: usize,
            const KV_HEADS: usize,
            const D: usize,
            const KV_DIM: usize,
            const F: usize,
        > DecoderLayer<H, HEADS, KV_HEADS, D, KV_DIM, F>
    {
        pub fn forward(&self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor) -> Tensor {
            let attended = self
                .self_attn
                .forward(self.input_layernorm.forward(x), cos, sin, mask);
            let x = x + attended;
            x + self.mlp.forward(self.post_attention_layernorm.forward(x))
        }
    }

    /// [`DecoderLayer`] over [`CachedAttention`]: the same parameters, by the same names.
    pub struct CachedDecoderLayer<
        const H: usize,
        const HEADS: usize,
        const KV_HEADS: usize,
        const D: usize,
        const KV_DIM: usize,
        const F: usize,
        const MAX_SEQ: usize,
    > {
        input_layernorm: RmsNorm<H>,
        self_attn: CachedAttention<H, HEADS, KV_HEADS, D, KV_DIM, MAX_SEQ>,
        post_attention_layernorm: RmsNorm<H>,
        mlp: Mlp<H, F>,
    }

    impl<
            const H: usize,
            const HEADS: usize,
            const KV_HEADS: usize,
            const D: usize,
            const KV_DIM: usize,
            const F: usize,
            const MAX_SEQ: usize,
        > CachedDecoderLayer<H, HEADS, KV_HEADS, D, KV_DIM, F, MAX_SEQ>
    {
        pub fn forward(
            &self,
            x: Tensor,
            cos: Tensor,
            sin: Tensor,
            mask: Tensor,
            past: usize,
        ) -> Tensor {
            let attended =
                self.self_attn
                    .forward(self.input_layernorm.forward(x), cos, sin, mask, past);
            let x = x + attended;
            x + self.mlp.forward(self.post_attention_layernorm.forward(x))
        }
    }
}

/// The configuration of `tests/tests/llama.rs` and `scripts/llama_reference.py`: 2 layers, 4 heads over 2 KV
/// heads, an untied `lm_head`.
#[fused_model(uses(llama_blocks))]
pub mod tiny {
    pub const VOCAB: usize = 128;
    pub const HIDDEN: usize = 64;
    pub const FFN: usize = 160;
    pub const LAYERS: usize = 2;
    pub const HEADS: usize = 4;
    pub const KV_HEADS: usize = 2;
    pub const HEAD_DIM: usize = HIDDEN / HEADS;
    pub const KV_DIM: usize = KV_HEADS * HEAD_DIM;
    /// The rotary embeddings' base (`rope_theta`).
    pub const THETA: usize = 10_000;

    pub struct TinyModel {
        embed_tokens: Embedding<VOCAB, HIDDEN>,
        layers: [DecoderLayer<HIDDEN, HEADS, KV_HEADS, HEAD_DIM, KV_DIM, FFN>; LAYERS],
        norm: RmsNorm<HIDDEN>,
    }

    pub struct TinyLlama {
        model: TinyModel,
        lm_head: Linear<HIDDEN, VOCAB>,
        causal_mask: CausalMask,
        rotary: Rotary<HEAD_DIM, THETA>,
    }

    impl TinyLlama {
        /// The logits `[batch, seq, VOCAB]` of every position.
        pub fn forward(
            &self,
            #[shape(batch, seq)] ids: Tensor<i64>,
            #[shape(batch, seq)] attention_mask: Tensor,
        ) -> Tensor {
            let mask = self.causal_mask.forward(attention_mask, 0, ids.dim(1));
            let (cos, sin) = self.rotary.forward(attention_mask, 0, ids.dim(1));
            let mut x = self.model.embed_tokens.forward(ids);
            for layer in &self.model.layers {
                x = layer.forward(x, cos, sin, mask);
            }
            self.lm_head.forward(self.model.norm.forward(x))
        }
    }

    /// Positions the KV cache of [`TinyLlamaCached`] holds.
    pub const MAX_SEQ: usize = 64;

    pub struct TinyCachedModel {
        embed_tokens: Embedding<VOCAB, HIDDEN>,
        layers:
            [CachedDecoderLayer<HIDDEN, HEADS, KV_HEADS, HEAD_DIM, KV_DIM, FFN, MAX_SEQ>; LAYERS],
        norm: RmsNorm<HIDDEN>,
    }

    /// [`TinyLlama`] with a KV cache (the same parameters, in the same order): a call runs only the new positions
    /// `[past, past + seq)`, attending over the cached ones.
    pub struct TinyLlamaCached {
        model: TinyCachedModel,
        lm_head: Linear<HIDDEN, VOCAB>,
        causal_mask: CausalMask,
        rotary: Rotary<HEAD_DIM, THETA>,
    }

    impl TinyLlamaCached {
        /// The logits `[batch, 1, VOCAB]` of the last new position, the one generation reads (as transformers'
        /// `generate` asks with `logits_to_keep=1`): a prefill's other positions skip the final norm and `lm_head`.
        pub fn forward(
            &self,
            #[shape(batch, seq)] ids: Tensor<i64>,
            #[shape(batch, past + seq)] attention_mask: Tensor,
            #[dim] past: usize,
        ) -> Tensor {
            let mask = self.causal_mask.forward(attention_mask, past, ids.dim(1));
            let (cos, sin) = self.rotary.forward(attention_mask, past, ids.dim(1));
            let mut x = self.model.embed_tokens.forward(ids);
            for layer in &self.model.layers {
                x = layer.forward(x, cos, sin, mask, past);
            }
            self.lm_head
                .forward(self.model.norm.forward(x.narrow(1, -1, 1)))
        }
    }
}

/// The `tiny` configuration with Llama 3.1's rope scaling (`Llama3Rotary`: factor 8, frequency factors 1 and 4,
/// an original context of 32 positions so that a short test crosses all three bands), checked against
/// `tests/data/llama3_greedy.json` (`scripts/llama_reference.py --llama3`). The same parameters as `tiny`'s.
#[fused_model(uses(llama_blocks))]
pub mod tiny_llama3 {
    // A model's sizes are constants of its own module (the macro sees only the module): `tiny`'s, again.
    pub const VOCAB: usize = 128;
    pub const HIDDEN: usize = 64;
    pub const FFN: usize = 160;
    pub const LAYERS: usize = 2;
    pub const HEADS: usize = 4;
    pub const KV_HEADS: usize = 2;
    pub const HEAD_DIM: usize = HIDDEN / HEADS;
    pub const KV_DIM: usize = KV_HEADS * HEAD_DIM;
    pub const THETA: usize = 10_000;
    pub const MAX_SEQ: usize = 64;
    pub const FACTOR: usize = 8;
    pub const LOW_FREQ_FACTOR: usize = 1;
    pub const HIGH_FREQ_FACTOR: usize = 4;
    pub const ORIGINAL_CONTEXT: usize = 32;

    pub struct Tiny3CachedModel {
        embed_tokens: Embedding<VOCAB, HIDDEN>,
        layers:
            [CachedDecoderLayer<HIDDEN, HEADS, KV_HEADS, HEAD_DIM, KV_DIM, FFN, MAX_SEQ>; LAYERS],
        norm: RmsNorm<HIDDEN>,
    }

    pub struct TinyLlama3Cached {
        model: Tiny3CachedModel,
        lm_head: Linear<HIDDEN, VOCAB>,
        causal_mask: CausalMask,
        rotary: Llama3Rotary<
            HEAD_DIM,
            THETA,
            FACTOR,
            LOW_FREQ_FACTOR,
            HIGH_FREQ_FACTOR,
            ORIGINAL_CONTEXT,
        >,
    }

    impl TinyLlama3Cached {
        /// The logits `[batch, 1, VOCAB]` of the last new position, as [`super::tiny::TinyLlamaCached`]'s.
        pub fn forward(
            &self,
            #[shape(batch, seq)] ids: Tensor<i64>,
            #[shape(batch, past + seq)] attention_mask: Tensor,
            #[dim] past: usize,
        ) -> Tensor {
            let mask = self.causal_mask.forward(attention_mask, past, ids.dim(1));
            let (cos, sin) = self.rotary.forward(attention_mask, past, ids.dim(1));
            let mut x = self.model.embed_tokens.forward(ids);
            for layer in &self.model.layers {
                x = layer.forward(x, cos, sin, mask, past);
            }
            self.lm_head
                .forward(self.model.norm.forward(x.narrow(1, -1, 1)))
        }
    }
}

/// SmolLM-135M's shape (benchmark W5): 30 layers, hidden 576, 9 heads over 3 KV heads, FFN 1536, vocabulary
/// 49152, tied embeddings.
#[fused_model(uses(llama_blocks))]
pub mod smollm {
    pub const VOCAB: usize = 49152;
    pub const HIDDEN: usize = 576;
    pub const FFN: usize = 1536;
    pub const LAYERS: usize = 30;
    pub const HEADS: usize = 9;
    pub const KV_HEADS: usize = 3;
    pub const HEAD_DIM: usize = HIDDEN / HEADS;
    pub const KV_DIM: usize = KV_HEADS * HEAD_DIM;
    /// The rotary embeddings' base (`rope_theta`).
    pub const THETA: usize = 10_000;

    pub struct SmolModel {
        embed_tokens: Embedding<VOCAB, HIDDEN>,
        layers: [DecoderLayer<HIDDEN, HEADS, KV_HEADS, HEAD_DIM, KV_DIM, FFN>; LAYERS],
        norm: RmsNorm<HIDDEN>,
    }

    pub struct SmolLm {
        model: SmolModel,
        causal_mask: CausalMask,
        rotary: Rotary<HEAD_DIM, THETA>,
    }

    impl SmolLm {
        /// The logits `[batch, seq, VOCAB]` of every position.
        pub fn forward(
            &self,
            #[shape(batch, seq)] ids: Tensor<i64>,
            #[shape(batch, seq)] attention_mask: Tensor,
        ) -> Tensor {
            let mask = self.causal_mask.forward(attention_mask, 0, ids.dim(1));
            let (cos, sin) = self.rotary.forward(attention_mask, 0, ids.dim(1));
            let mut x = self.model.embed_tokens.forward(ids);
            for layer in &self.model.layers {
                x = layer.forward(x, cos, sin, mask);
            }
            self.model.embed_tokens.logits(self.model.norm.forward(x))
        }
    }

    /// Positions the KV cache of [`SmolLmCached`] holds: W5's 128-token prompt and 128 new tokens.
    pub const MAX_SEQ: usize = 256;

    pub struct SmolCachedModel {
        embed_tokens: Embedding<VOCAB, HIDDEN>,
        layers:
            [CachedDecoderLayer<HIDDEN, HEADS, KV_HEADS, HEAD_DIM, KV_DIM, FFN, MAX_SEQ>; LAYERS],
        norm: RmsNorm<HIDDEN>,
    }

    /// [`SmolLm`] with a KV cache (the same parameters, in the same order).
    pub struct SmolLmCached {
        model: SmolCachedModel,
        causal_mask: CausalMask,
        rotary: Rotary<HEAD_DIM, THETA>,
    }

    impl SmolLmCached {
        /// The logits `[batch, 1, VOCAB]` of the last new position, as [`super::tiny::TinyLlamaCached`]'s.
        pub fn forward(
            &self,
            #[shape(batch, seq)] ids: Tensor<i64>,
            #[shape(batch, past + seq)] attention_mask: Tensor,
            #[dim] past: usize,
        ) -> Tensor {
            let mask = self.causal_mask.forward(attention_mask, past, ids.dim(1));
            let (cos, sin) = self.rotary.forward(attention_mask, past, ids.dim(1));
            let mut x = self.model.embed_tokens.forward(ids);
            for layer in &self.model.layers {
                x = layer.forward(x, cos, sin, mask, past);
            }
            self.model
                .embed_tokens
                .logits(self.model.norm.forward(x.narrow(1, -1, 1)))
        }
    }
}

/// The inputs for a batch of sequences of different lengths, left-padded to the longest (as Hugging Face pads for
/// generation): ids (0 in the padding) and the attention mask (1 for a real token, 0 for padding). Every
/// sequence's last token is in the last column.
pub fn inputs(sequences: &[&[i64]]) -> Result<[Tensor; 2]> {
    let batch = sequences.len();
    let seq = sequences.iter().map(|s| s.len()).max().unwrap_or(0);
    let (mut ids, mut mask) = (Vec::new(), Vec::new());
    for tokens in sequences {
        let pad = seq - tokens.len();
        ids.extend(std::iter::repeat_n(0, pad).chain(tokens.iter().copied()));
        mask.extend((0..seq).map(|col| if col >= pad { 1.0 } else { 0.0 }));
    }
    Ok([
        Tensor::from_i64(&[batch, seq], ids)?,
        Tensor::from_f32(&[batch, seq], mask)?,
    ])
}

/// Each sequence's next-token logits (`vocab` wide) from a run of the whole left-padded batch, whose output is
/// `[batch, seq, vocab]` (every position, the uncached models) or `[batch, 1, vocab]` (the last, the cached ones).
/// Logits of another shape, or of no position (every prompt empty: nothing to continue), are an error.
pub fn last_logits(logits: &Tensor, vocab: usize) -> Result<Vec<Vec<f32>>> {
    let bad = |why: String| fuse_runtime::Error::Generation(why);
    let &[_, seq, width] = logits.shape() else {
        return Err(bad(format!(
            "logits of shape {:?}, not [batch, seq, vocab]",
            logits.shape()
        )));
    };
    if width != vocab {
        return Err(bad(format!(
            "logits {width} wide, not the vocabulary's {vocab}"
        )));
    }
    if seq == 0 {
        return Err(bad(
            "the prompts are empty: there is no last position to continue from".into(),
        ));
    }
    let all = logits.to_f32_vec();
    Ok(all
        .chunks_exact(seq * vocab)
        .map(|positions| positions[(seq - 1) * vocab..].to_vec())
        .collect())
}

/// Cached decoding of a batch of prompts with a model that keeps a KV cache ([`tiny::TinyLlamaCached`],
/// [`smollm::SmolLmCached`]): the first call prefills every prompt at once (left-padded, as [`inputs`]), each later
/// call feeds one token per sequence at the next position. A sequence that has finished still takes a step (its
/// token is ignored, its cache rows are its own), so the batch keeps its shape.
pub struct CachedDecoder<'m> {
    model: &'m CompiledModel,
    mode: PlanMode,
    session: Session,
    batch: usize,
    vocab: usize,
    /// Padding before each prompt, from the prefill.
    pads: Vec<usize>,
    /// Positions in the cache so far (the prefill's length, then one more per step).
    past: usize,
}

impl<'m> CachedDecoder<'m> {
    /// A decoder for `batch` prompts, its session allocated here.
    pub fn new(
        model: &'m CompiledModel,
        mode: PlanMode,
        batch: usize,
        vocab: usize,
    ) -> Result<Self> {
        Ok(CachedDecoder {
            model,
            mode,
            session: model.session(&[("batch", batch)])?,
            batch,
            vocab,
            pads: Vec::new(),
            past: 0,
        })
    }

    /// For `fuse_runtime::generate::generate_batch_indexed`: the next-token logits of the running sequences
    /// (`running[i]` is `sequences[i]`'s index in the batch). The first call prefills; every later one feeds each
    /// sequence's last token.
    pub fn next_logits(
        &mut self,
        running: &[usize],
        sequences: &[&[i64]],
    ) -> Result<Vec<Vec<f32>>> {
        let batch = self.batch;
        if self.past == 0 {
            if running.len() != batch {
                return Err(fuse_runtime::Error::Generation(format!(
                    "a cached decoder for {batch} prompts was first called with {}",
                    running.len()
                )));
            }
            let [ids, mask] = inputs(sequences)?;
            let seq = ids.shape()[1];
            self.pads = sequences.iter().map(|s| seq - s.len()).collect();
            let past = fuse_runtime::exec::dim_arg(0)?;
            let logits =
                self.model
                    .run_one_session(self.mode, &mut self.session, &[&ids, &mask, &past])?;
            self.past = seq;
            return last_logits(&logits, self.vocab);
        }
        let mut last = vec![0i64; batch];
        for (&row, s) in running.iter().zip(sequences) {
            if let (Some(slot), Some(&token)) = (last.get_mut(row), s.last()) {
                *slot = token;
            }
        }
        let [ids, mask] = step_inputs(&last, &self.pads, self.past)?;
        let past = fuse_runtime::exec::dim_arg(self.past)?;
        let logits =
            self.model
                .run_one_session(self.mode, &mut self.session, &[&ids, &mask, &past])?;
        self.past += 1;
        let rows = last_logits(&logits, self.vocab)?;
        Ok(running
            .iter()
            .filter_map(|&r| rows.get(r).cloned())
            .collect())
    }
}

/// The inputs of one cached step: each sequence's `token` at position `past` of the cache, and the attention mask
/// over the cache and the new position (1 for a real token, 0 for the `pads` before each prompt).
pub fn step_inputs(tokens: &[i64], pads: &[usize], past: usize) -> Result<[Tensor; 2]> {
    let batch = tokens.len();
    let mut mask = Vec::with_capacity(batch * (past + 1));
    for b in 0..batch {
        let pad = pads.get(b).copied().unwrap_or(0);
        mask.extend((0..=past).map(|col| if col >= pad { 1.0 } else { 0.0 }));
    }
    Ok([
        Tensor::from_i64(&[batch, 1], tokens.to_vec())?,
        Tensor::from_f32(&[batch, past + 1], mask)?,
    ])
}
