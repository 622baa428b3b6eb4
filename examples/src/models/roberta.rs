//! RoBERTa, the architecture of XLM-R and of many sentence-transformers models (all-distilroberta-v1, the
//! paraphrase-multilingual and multilingual-e5 families, bge-m3), with Hugging Face's parameter names
//! (`embeddings.*`, `encoder.layer.N.attention.self.query.weight`, ...), so a `RobertaModel` or `XLMRobertaModel`
//! checkpoint loads as it is. Its layers are BERT's (MiniLM's, with LayerNorm eps 1e-5); its embeddings differ:
//! position ids count the real tokens from the padding id, made in the model as transformers makes them when it is
//! given none, and there is one token type, whose row is added at every position.
//!
//! `tiny` is the configuration `tests/tests/roberta.rs` checks against transformers (`scripts/roberta_reference.py`).
//! XLM-R base is the same with hidden 768, 12 heads, 12 layers, FFN 3072, 250002 tokens and 514 positions.

use fuse_runtime::fused_model;

// 24 kernels: six before the layers (the scores' padding mask, the tokens, the positions' scan, two gathers and
// the norm), then nine a layer, its attention one kernel.
#[fused_model(uses(crate::models::layers::layers), max_kernels = 24)]
pub mod roberta_tiny {
    pub const VOCAB: usize = 100;
    /// Two more rows than the longest sequence: the padding id's, which real tokens count from.
    pub const MAX_POSITIONS: usize = 42;
    pub const HIDDEN: usize = 64;
    pub const HEADS: usize = 4;
    pub const HEAD_DIM: usize = HIDDEN / HEADS;
    pub const FFN: usize = 128;
    pub const LAYERS: usize = 2;
    pub const EPS: f64 = 1e-5;
    /// Added to the scores of padded keys (see `minilm::MASK_VALUE` for why not `f32::MIN`).
    pub const MASK_VALUE: f64 = -1e9;
    /// The padding token's id (`<pad>`), which the position ids also start from.
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
        /// `type_vocab_size` is 1: every token is of type 0, so its one row is added everywhere.
        #[rename("token_type_embeddings.weight")]
        #[shape(1, HIDDEN)]
        token_type: Tensor,
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
            let x = embedding(&self.word, &input_ids)
                + embedding(&self.position, &position_ids)
                + &self.token_type;
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

        /// `mask` is the `[b, 1, 1, s]` additive padding mask, shared by all layers.
        pub fn forward(&self, x: Tensor, mask: Tensor) -> Tensor {
            let (b, s) = (x.dim(0), x.dim(1));
            let q = self.heads(self.query.forward(&x));
            let k = self.heads(self.key.forward(&x));
            let v = self.heads(self.value.forward(&x));
            let scale = 1.0 / (HEAD_DIM as f64).sqrt();
            let probs = (q.matmul(&k.t()) * scale + mask).softmax(-1);
            probs
                .matmul(&v)
                .permute([0, 2, 1, 3])
                .reshape([b, s, HIDDEN])
        }
    }

    /// `encoder.layer.N.*`, post-norm.
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
        pub fn forward(&self, x: Tensor, mask: Tensor) -> Tensor {
            let attended = self
                .attention_output
                .forward(&self.attention.forward(&x, &mask));
            let h = self.attention_norm.forward(&(attended + &x));
            let ffn = self.output.forward(&self.intermediate.forward(&h).gelu());
            self.output_norm.forward(&(ffn + &h))
        }
    }

    pub struct Roberta {
        embeddings: Embeddings,
        #[rename("encoder.layer")]
        layers: [Layer; LAYERS],
    }

    impl Roberta {
        /// The last hidden state `[batch, seq, HIDDEN]`; `attention_mask` is 1.0 for real tokens, and padded
        /// positions hold `PADDING_ID`. The position ids are made from `input_ids`.
        pub fn forward(
            &self,
            #[shape(batch, seq)] input_ids: Tensor<i64>,
            #[shape(batch, seq)] attention_mask: Tensor,
        ) -> Tensor {
            let (b, s) = (input_ids.dim(0), input_ids.dim(1));
            let mask = (1.0 - attention_mask.reshape([b, 1, 1, s])) * MASK_VALUE;
            let mut x = self.embeddings.forward(&input_ids);
            for layer in &self.layers {
                x = layer.forward(&x, &mask);
            }
            x
        }
    }
}
