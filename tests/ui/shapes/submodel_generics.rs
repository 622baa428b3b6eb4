use fuse_runtime::{fused_model, Tensor};

#[fused_model]
mod m {
    pub struct Linear<const IN: usize, const OUT: usize> {
        #[shape(OUT, IN)]
        weight: Tensor,
    }

    impl<const IN: usize, const OUT: usize> Linear<IN, OUT> {
        pub fn forward(&self, x: Tensor) -> Tensor {
            x.matmul(&self.weight.t())
        }
    }

    pub struct Model {
        fc1: Linear<4, 8>,
        fc2: Linear<4, 2>,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            self.fc2.forward(&self.fc1.forward(&x).relu())
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let _ = model.forward(&Tensor::randn(&[2, 4], 1));
}
