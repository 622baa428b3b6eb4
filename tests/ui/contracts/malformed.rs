use fuse_runtime::{fused_model, Tensor};

#[fused_model(max_kernels = "3")]
mod m {
    pub struct Model {
        #[shape(4)]
        a: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            x * &self.a
        }
    }
}

#[fused_model(max_arena = "12 mebibytes")]
mod n {
    pub struct Model {
        #[shape(4)]
        a: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            x * &self.a
        }
    }
}

#[fused_model]
mod o {
    pub struct Model {
        #[shape(4)]
        a: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            (x * &self.a).fused(2)
        }
    }
}

fn main() {
    let _ = o::Model::random(0).forward(&Tensor::randn(&[2, 4], 1));
}
