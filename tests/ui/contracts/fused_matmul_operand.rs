use fuse_runtime::{fused_model, Tensor};

// A matmul reads its operands from memory, so the scaling before it cannot share its kernel.
#[fused_model]
mod m {
    pub struct Model {
        #[shape(4, 4)]
        w: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            (x * 0.5).matmul(&self.w).fused()
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let _ = model.forward(&Tensor::randn(&[2, 4], 1));
}
