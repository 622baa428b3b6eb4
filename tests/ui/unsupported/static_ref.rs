use fuse_runtime::{fused_model, Tensor};

#[fused_model]
mod m {
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

static SCALE: f32 = 0.5;

fn main() {
    let model = m::Model::random(0);
    let _ = model.forward(&Tensor::randn(&[2, 4], SCALE as u64));
}
