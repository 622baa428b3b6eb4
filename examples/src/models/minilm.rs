//! all-MiniLM-L6-v2 sentence embeddings: a real checkpoint end to end. BERT embeddings, six post-norm encoder
//! layers (hidden 384, 12 heads, FFN 1536, erf GELU), then sentence-transformers' mean pooling and L2
//! normalisation, so the output matches `SentenceTransformer("all-MiniLM-L6-v2").encode(..)`.
//!
//! Weights: `scripts/fetch-minilm.sh` puts `model.safetensors` in `.cache/minilm`; the `#[rename]`s below give
//! every parameter its checkpoint name. The checkpoint also holds `pooler.dense.*` (BERT's CLS pooler, which
//! sentence-transformers does not use) and the i64 buffer `embeddings.position_ids`: neither is a parameter here.
//! `scripts/minilm_reference.py` is the same computation in numpy.

use fuse_runtime::fused_model;

// 61 kernels and 12 MiB of intermediates at batch 8 × seq 128, held at compile time.
#[fused_model(
    uses(crate::models::layers::layers),
    max_kernels = 61,
    max_arena = "12.1 MiB",
    at(batch = 8, seq = 128)
)]
pub mod minilm {
    // From the checkpoint's config.json.
    pub const VOCAB: usize = 30522;
    pub const MAX_POSITIONS: usize = 512;
    pub const TYPE_VOCAB: usize = 2;
    pub const HIDDEN: usize = 384;
    pub const HEADS: usize = 12;
    pub const HEAD_DIM: usize = HIDDEN / HEADS;
    pub const FFN: usize = 1536;
    pub const LAYERS: usize = 6;
    pub const EPS: f64 = 1e-12;

    /// Added to the attention scores of padded keys. HF BERT adds `f32::MIN`; any value below about -104 makes
    /// `exp` underflow to exactly 0 in f32, so every finite choice gives bit-identical embeddings (checked in
    /// minilm_reference.py with f32::MIN, -1e4 and -1e9) as long as a row has one real token (CLS always is).
    /// -1e9 keeps a margin: `f32::MIN` overflows to -inf when anything is added to or subtracted from it
    /// (then `-inf - -inf` = NaN in softmax's max subtraction), and a vectorised polynomial `exp` that range-reduces
    /// through an i32 breaks on |x·log2(e)| > 2^31 ≈ 2.1e9, which -1e9 stays under.
    pub const MASK_VALUE: f64 = -1e9;
    /// `F.normalize`'s floor on the norm, and sentence-transformers' floor on the token count (an all-padding
    /// row then gives zeros, not NaN).
    pub const NORM_EPS: f64 = 1e-12;
    pub const COUNT_EPS: f64 = 1e-9;

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

    /// `embeddings.*`: the three lookup tables are summed, then normalised.
    pub struct Embeddings {
        #[rename("word_embeddings.weight")]
        #[shape(VOCAB, HIDDEN)]
        word: Tensor,
        #[rename("position_embeddings.weight")]
        #[shape(MAX_POSITIONS, HIDDEN)]
        position: Tensor,
        #[rename("token_type_embeddings.weight")]
        #[shape(TYPE_VOCAB, HIDDEN)]
        token_type: Tensor,
        #[rename("LayerNorm")]
        norm: LayerNorm,
    }

    impl Embeddings {
        /// BERT's position ids are `0..seq` on every row (transformers' default, its `position_ids` buffer), so
        /// their rows are the table's first `seq`: a view of it, read by the normalisation's kernel and broadcast
        /// over the batch, with `seq` checked against its rows when it is bound.
        pub fn forward(&self, input_ids: Tensor<i64>, token_type_ids: Tensor<i64>) -> Tensor {
            let positions = self.position.narrow(0, 0, input_ids.dim(1));
            let x = embedding(&self.word, &input_ids)
                + positions
                + embedding(&self.token_type, &token_type_ids);
            self.norm.forward(&x)
        }
    }

