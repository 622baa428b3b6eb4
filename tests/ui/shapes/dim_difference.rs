use fuse_runtime::{fused_model, Tensor};

#[fused_model]
mod m {
    pub struct Model {
        #[shape(16, 4)]
        table: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, seq, 4)] x: Tensor, #[dim] past: usize) -> Tensor {
            let first = self.table.narrow(0, -20, 1);
            let rows = x.narrow(1, 0, x.dim(1) - past);
            rows + first
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let _ = model.forward(&Tensor::randn(&[2, 3, 4], 1), 0);
}
