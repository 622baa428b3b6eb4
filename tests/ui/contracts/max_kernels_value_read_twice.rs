use fuse_runtime::{fused_model, Tensor};

// One kernel is promised, but `t` is read twice, so it is kept in memory by a kernel of its own.
#[fused_model(max_kernels = 1)]
mod m {
    pub struct Model {
        #[shape(4)]
        a: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            let t = (x * &self.a).exp();
            t.sqrt() + t.abs()
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let _ = model.forward(&Tensor::randn(&[2, 4], 1));
}
