use fuse_runtime::{fused_model, Tensor};

// Two matmuls are two kernels whatever the code: the limit itself is wrong.
#[fused_model(max_kernels = 1)]
mod m {
    pub struct Model {
        #[shape(4, 4)]
        w: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            x.matmul(&self.w).relu().matmul(&self.w)
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let _ = model.forward(&Tensor::randn(&[2, 4], 1));
}
