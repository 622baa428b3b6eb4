use fuse_runtime::{fused_model, Tensor};

#[fused_model]
mod m {
    pub struct Model {
        #[shape(16, 4)]
        table: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor, #[dim] past: usize) -> Tensor {
            let fits = embedding(&self.table, &arange(past, 2));
            let past_the_end = embedding(&self.table, &arange(0, 20));
            x + fits.sum(0, true) + past_the_end.sum(0, true)
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let _ = model.forward(&Tensor::randn(&[2, 4], 1), 1);
}
