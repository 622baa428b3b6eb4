//! One transformer encoder layer (BERT-style, post-norm): multi-head self-attention with a padding mask, a GELU
//! feed-forward block, residuals and layer norms. Workload W3: hidden 384, 12 heads, FFN 1536.

use fuse_runtime::fused_model;

// The fused plan has 10 kernels and 10.5 MiB of intermediates at batch 8 × seq 128 (`model.plan()` lists
// them): a change that costs a kernel or grows the arena past these limits is a compile error.
#[fused_model(
    uses(crate::models::layers::layers),
    max_kernels = 10,
    max_arena = "11 MiB",
    at(batch = 8, seq = 128)
)]
pub mod encoder {
    pub const HIDDEN: usize = 384;
    pub const HEADS: usize = 12;
    pub const HEAD_DIM: usize = HIDDEN / HEADS;
    pub const FFN: usize = 1536;
    pub const EPS: f64 = 1e-12;

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

    pub struct Attention {
        query: Linear<HIDDEN, HIDDEN>,
        key: Linear<HIDDEN, HIDDEN>,
        value: Linear<HIDDEN, HIDDEN>,
        output: Linear<HIDDEN, HIDDEN>,
    }

    impl Attention {
        /// `[b, s, HIDDEN]` → `[b, HEADS, s, HEAD_DIM]`.
        fn heads(&self, x: Tensor) -> Tensor {
            let (b, s) = (x.dim(0), x.dim(1));
            x.reshape([b, s, HEADS, HEAD_DIM]).permute([0, 2, 1, 3])
        }

        /// `mask` is `[b, s]` with 1 for real tokens and 0 for padding.
        pub fn forward(&self, x: Tensor, mask: Tensor) -> Tensor {
            let (b, s) = (x.dim(0), x.dim(1));
            let q = self.heads(self.query.forward(&x));
            let k = self.heads(self.key.forward(&x));
            let v = self.heads(self.value.forward(&x));
            let scale = 1.0 / (HEAD_DIM as f64).sqrt();
            let bias = (1.0 - mask.reshape([b, 1, 1, s])) * -10000.0;
            // One attention kernel: the [b, HEADS, s, s] scores never reach memory.
            let probs = (q.matmul(&k.t()) * scale + bias).softmax(-1).fused();
            let context = probs
                .matmul(&v)
                .permute([0, 2, 1, 3])
                .reshape([b, s, HIDDEN]);
            self.output.forward(&context)
        }
    }

    pub struct EncoderLayer {
        attention: Attention,
        attention_norm: LayerNorm,
        intermediate: Linear<HIDDEN, FFN>,
        output: Linear<FFN, HIDDEN>,
        output_norm: LayerNorm,
    }

    impl EncoderLayer {
        pub fn forward(
            &self,
            #[shape(batch, seq, HIDDEN)] x: Tensor,
            #[shape(batch, seq)] mask: Tensor,
        ) -> Tensor {
            let h = self
                .attention_norm
                .forward(&(self.attention.forward(&x, &mask) + &x));
            let ffn = self.output.forward(&self.intermediate.forward(&h).gelu());
            self.output_norm.forward(&(ffn + &h))
        }
    }
}
