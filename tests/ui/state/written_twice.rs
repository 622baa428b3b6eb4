use fuse_runtime::{fused_model, Tensor};

#[fused_model]
mod m {
    pub const MAX_SEQ: usize = 16;

    pub struct Cache {
        #[state]
        #[shape(batch, MAX_SEQ, 8)]
        cache: Tensor,
    }

    impl Cache {
        pub fn forward(&self, #[shape(batch, seq, 8)] x: Tensor, #[dim] past: usize) -> Tensor {
            let first = self.cache.write(1, past, x);
            let again = self.cache.write(1, past, x * 2.0);
            first + again
        }
    }
}

fn main() {}
