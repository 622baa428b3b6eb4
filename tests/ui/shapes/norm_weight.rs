use fuse_runtime::{fused_model, Tensor};

#[fused_model]
mod m {
    pub struct Model {
        #[shape(8)]
        gamma: Tensor,
        #[shape(4)]
        beta: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            x.layer_norm(&self.gamma, &self.beta, 1e-5)
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let _ = model.forward(&Tensor::randn(&[2, 4], 1));
}
