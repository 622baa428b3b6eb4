use fuse_runtime::{fused_model, Tensor};

#[fused_model]
mod m {
    pub struct Model {
        #[shape(4, 4)]
        b: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor, #[dim] past: usize) -> Tensor {
            let fits = self.b.narrow(0, past, 2);
            let past_the_end = self.b.narrow(0, 3, 2);
            let whole_axis_shifted = x.narrow(0, 1, x.dim(0));
            fits + past_the_end + whole_axis_shifted
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let _ = model.forward(&Tensor::randn(&[2, 4], 1), 1);
}
