//! CLIP's text tower (`CLIPTextModel`) with the parameter names of a `CLIPModel` checkpoint's text half
//! (`text_model.embeddings.token_embedding.weight`, `text_model.encoder.layers.N.self_attn.q_proj.weight`, ...,
//! `text_model.final_layer_norm.weight`), so the text weights of openai/clip-vit-base-patch32 load as they are.
//! What sets it apart: an encoder whose attention is causal, the quick GELU `x · σ(1.702·x)`, and its pooled output,
//! each sequence's final hidden row at its end-of-text token. CLIP's checkpoints give that token the vocabulary's
//! last id and pad with it too, so transformers finds it as the first position of the largest id (`argmax`, whose
//! ties go to the first, as PyTorch's do); the row is then picked by comparing positions, so only it is summed.
//!
//! `tiny` is the configuration `tests/tests/clip_text.rs` checks against transformers
//! (`scripts/clip_text_reference.py`). CLIP ViT-B/32's text tower is the same with 49408 tokens, 77 positions, 512
//! features, 8 heads, 12 layers and FFN 2048.

use fuse_runtime::fused_model;

#[fused_model(uses(crate::models::layers::layers))]
pub mod clip_text_tiny {
    pub const VOCAB: usize = 100;
    pub const POSITIONS: usize = 16;
    pub const HIDDEN: usize = 64;
    pub const HEADS: usize = 4;
    pub const HEAD_DIM: usize = HIDDEN / HEADS;
    pub const FFN: usize = 128;
    pub const LAYERS: usize = 2;
    pub const EPS: f64 = 1e-5;
    /// Added to the scores of keys after the query or padded (see `minilm::MASK_VALUE` for why not `f32::MIN`).
    pub const MASK_VALUE: f64 = -1e9;

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
        #[rename("token_embedding.weight")]
        #[shape(VOCAB, HIDDEN)]
        token: Tensor,
        #[rename("position_embedding.weight")]
        #[shape(POSITIONS, HIDDEN)]
        position: Tensor,
    }

    impl Embeddings {
        /// Each token's row plus its position's (positions from 0 on every row).
        pub fn forward(&self, ids: Tensor) -> Tensor {
            embedding(&self.token, &ids) + embedding(&self.position, &arange(0, ids.dim(1)))
        }
    }

    pub struct SelfAttention {
        q_proj: Linear<HIDDEN, HIDDEN>,
        k_proj: Linear<HIDDEN, HIDDEN>,
        v_proj: Linear<HIDDEN, HIDDEN>,
        out_proj: Linear<HIDDEN, HIDDEN>,
    }

    impl SelfAttention {
        /// `[b, s, HIDDEN]` → `[b, HEADS, s, HEAD_DIM]`.
        fn heads(&self, x: Tensor) -> Tensor {
            let (b, s) = (x.dim(0), x.dim(1));
            x.reshape([b, s, HEADS, HEAD_DIM]).permute([0, 2, 1, 3])
        }

        /// `mask` is the `[b, 1, s, s]` additive causal and padding mask.
        pub fn forward(&self, x: Tensor, mask: Tensor) -> Tensor {
            let (b, s) = (x.dim(0), x.dim(1));
            let q = self.heads(self.q_proj.forward(&x));
            let k = self.heads(self.k_proj.forward(&x));
            let v = self.heads(self.v_proj.forward(&x));
            let scale = 1.0 / (HEAD_DIM as f64).sqrt();
            let probs = (q.matmul(&k.t()) * scale + mask).softmax(-1);
            let context = probs
                .matmul(&v)
                .permute([0, 2, 1, 3])
                .reshape([b, s, HIDDEN]);
            self.out_proj.forward(&context)
        }
    }

    pub struct Mlp {
        fc1: Linear<HIDDEN, FFN>,
        fc2: Linear<FFN, HIDDEN>,
    }

    impl Mlp {
        /// `hidden_act = "quick_gelu"`: `x · σ(1.702·x)`, the sigmoid approximation of GELU CLIP was trained with.
        pub fn forward(&self, x: Tensor) -> Tensor {
            let h = self.fc1.forward(&x);
            self.fc2.forward(&(&h * (&h * 1.702).sigmoid()))
        }
    }

    /// `text_model.encoder.layers.N.*`, pre-norm.
    pub struct Layer {
        self_attn: SelfAttention,
        layer_norm1: LayerNorm,
        mlp: Mlp,
        layer_norm2: LayerNorm,
    }

    impl Layer {
        pub fn forward(&self, x: Tensor, mask: Tensor) -> Tensor {
            let h = &x + self.self_attn.forward(&self.layer_norm1.forward(&x), &mask);
            &h + self.mlp.forward(&self.layer_norm2.forward(&h))
        }
    }

    pub struct ClipText {
        #[rename("text_model.embeddings")]
        embeddings: Embeddings,
        #[rename("text_model.encoder.layers")]
        layers: [Layer; LAYERS],
        #[rename("text_model.final_layer_norm")]
        final_layer_norm: LayerNorm,
    }

    impl ClipText {
        /// The last hidden state `[batch, seq, HIDDEN]` and the pooled output `[batch, HIDDEN]` (the last hidden
        /// row at each sequence's end-of-text token, what CLIP projects into its joint space). `attention_mask` is
        /// 1.0 for real tokens, 0.0 for padding (right-padded, with the end-of-text id).
        pub fn forward(
            &self,
            #[shape(batch, seq)] input_ids: Tensor<i64>,
            #[shape(batch, seq)] attention_mask: Tensor,
        ) -> (Tensor, Tensor) {
            let (b, s) = (input_ids.dim(0), input_ids.dim(1));
            let keys = arange(0, s).reshape([1, s]).to_f32();
            let queries = arange(0, s).reshape([s, 1]).to_f32();
            let causal = where_(keys.gt(&queries), MASK_VALUE, 0.0).reshape([1, 1, s, s]);
            let padding = (1.0 - attention_mask.reshape([b, 1, 1, s])) * MASK_VALUE;
            let mask = causal + padding;
            let mut x = self.embeddings.forward(&input_ids);
            for layer in &self.layers {
                x = layer.forward(&x, &mask);
            }
            let last = self.final_layer_norm.forward(&x);
            // The end-of-text token: the first position of the largest id.
            let end = input_ids.to_f32().argmax(1, true).reshape([b, 1, 1]);
            let at_end = arange(0, s).to_f32().reshape([1, s, 1]).eq(&end);
            let pooled = where_(at_end, last, 0.0).sum(1, false);
            (last, pooled)
        }
    }
}
