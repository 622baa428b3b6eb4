// A model built from two libraries of sub-models, one of them nested elsewhere in the crate; the library's const
// is visible to its own code, and checkpoint names follow the field paths as for local sub-models.
use fuse_runtime::{fused_model, Tensor};

#[fused_model(library)]
mod layers {
    pub const SCALE: f64 = 0.5;

    pub struct Linear<const IN: usize, const OUT: usize> {
        #[shape(OUT, IN)]
        weight: Tensor,
        #[shape(OUT)]
        bias: Tensor,
    }

    impl<const IN: usize, const OUT: usize> Linear<IN, OUT> {
        pub fn forward(&self, x: Tensor) -> Tensor {
            (x.matmul(&self.weight.t()) + &self.bias) * SCALE
        }
    }
}

mod nn {
    use fuse_runtime::fused_model;

    #[fused_model(library)]
    pub mod acts {
        pub struct Gelu {}

        impl Gelu {
            pub fn forward(&self, x: Tensor) -> Tensor {
                x.gelu()
            }
        }
    }
}

#[fused_model(uses(layers, crate::nn::acts))]
mod m {
    pub struct Model {
        fc1: Linear<4, 8>,
        act: Gelu,
        fc2: Linear<8, 2>,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            self.fc2.forward(&self.act.forward(&self.fc1.forward(&x)))
        }
    }
}

fn main() {
    assert_eq!(layers::SCALE, 0.5);
    let model = m::Model::random(0);
    let names: Vec<&str> = m::Model::spec().params.iter().map(|p| p.name).collect();
    assert_eq!(names, ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]);
    let y = model.forward(&Tensor::randn(&[3, 4], 1)).unwrap();
    assert_eq!(y.shape(), &[3, 2]);
}
