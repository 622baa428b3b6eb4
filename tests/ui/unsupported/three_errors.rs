use fuse_runtime::{fused_model, Tensor};

#[fused_model]
mod m {
    pub struct Model {
        #[shape(4, 4)]
        w: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            let y = x.matmul(&self.w.t()).relu();
            println!("debug");
            let z = y.normalize(-1);
            if y.gt(0.0) {
                z
            } else {
                y
            }
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let _ = model.forward(&Tensor::randn(&[2, 4], 1));
}
