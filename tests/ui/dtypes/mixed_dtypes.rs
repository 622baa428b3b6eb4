use fuse_runtime::{fused_model, Tensor};

#[fused_model]
mod m {
    pub struct Model {
        #[shape(3)]
        b: Tensor,
    }

    impl Model {
        pub fn forward(
            &self,
            #[shape(batch, seq)] x: Tensor,
            #[shape(batch, seq)] ids: Tensor<i64>,
        ) -> Tensor {
            x + ids
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let x = Tensor::randn(&[2, 3], 1);
    let ids = Tensor::uniform_ids(&[2, 3], 10, 1);
    let _ = model.forward(&x, &ids);
}
