use fuse_runtime::{fused_model, Tensor};

#[fused_model]
mod m {
    static SCALE: f64 = 0.5;

    pub struct Model {
        #[shape(4, 4)]
        w: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            x.matmul(&self.w) * SCALE
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let _ = model.forward(&Tensor::randn(&[2, 4], 1));
}
