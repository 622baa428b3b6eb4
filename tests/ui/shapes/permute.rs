use fuse_runtime::{fused_model, Tensor};

#[fused_model]
mod m {
    pub struct Model {
        #[shape(4)]
        b: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            x.permute([0, 0])
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let _ = model.forward(&Tensor::randn(&[2, 4], 1));
}
