use fuse_runtime::fused_model;

#[fused_model(uses(layerz))]
mod m {
    pub struct Model {
        fc: Linear<4, 2>,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            self.fc.forward(&x)
        }
    }
}

fn main() {}
