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
            let all = self.cache.write(1, past, x);
            // The old contents, read in the call that writes them: could run after the write.
            let old = self.cache.narrow(1, 0, past + x.dim(1));
            all.narrow(1, 0, past + x.dim(1)) + old
        }
    }
}

fn main() {}
