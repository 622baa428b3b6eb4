use fuse_runtime::{fused_model, Tensor};

#[fused_model]
mod m {
    pub struct Model {
        #[shape(4, 4)]
        w: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor, scale: f32) -> Tensor {
            x.matmul(&self.w) * scale
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let x = Tensor::randn(&[2, 4], 1);
    let _ = model.forward(&x, &x);
}
