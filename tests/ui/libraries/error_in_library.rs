// A mistake inside a library is reported once, on the library's own tokens, though a model uses it.
use fuse_runtime::fused_model;

#[fused_model(library)]
mod layers {
    pub struct Scale<const N: usize> {
        #[shape(N)]
        w: Tensor,
    }

    impl<const N: usize> Scale<N> {
        pub fn forward(&self, x: Tensor) -> Tensor {
            x.frobnicate() * &self.w
        }
    }
}

#[fused_model(uses(layers))]
mod m {
    pub struct Model {
        scale: Scale<4>,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            self.scale.forward(&x)
        }
    }
}

fn main() {
    let _ = m::Model::random(0);
}
