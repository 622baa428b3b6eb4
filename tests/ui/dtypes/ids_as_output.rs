use fuse_runtime::{fused_model, Tensor};

#[fused_model]
mod m {
    pub struct Model {
        #[shape(10, 4)]
        table: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, seq)] ids: Tensor<i64>) -> (Tensor, Tensor) {
            (embedding(&self.table, &ids), ids)
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let ids = Tensor::uniform_ids(&[2, 3], 10, 1);
    let _ = model.forward(&ids);
}
