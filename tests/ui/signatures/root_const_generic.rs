use fuse_runtime::{fused_model, Tensor};

#[fused_model]
mod m {
    pub struct Model<const N: usize> {
        #[shape(N, N)]
        w: Tensor,
    }

    impl<const N: usize> Model<N> {
        pub fn forward(&self, #[shape(batch, N)] x: Tensor) -> Tensor {
            x.matmul(&self.w)
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let _ = model.forward(&Tensor::randn(&[2, 4], 1));
}
