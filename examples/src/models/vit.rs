//! The Vision Transformer (ViT; the image towers of CLIP and DINOv2 are built the same way), with the parameter names
//! of Hugging Face's checkpoints (`embeddings.patch_embeddings.projection.weight`,
//! `encoder.layer.N.attention.attention.query.weight`, ..., `layernorm.weight`), so a `ViTModel` checkpoint such
//! as google/vit-base-patch16-224-in21k loads as it is. An image is cut into square patches, each projected to the
//! hidden width (the checkpoint's `Conv2d` with a stride of its kernel, which is one product over each patch's
//! pixels), a learned `[CLS]` row goes first, learned positions are added, and pre-norm encoder layers follow.
//!
//! `tiny` is the configuration `tests/tests/vit.rs` checks against transformers (`scripts/vit_reference.py`).
//! ViT-Base/16 is the same with 224-pixel images, 16-pixel patches, hidden 768, 12 heads, 12 layers and FFN 3072.

use fuse_runtime::fused_model;

// 24 kernels: five before the layers (the patches' pixels gathered from the image, their product, the `[CLS]` row
// repeated over the batch, the embeddings' sum, the first norm), then nine a layer, its attention one kernel, and the
// last norm.
#[fused_model(uses(crate::models::layers::layers), max_kernels = 24)]
pub mod vit_tiny {
    pub const CHANNELS: usize = 3;
    pub const IMAGE: usize = 32;
    pub const PATCH: usize = 8;
    /// Patches along each side of the image.
    pub const GRID: usize = IMAGE / PATCH;
    pub const PATCHES: usize = GRID * GRID;
    /// Pixels of one patch, over its channels: the projection's depth.
    pub const PATCH_PIXELS: usize = CHANNELS * PATCH * PATCH;
    pub const HIDDEN: usize = 64;
    pub const HEADS: usize = 4;
    pub const HEAD_DIM: usize = HIDDEN / HEADS;
    pub const FFN: usize = 128;
    pub const LAYERS: usize = 2;
    /// `layer_norm_eps` of ViT's configuration.
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

    /// `patch_embeddings.projection`: a convolution whose stride is its kernel, so each output is one patch's
    /// pixels (every channel) times a row of the weight.
    pub struct PatchProjection {
        #[shape(HIDDEN, CHANNELS, PATCH, PATCH)]
        weight: Tensor,
        #[shape(HIDDEN)]
        bias: Tensor,
    }

    impl PatchProjection {
        /// `[b, CHANNELS, IMAGE, IMAGE]` → `[b, PATCHES, HIDDEN]`, patches in row-major order of the grid (the
        /// convolution's output flattened, as transformers does).
        pub fn forward(&self, pixels: Tensor) -> Tensor {
            let b = pixels.dim(0);
            let patches = pixels
                .reshape([b, CHANNELS, GRID, PATCH, GRID, PATCH])
                .permute([0, 2, 4, 1, 3, 5])
                .reshape([b, PATCHES, PATCH_PIXELS]);
            patches.matmul(&self.weight.reshape([HIDDEN, PATCH_PIXELS]).t()) + &self.bias
        }
    }

    pub struct Embeddings {
        #[shape(1, 1, HIDDEN)]
        cls_token: Tensor,
        #[shape(1, PATCHES + 1, HIDDEN)]
        position_embeddings: Tensor,
        #[rename("patch_embeddings.projection")]
        projection: PatchProjection,
    }

    impl Embeddings {
        /// `[CLS]` then the patches, each with its position's row added: `[b, PATCHES + 1, HIDDEN]`.
        pub fn forward(&self, pixels: Tensor) -> Tensor {
            let patches = self.projection.forward(&pixels);
            concat([self.cls_token, patches], 1) + &self.position_embeddings
        }
    }

    /// `attention.attention.*`: multi-head scaled dot-product attention over every patch (no mask).
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

        pub fn forward(&self, x: Tensor) -> Tensor {
            let (b, s) = (x.dim(0), x.dim(1));
            let q = self.heads(self.query.forward(&x));
            let k = self.heads(self.key.forward(&x));
            let v = self.heads(self.value.forward(&x));
            let scale = 1.0 / (HEAD_DIM as f64).sqrt();
            let probs = (q.matmul(&k.t()) * scale).softmax(-1);
            probs
                .matmul(&v)
                .permute([0, 2, 1, 3])
                .reshape([b, s, HIDDEN])
        }
    }

    /// `encoder.layer.N.*`, pre-norm: each block's input is normalised, its output added to the block's input.
    pub struct Layer {
        #[rename("layernorm_before")]
        attention_norm: LayerNorm,
        #[rename("attention.attention")]
        attention: SelfAttention,
        #[rename("attention.output.dense")]
        attention_output: Linear<HIDDEN, HIDDEN>,
        #[rename("layernorm_after")]
        ffn_norm: LayerNorm,
        #[rename("intermediate.dense")]
        intermediate: Linear<HIDDEN, FFN>,
        #[rename("output.dense")]
        output: Linear<FFN, HIDDEN>,
    }

    impl Layer {
        pub fn forward(&self, x: Tensor) -> Tensor {
            let attended = self
                .attention_output
                .forward(&self.attention.forward(&self.attention_norm.forward(&x)));
            let h = attended + &x;
            let ffn = self
                .output
                .forward(&self.intermediate.forward(&self.ffn_norm.forward(&h)).gelu());
            ffn + &h
        }
    }

    pub struct Vit {
        embeddings: Embeddings,
        #[rename("encoder.layer")]
        layers: [Layer; LAYERS],
        #[rename("layernorm")]
        norm: LayerNorm,
    }

    impl Vit {
        /// The last hidden state `[batch, PATCHES + 1, HIDDEN]` (row 0 is `[CLS]`, which a classifier or an image
        /// embedding reads) of images `[batch, CHANNELS, IMAGE, IMAGE]`, normalised as the checkpoint's image
        /// processor leaves them.
        pub fn forward(
            &self,
            #[shape(batch, CHANNELS, IMAGE, IMAGE)] pixel_values: Tensor,
        ) -> Tensor {
            let mut x = self.embeddings.forward(&pixel_values);
            for layer in &self.layers {
                x = layer.forward(&x);
            }
            self.norm.forward(&x)
        }
    }
}
