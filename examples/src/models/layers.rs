//! Sub-models shared by the example models. A `#[fused_model(library)]` module compiles no model of its own: its
//! structs become part of every model whose module names it in `#[fused_model(uses(..))]`.

use fuse_runtime::fused_model;

#[fused_model(library)]
pub mod layers {
    /// `x · Wᵀ + b` with PyTorch's `nn.Linear` layout (weight `[OUT, IN]`), so checkpoints load as they are.
    pub struct Linear<const IN: usize, const OUT: usize> {
        #[shape(OUT, IN)]
        weight: Tensor,
        #[shape(OUT)]
        bias: Tensor,
    }

    impl<const IN: usize, const OUT: usize> Linear<IN, OUT> {
        pub fn forward(&self, x: Tensor) -> Tensor {
            // The bias is the matmul's epilogue, never a pass of its own.
            (x.matmul(&self.weight.t()) + &self.bias).fused()
        }
    }
}
