//! Workload W1: `layer_norm(gelu(x·a + b) + x)` with per-column a, b, gamma, beta — an elementwise chain feeding
//! a row reduction, which the planner fuses into one kernel.

use fuse_runtime::fused_model;

// One kernel, and nothing in memory between the input and the output.
#[fused_model(max_kernels = 1, max_arena = 0)]
pub mod chain {
    pub const N: usize = 4096;

    pub struct Chain {
        #[shape(N)]
        a: Tensor,
        #[shape(N)]
        b: Tensor,
        #[shape(N)]
        gamma: Tensor,
        #[shape(N)]
        beta: Tensor,
    }

    impl Chain {
        pub fn forward(&self, #[shape(rows, N)] x: Tensor) -> Tensor {
            ((x * &self.a + &self.b).gelu() + &x)
                .layer_norm(&self.gamma, &self.beta, 1e-5)
                .fused()
        }
    }
}
