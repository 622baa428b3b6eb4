use fuse_runtime::fused_model;

#[fused_model(libary)]
mod m {
    pub struct Model {
        #[shape(4)]
        w: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            x * &self.w
        }
    }
}

fn main() {}