    /// `attention.self.*`: multi-head scaled dot-product attention (its output projection is on the layer).
    pub struct SelfAttention {
        query: Linear<HIDDEN, HIDDEN>,
        key: Linear<HIDDEN, HIDDEN>,
        value: Linear<HIDDEN, HIDDEN>,
    }

    impl SelfAttention {
        /// `[b, s, HIDDEN]` → `[b, HEADS, s, HEAD_DIM]`.
        fn heads(&self, x: Tensor) -> Tensor {
            let (b, s) = (x.dim(0), x.dim(1));
            x.reshape([b, s, HEADS, HEAD_DIM]).permute([0, 2, 1, 3])
        }

        /// `bias` is the `[b, 1, 1, s]` additive padding mask, shared by all layers.
        pub fn forward(&self, x: Tensor, bias: Tensor) -> Tensor {
            let (b, s) = (x.dim(0), x.dim(1));
            let q = self.heads(self.query.forward(&x));
            let k = self.heads(self.key.forward(&x));
            let v = self.heads(self.value.forward(&x));
            let scale = 1.0 / (HEAD_DIM as f64).sqrt();
            let probs = (q.matmul(&k.t()) * scale + bias).softmax(-1).fused();
            probs
                .matmul(&v)
                .permute([0, 2, 1, 3])
                .reshape([b, s, HIDDEN])
        }
    }

    /// `encoder.layer.N.*`, post-norm. The dotted renames flatten HF's nesting (`attention.output.dense`, ...).
    pub struct Layer {
        #[rename("attention.self")]
        attention: SelfAttention,
        #[rename("attention.output.dense")]
        attention_output: Linear<HIDDEN, HIDDEN>,
        #[rename("attention.output.LayerNorm")]
        attention_norm: LayerNorm,
        #[rename("intermediate.dense")]
        intermediate: Linear<HIDDEN, FFN>,
        #[rename("output.dense")]
        output: Linear<FFN, HIDDEN>,
        #[rename("output.LayerNorm")]
        output_norm: LayerNorm,
    }

    impl Layer {
        pub fn forward(&self, x: Tensor, bias: Tensor) -> Tensor {
            let attended = self
                .attention_output
                .forward(&self.attention.forward(&x, &bias));
            let h = self.attention_norm.forward(&(attended + &x));
            // hidden_act "gelu" in config.json is the exact erf form, not gelu_tanh.
            let ffn = self.output.forward(&self.intermediate.forward(&h).gelu());
            self.output_norm.forward(&(ffn + &h))
        }
    }

    pub struct MiniLm {
        embeddings: Embeddings,
        #[rename("encoder.layer")]
        layers: [Layer; LAYERS],
    }

    impl MiniLm {
        /// Token ids from `SentenceTokenizer` (row-major, padded to the longest sentence); `attention_mask` is 1.0
        /// for real tokens, 0.0 for padding.
        /// Returns the `[batch, HIDDEN]` unit-length sentence embeddings.
        pub fn forward(
            &self,
            #[shape(batch, seq)] input_ids: Tensor<i64>,
            #[shape(batch, seq)] token_type_ids: Tensor<i64>,
            #[shape(batch, seq)] attention_mask: Tensor,
        ) -> Tensor {
            let (b, s) = (input_ids.dim(0), input_ids.dim(1));
            let bias = (1.0 - attention_mask.reshape([b, 1, 1, s])) * MASK_VALUE;
            let mut x = self.embeddings.forward(&input_ids, &token_type_ids);
            for layer in &self.layers {
                x = layer.forward(&x, &bias);
            }
            // Mean pooling over real tokens as a batched matmul: [b, 1, s] x [b, s, HIDDEN] sums the masked
            // rows without materialising hidden * mask or reducing over a non-last axis.
            let summed = attention_mask
                .reshape([b, 1, s])
                .matmul(&x)
                .reshape([b, HIDDEN]);
            let count = attention_mask.sum(1, true).max(COUNT_EPS);
            let pooled = summed / count;
            let norm = pooled.square().sum(1, true).sqrt().max(NORM_EPS);
            pooled / norm
        }
    }
}
