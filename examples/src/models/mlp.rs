//! A three-layer perceptron with GELU: workload W2, 1024 → 4096 → 4096 → 1024.

use fuse_runtime::fused_model;

// Three GEMMs, each with its bias and GELU as the epilogue; 2 MiB of intermediates at batch 64.
#[fused_model(
    uses(crate::models::layers::layers),
    max_kernels = 3,
    max_arena = "2 MiB",
    at(batch = 64)
)]
pub mod mlp {
    pub const D_IN: usize = 1024;
    pub const D_HIDDEN: usize = 4096;
    pub const D_OUT: usize = 1024;

    pub struct Mlp {
        fc1: Linear<D_IN, D_HIDDEN>,
        fc2: Linear<D_HIDDEN, D_HIDDEN>,
        fc3: Linear<D_HIDDEN, D_OUT>,
    }

    impl Mlp {
        pub fn forward(&self, #[shape(batch, D_IN)] x: Tensor) -> Tensor {
            let h = self.fc1.forward(&x).gelu();
            let h = self.fc2.forward(&h).gelu();
            self.fc3.forward(&h)
        }
    }
}
