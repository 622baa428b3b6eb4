use fuse_runtime::{fused_model, Tensor};

// At batch 64 the hidden activations alone take 16 KiB of arena.
#[fused_model(max_arena = "8 KiB", at(batch = 64))]
mod m {
    pub struct Model {
        #[shape(64, 64)]
        w: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 64)] x: Tensor) -> Tensor {
            let hidden = x.matmul(&self.w).relu();
            hidden.matmul(&self.w)
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let _ = model.forward(&Tensor::randn(&[2, 64], 1));
}
