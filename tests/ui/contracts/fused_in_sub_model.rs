use fuse_runtime::{fused_model, Tensor};

// The promise is broken in a sub-model called twice: one error, on the sub-model's line.
#[fused_model]
mod m {
    pub struct Block {
        #[shape(4)]
        a: Tensor,
    }

    impl Block {
        pub fn forward(&self, x: Tensor) -> Tensor {
            {
                let t = (x * &self.a).tanh();
                t.exp() / t.abs()
            }
            .fused()
        }
    }

    pub struct Model {
        first: Block,
        second: Block,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            self.second.forward(&self.first.forward(&x))
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let _ = model.forward(&Tensor::randn(&[2, 4], 1));
}
