use fuse_runtime::{fused_model, Tensor};

// The arena grows with `batch`, so the limit needs a size for it; `seq` is no dim of this model.
#[fused_model(max_arena = "8 KiB", at(seq = 128))]
mod m {
    pub struct Model {
        #[shape(64, 64)]
        w: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 64)] x: Tensor) -> Tensor {
            x.matmul(&self.w).relu().matmul(&self.w)
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let _ = model.forward(&Tensor::randn(&[2, 64], 1));
}
