use fuse_runtime::fused_model;

#[fused_model(library)]
mod layers {
    pub struct Linear<const IN: usize, const OUT: usize> {
        #[shape(OUT, IN)]
        weight: Tensor,
    }

    impl<const IN: usize, const OUT: usize> Linear<IN, OUT> {
        pub fn forward(&self, x: Tensor) -> Tensor {
            x.matmul(&self.weight.t())
        }
    }
}

#[fused_model(uses(layers))]
mod m {
    pub struct Linear<const IN: usize, const OUT: usize> {
        #[shape(IN, OUT)]
        weight: Tensor,
    }

    pub struct Model {
        fc: Linear<4, 2>,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            self.fc.forward(&x)
        }
    }
}

fn main() {
    let _ = m::Model::random(0);
}
