//! The T5 encoder (`T5EncoderModel`, as Flan-T5 and T5 v1.1 make it: RMS norms without bias, pre-norm layers, no
//! score scaling, a gated GELU feed-forward) with Hugging Face's parameter names (`shared.weight`,
//! `encoder.block.N.layer.0.SelfAttention.q.weight`, ..., `encoder.final_layer_norm.weight`). Its relative position
//! bias is made by the first block's attention and added to every block's scores (`relative_bias::
//! RelativePositionBias`, shared with MPNet).
//!
//! `tiny` is the configuration `tests/tests/t5.rs` checks against transformers (`scripts/t5_reference.py`).
//! Flan-T5-base's encoder is the same with 768 features, 12 heads of 64, FFN 2048, 12 blocks and 32128 tokens.

use fuse_runtime::fused_model;

#[fused_model(uses(crate::models::relative_bias::relative_bias))]
pub mod t5_tiny {
    pub const VOCAB: usize = 100;
    pub const D_MODEL: usize = 64;
    pub const HEADS: usize = 4;
    pub const D_KV: usize = 16;
    pub const INNER: usize = HEADS * D_KV;
    pub const D_FF: usize = 128;
    pub const BLOCKS: usize = 2;
    pub const EPS: f64 = 1e-6;
    /// `relative_attention_num_buckets`.
    pub const BUCKETS: usize = 32;
    /// Added to the scores of padded keys (see `minilm::MASK_VALUE` for why not `f32::MIN`).
    pub const MASK_VALUE: f64 = -1e9;

    /// `x · Wᵀ`, no bias.
    pub struct Linear<const IN: usize, const OUT: usize> {
        #[shape(OUT, IN)]
        weight: Tensor,
    }

    impl<const IN: usize, const OUT: usize> Linear<IN, OUT> {
        pub fn forward(&self, x: Tensor) -> Tensor {
            x.matmul(&self.weight.t())
        }
    }

    /// `T5LayerNorm`: an RMS norm.
    pub struct Norm {
        #[shape(D_MODEL)]
        weight: Tensor,
    }

    impl Norm {
        pub fn forward(&self, x: Tensor) -> Tensor {
            x.rms_norm(&self.weight, EPS)
        }
    }

    /// `layer.0.SelfAttention.*`: unscaled scores, as T5 folds the scale into its initialisation.
    pub struct SelfAttention {
        q: Linear<D_MODEL, INNER>,
        k: Linear<D_MODEL, INNER>,
        v: Linear<D_MODEL, INNER>,
        o: Linear<INNER, D_MODEL>,
    }

    impl SelfAttention {
        fn heads(&self, x: Tensor) -> Tensor {
            let (b, s) = (x.dim(0), x.dim(1));
            x.reshape([b, s, HEADS, D_KV]).permute([0, 2, 1, 3])
        }

        pub fn forward(&self, x: Tensor, position_bias: Tensor, mask: Tensor) -> Tensor {
            let (b, s) = (x.dim(0), x.dim(1));
            let q = self.heads(self.q.forward(&x));
            let k = self.heads(self.k.forward(&x));
            let v = self.heads(self.v.forward(&x));
            let probs = (q.matmul(&k.t()) + position_bias + mask).softmax(-1);
            let context = probs
                .matmul(&v)
                .permute([0, 2, 1, 3])
                .reshape([b, s, INNER]);
            self.o.forward(&context)
        }
    }

    pub struct AttentionLayer {
        #[rename("SelfAttention")]
        attention: SelfAttention,
        layer_norm: Norm,
    }

    /// `layer.1.DenseReluDense.*` of a gated-GELU model: `wo(gelu_tanh(wi_0 x) · wi_1 x)`.
    pub struct GatedFeedForward {
        wi_0: Linear<D_MODEL, D_FF>,
        wi_1: Linear<D_MODEL, D_FF>,
        wo: Linear<D_FF, D_MODEL>,
    }

    pub struct FeedForwardLayer {
        #[rename("DenseReluDense")]
        feed_forward: GatedFeedForward,
        layer_norm: Norm,
    }

    /// `encoder.block.N.*`, pre-norm.
    pub struct Block {
        #[rename("layer.0")]
        attention: AttentionLayer,
        #[rename("layer.1")]
        feed_forward: FeedForwardLayer,
    }

    impl Block {
        pub fn forward(&self, x: Tensor, position_bias: Tensor, mask: Tensor) -> Tensor {
            let normed = self.attention.layer_norm.forward(&x);
            let h = &x
                + self
                    .attention
                    .attention
                    .forward(&normed, &position_bias, &mask);
            let normed = self.feed_forward.layer_norm.forward(&h);
            let ffn = &self.feed_forward.feed_forward;
            let gated = ffn.wi_0.forward(&normed).gelu_tanh() * ffn.wi_1.forward(&normed);
            &h + ffn.wo.forward(&gated)
        }
    }

    pub struct Encoder {
        block: [Block; BLOCKS],
        final_layer_norm: Norm,
    }

    pub struct T5Encoder {
        #[rename("shared.weight")]
        #[shape(VOCAB, D_MODEL)]
        shared: Tensor,
        encoder: Encoder,
        #[rename("encoder.block.0.layer.0.SelfAttention.relative_attention_bias")]
        relative_attention_bias: RelativePositionBias<BUCKETS, HEADS>,
    }

    impl T5Encoder {
        /// The last hidden state `[batch, seq, D_MODEL]`; `attention_mask` is 1.0 for real tokens, 0.0 for padding.
        pub fn forward(
            &self,
            #[shape(batch, seq)] input_ids: Tensor<i64>,
            #[shape(batch, seq)] attention_mask: Tensor,
        ) -> Tensor {
            let (b, s) = (input_ids.dim(0), input_ids.dim(1));
            let mask = (1.0 - attention_mask.reshape([b, 1, 1, s])) * MASK_VALUE;
            let position_bias = self.relative_attention_bias.forward(s);
            let mut x = embedding(&self.shared, &input_ids);
            for block in &self.encoder.block {
                x = block.forward(&x, &position_bias, &mask);
            }
            self.encoder.final_layer_norm.forward(&x)
        }
    }
}
