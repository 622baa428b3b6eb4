use fuse_runtime::fused_model;

// Contracts that hold at their limits: the chain is one kernel (written twice, so no value is read twice), then
// the two matmuls and the softmax; the arena holds two [64, 64] values at batch 64.
#[fused_model(max_kernels = 4, max_arena = "32 KiB", at(batch = 64))]
mod held {
    pub struct Model {
        #[shape(64)]
        a: Tensor,
        #[shape(64, 64)]
        w: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 64)] x: Tensor) -> Tensor {
            let y = ((x * &self.a).exp().sqrt() + (x * &self.a).exp().abs()).fused();
            let probs = y.matmul(&self.w).softmax(-1);
            (probs.matmul(&self.w) * 2.0 + 1.0).fused()
        }
    }
}

// The same model without any contract or promise.
#[fused_model]
mod plain {
    pub struct Model {
        #[shape(64)]
        a: Tensor,
        #[shape(64, 64)]
        w: Tensor,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, 64)] x: Tensor) -> Tensor {
            let y = (x * &self.a).exp().sqrt() + (x * &self.a).exp().abs();
            let probs = y.matmul(&self.w).softmax(-1);
            probs.matmul(&self.w) * 2.0 + 1.0
        }
    }
}

fn main() {
    // A contract that holds costs nothing: the plan is the very same.
    assert_eq!(held::Model::PLAN_HASH, plain::Model::PLAN_HASH);
    assert_eq!(held::Model::random(0).plan().kernel_count(), 4);
}
