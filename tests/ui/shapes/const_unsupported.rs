use fuse_runtime::{fused_model, Tensor};

// A constant the compiler cannot evaluate (valid Rust, so rustc adds nothing), used in three places: one error,
// on the constant, not three more where it is used.
#[fused_model]
mod m {
    pub const D: usize = [4, 8][1];

    pub struct Model {
        #[shape(D, 4)]
        w: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, D)] x: Tensor) -> Tensor {
            x.matmul(&self.w) * (D as f32)
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let _ = model.forward(&Tensor::randn(&[2, 4], 1));
}
