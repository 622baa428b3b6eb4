use fuse_runtime::{fused_model, Tensor};

#[fused_model]
mod m {
    pub struct Block {
        #[shape(4, 4)]
        w: Tensor,
        next: Block,
    }

    impl Block {
        pub fn forward(&self, x: Tensor) -> Tensor {
            self.next.forward(&x.matmul(&self.w))
        }
    }

    pub struct Model {
        block: Block,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            self.block.forward(&x)
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let _ = model.forward(&Tensor::randn(&[2, 4], 1));
}
