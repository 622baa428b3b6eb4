//! MPNet, the architecture of all-mpnet-base-v2, with Hugging Face's parameter names (`embeddings.*`,
//! `encoder.layer.N.attention.attn.q.weight`, ..., `encoder.relative_attention_bias.weight`), so an `MPNetModel`
//! checkpoint loads as it is. Its layers are BERT's (post-norm, erf GELU); what it adds is a relative position bias,
//! `[HEADS, s, s]`, made once from the distance between each query and key position and added to every layer's
//! attention scores.
//!
//! The bias is made inside the model as transformers makes it (`relative_bias::RelativePositionBias`, shared with
//! the T5 encoder): a bucket per distance, from `log` and `trunc` of it, then the table's row of each bucket.
//!
//! `tiny` is the configuration `tests/tests/mpnet.rs` checks against transformers (`scripts/mpnet_reference.py`).
//! all-mpnet-base-v2 is the same with hidden 768, 12 heads, 12 layers, FFN 3072, 30527 tokens and 514 positions.

use fuse_runtime::fused_model;

#[fused_model(uses(
    crate::models::layers::layers,
    crate::models::relative_bias::relative_bias
))]
pub mod mpnet_tiny {
    pub const VOCAB: usize = 100;
    pub const MAX_POSITIONS: usize = 80;
    pub const HIDDEN: usize = 64;
    pub const HEADS: usize = 4;
    pub const HEAD_DIM: usize = HIDDEN / HEADS;
    pub const FFN: usize = 128;
    pub const LAYERS: usize = 2;
    pub const EPS: f64 = 1e-5;
    /// `relative_attention_num_buckets`.
    pub const BUCKETS: usize = 32;
    /// Added to the scores of padded keys (see `minilm::MASK_VALUE` for why not `f32::MIN`).
    pub const MASK_VALUE: f64 = -1e9;
    /// The padding token's id, which transformers' position ids also start from.
    pub const PADDING_ID: f64 = 1.0;

    pub struct LayerNorm {
        #[shape(HIDDEN)]
        weight: Tensor,
        #[shape(HIDDEN)]
        bias: Tensor,
    }

    impl LayerNorm {
        pub fn forward(&self, x: Tensor) -> Tensor {
            x.layer_norm(&self.weight, &self.bias, EPS)
        }
    }

    pub struct Embeddings {
        #[rename("word_embeddings.weight")]
        #[shape(VOCAB, HIDDEN)]
        word: Tensor,
        #[rename("position_embeddings.weight")]
        #[shape(MAX_POSITIONS, HIDDEN)]
        position: Tensor,
        #[rename("LayerNorm")]
        norm: LayerNorm,
    }

    impl Embeddings {
        /// Positions as transformers' `create_position_ids_from_input_ids` makes them: real tokens count from
        /// `PADDING_ID + 1`, padding stays at `PADDING_ID` (ids from 1 to `seq + 1`, checked against the table's
        /// `MAX_POSITIONS` rows when `seq` is bound).
        pub fn forward(&self, input_ids: Tensor<i64>) -> Tensor {
            let tokens = input_ids.to_f32().ne(PADDING_ID).to_f32();
            let position_ids = (tokens.cumsum(1) * tokens + PADDING_ID).to_i64();
            let x = embedding(&self.word, &input_ids) + embedding(&self.position, &position_ids);
            self.norm.forward(&x)
        }
    }

    /// `attention.attn.*`: q, k, v and the output projection o.
    pub struct SelfAttention {
        q: Linear<HIDDEN, HIDDEN>,
        k: Linear<HIDDEN, HIDDEN>,
        v: Linear<HIDDEN, HIDDEN>,
        o: Linear<HIDDEN, HIDDEN>,
    }

    impl SelfAttention {
        /// `[b, s, HIDDEN]` → `[b, HEADS, s, HEAD_DIM]`.
        fn heads(&self, x: Tensor) -> Tensor {
            let (b, s) = (x.dim(0), x.dim(1));
            x.reshape([b, s, HEADS, HEAD_DIM]).permute([0, 2, 1, 3])
        }

        /// `position_bias` is `[1, HEADS, s, s]`, `mask` the `[b, 1, 1, s]` additive padding mask.
        pub fn forward(&self, x: Tensor, position_bias: Tensor, mask: Tensor) -> Tensor {
            let (b, s) = (x.dim(0), x.dim(1));
            let q = self.heads(self.q.forward(&x));
            let k = self.heads(self.k.forward(&x));
            let v = self.heads(self.v.forward(&x));
            let scale = 1.0 / (HEAD_DIM as f64).sqrt();
            let probs = (q.matmul(&k.t()) * scale + position_bias + mask).softmax(-1);
            let context = probs
                .matmul(&v)
                .permute([0, 2, 1, 3])
                .reshape([b, s, HIDDEN]);
            self.o.forward(&context)
        }
    }

    /// `encoder.layer.N.*`, post-norm.
    pub struct Layer {
        #[rename("attention.attn")]
        attention: SelfAttention,
        #[rename("attention.LayerNorm")]
        attention_norm: LayerNorm,
        #[rename("intermediate.dense")]
        intermediate: Linear<HIDDEN, FFN>,
        #[rename("output.dense")]
        output: Linear<FFN, HIDDEN>,
        #[rename("output.LayerNorm")]
        output_norm: LayerNorm,
    }

    impl Layer {
        pub fn forward(&self, x: Tensor, position_bias: Tensor, mask: Tensor) -> Tensor {
            let attended = self.attention.forward(&x, &position_bias, &mask);
            let h = self.attention_norm.forward(&(attended + &x));
            let ffn = self.output.forward(&self.intermediate.forward(&h).gelu());
            self.output_norm.forward(&(ffn + &h))
        }
    }

    pub struct Encoder {
        #[rename("layer")]
        layers: [Layer; LAYERS],
        relative_attention_bias: RelativePositionBias<BUCKETS, HEADS>,
    }

    pub struct MpNet {
        embeddings: Embeddings,
        encoder: Encoder,
    }

    impl MpNet {
        /// The last hidden state `[batch, seq, HIDDEN]`; `attention_mask` is 1.0 for real tokens. The position ids
        /// are made from `input_ids`, as transformers makes them when it is given none.
        pub fn forward(
            &self,
            #[shape(batch, seq)] input_ids: Tensor<i64>,
            #[shape(batch, seq)] attention_mask: Tensor,
        ) -> Tensor {
            let (b, s) = (input_ids.dim(0), input_ids.dim(1));
            let mask = (1.0 - attention_mask.reshape([b, 1, 1, s])) * MASK_VALUE;
            let position_bias = self.encoder.relative_attention_bias.forward(s);
            let mut x = self.embeddings.forward(&input_ids);
            for layer in &self.encoder.layers {
                x = layer.forward(&x, &position_bias, &mask);
            }
            x
        }
    }
}
