// Integer ids through `embedding`, a mask through `where_`-free `.to_f32()`, reductions off the last axis,
// slices and concat, and a tuple of outputs.
use fuse_runtime::{fused_model, Tensor};

#[fused_model]
mod m {
    pub const VOCAB: usize = 16;
    pub const DIM: usize = 8;

    pub struct Model {
        #[shape(VOCAB, DIM)]
        table: Tensor,
        #[shape(DIM)]
        gain: Tensor,
    }

    impl Model {
        pub fn forward(
            &self,
            #[shape(batch, seq)] ids: Tensor<i64>,
            #[shape(batch, seq)] mask: Tensor,
        ) -> (Tensor, Tensor) {
            let (b, s) = (ids.dim(0), ids.dim(1));
            let x = embedding(&self.table, &ids).rms_norm(&self.gain, 1e-6);
            let keep = mask.gt(0.5).to_f32().reshape([b, s, 1]);
            let pooled = (x * keep).sum(1, false);
            let halves = concat([pooled.slice(1, 4, 8), pooled.slice(1, 0, 4)], 1);
            let scores = x.matmul(&x.transpose(1, 2)).softmax(-1);
            (halves, scores)
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let ids = Tensor::uniform_ids(&[2, 5], m::VOCAB as i64, 1);
    let mask = Tensor::from_f32(&[2, 5], vec![1.0; 10]).unwrap();
    let (pooled, scores) = model.forward(&ids, &mask).unwrap();
    assert_eq!(pooled.shape(), &[2, m::DIM]);
    assert_eq!(scores.shape(), &[2, 5, 5]);
}
