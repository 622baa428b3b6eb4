//! GPT-2 with Hugging Face's parameter names (`wte.weight`, `h.N.attn.c_attn.weight`, ..., `ln_f.weight`), so a
//! `GPT2Model` checkpoint loads as it is. What sets it apart from the other examples: its projections are
//! `Conv1D`s, whose weights are stored `[in, out]` (`x · W + b`, no transpose); one product makes the queries,
//! keys and values side by side (`c_attn`, `[in, 3·in]`), which `narrow` splits into three views the attention
//! kernel reads in place; positions are learned (`wpe`, looked up at `arange(0, seq)`); the MLP's GELU is the tanh
//! form; layers are pre-norm, with a final norm.
//!
//! `tiny` is the configuration `tests/tests/gpt2.rs` checks against transformers (`scripts/gpt2_reference.py`).
//! GPT-2 small is the same with 768 features, 12 heads, 12 layers, 50257 tokens and 1024 positions.

use fuse_runtime::fused_model;

#[fused_model]
pub mod gpt2_tiny {
    pub const VOCAB: usize = 100;
    pub const POSITIONS: usize = 64;
    pub const EMBD: usize = 64;
    pub const HEADS: usize = 4;
    pub const HEAD_DIM: usize = EMBD / HEADS;
    pub const LAYERS: usize = 2;
    pub const EPS: f64 = 1e-5;
    /// Added to the scores of keys after the query or padded (see `minilm::MASK_VALUE` for why not `f32::MIN`).
    pub const MASK_VALUE: f64 = -1e9;

    /// Hugging Face's `Conv1D`: `x · W + b` with W stored `[IN, OUT]`.
    pub struct Conv1D<const IN: usize, const OUT: usize> {
        #[shape(IN, OUT)]
        weight: Tensor,
        #[shape(OUT)]
        bias: Tensor,
    }

    impl<const IN: usize, const OUT: usize> Conv1D<IN, OUT> {
        pub fn forward(&self, x: Tensor) -> Tensor {
            x.matmul(&self.weight) + &self.bias
        }
    }

    pub struct LayerNorm {
        #[shape(EMBD)]
        weight: Tensor,
        #[shape(EMBD)]
        bias: Tensor,
    }

    impl LayerNorm {
        pub fn forward(&self, x: Tensor) -> Tensor {
            x.layer_norm(&self.weight, &self.bias, EPS)
        }
    }

    pub struct Attention {
        c_attn: Conv1D<EMBD, { 3 * EMBD }>,
        c_proj: Conv1D<EMBD, EMBD>,
    }

    impl Attention {
        /// Columns `[part · EMBD, (part + 1) · EMBD)` of `c_attn`'s output as `[b, HEADS, s, HEAD_DIM]`.
        fn heads(&self, qkv: Tensor, part: usize) -> Tensor {
            let (b, s) = (qkv.dim(0), qkv.dim(1));
            qkv.narrow(2, part * EMBD, EMBD)
                .reshape([b, s, HEADS, HEAD_DIM])
                .permute([0, 2, 1, 3])
        }

        /// `mask` is the `[b, 1, s, s]` additive causal and padding mask.
        pub fn forward(&self, x: Tensor, mask: Tensor) -> Tensor {
            let (b, s) = (x.dim(0), x.dim(1));
            let qkv = self.c_attn.forward(&x);
            let (q, k, v) = (
                self.heads(&qkv, 0),
                self.heads(&qkv, 1),
                self.heads(&qkv, 2),
            );
            let scale = 1.0 / (HEAD_DIM as f64).sqrt();
            let probs = (q.matmul(&k.t()) * scale + mask).softmax(-1);
            let context = probs.matmul(&v).permute([0, 2, 1, 3]).reshape([b, s, EMBD]);
            self.c_proj.forward(&context)
        }
    }

    pub struct Mlp {
        c_fc: Conv1D<EMBD, { 4 * EMBD }>,
        c_proj: Conv1D<{ 4 * EMBD }, EMBD>,
    }

    impl Mlp {
        pub fn forward(&self, x: Tensor) -> Tensor {
            self.c_proj.forward(&self.c_fc.forward(&x).gelu_tanh())
        }
    }

    /// `h.N.*`, pre-norm.
    pub struct Block {
        ln_1: LayerNorm,
        attn: Attention,
        ln_2: LayerNorm,
        mlp: Mlp,
    }

    impl Block {
        pub fn forward(&self, x: Tensor, mask: Tensor) -> Tensor {
            let h = &x + self.attn.forward(&self.ln_1.forward(&x), &mask);
            &h + self.mlp.forward(&self.ln_2.forward(&h))
        }
    }

    pub struct Gpt2 {
        #[rename("wte.weight")]
        #[shape(VOCAB, EMBD)]
        wte: Tensor,
        #[rename("wpe.weight")]
        #[shape(POSITIONS, EMBD)]
        wpe: Tensor,
        h: [Block; LAYERS],
        ln_f: LayerNorm,
    }

    impl Gpt2 {
        /// The last hidden state `[batch, seq, EMBD]`. `attention_mask` is 1.0 for real tokens, 0.0 for padding
        /// (right-padded: positions count from 0 on every row, as `GPT2Model` counts them).
        pub fn forward(
            &self,
            #[shape(batch, seq)] ids: Tensor<i64>,
            #[shape(batch, seq)] attention_mask: Tensor,
        ) -> Tensor {
            let (b, s) = (ids.dim(0), ids.dim(1));
            let keys = arange(0, s).reshape([1, s]).to_f32();
            let queries = arange(0, s).reshape([s, 1]).to_f32();
            let causal = where_(keys.gt(&queries), MASK_VALUE, 0.0).reshape([1, 1, s, s]);
            let padding = (1.0 - attention_mask.reshape([b, 1, 1, s])) * MASK_VALUE;
            let mask = causal + padding;
            let mut x = embedding(&self.wte, &ids) + embedding(&self.wpe, &arange(0, s));
            for block in &self.h {
                x = block.forward(&x, &mask);
            }
            self.ln_f.forward(&x)
        }
    }
}
