use fuse_runtime::{fused_model, Tensor};

#[fused_model]
mod m {
    pub struct Model {
        #[shape(10, 4)]
        table: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, seq)] ids: Tensor<i64>) -> Tensor {
            // Twenty times a mask: ids 0 and 20, and the table has 10 rows.
            let scaled = (ids.to_f32().ne(1.0).to_f32() * 20.0).to_i64();
            embedding(&self.table, &scaled)
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let ids = Tensor::uniform_ids(&[2, 3], 10, 1);
    let _ = model.forward(&ids);
}
