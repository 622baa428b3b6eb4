use fuse_runtime::{fused_model, Tensor};

#[fused_model]
mod m {
    pub struct Model {
        #[shape(4, 4)]
        w: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            normalise(&x.matmul(&self.w))
        }
    }
}

fn normalise(x: &Tensor) -> Tensor {
    x.clone()
}

fn main() {
    let model = m::Model::random(0);
    let _ = normalise(&model.forward(&Tensor::randn(&[2, 4], 1)).unwrap());
}
