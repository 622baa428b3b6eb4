// Everything here is static, so it compiles: `for` over a constant range and over an array of sub-models,
// `if`/`match` on constants and const generics, compound assignment, and a reshape with -1.
use fuse_runtime::{fused_model, Tensor};

#[fused_model]
mod m {
    pub const LAYERS: usize = 3;
    pub const HIDDEN: usize = 8;
    pub const USE_GATE: bool = true;

    pub struct Linear<const IN: usize, const OUT: usize> {
        #[shape(OUT, IN)]
        weight: Tensor,
        #[shape(OUT)]
        bias: Tensor,
    }

    impl<const IN: usize, const OUT: usize> Linear<IN, OUT> {
        pub fn forward(&self, x: Tensor) -> Tensor {
            let y = x.matmul(&self.weight.t()) + &self.bias;
            if IN == OUT {
                y + x
            } else {
                y
            }
        }
    }

    pub struct Block {
        fc: Linear<HIDDEN, HIDDEN>,
    }

    impl Block {
        pub fn forward(&self, x: Tensor, step: usize) -> Tensor {
            let y = self.fc.forward(&x);
            match step % 2 {
                0 => y.relu(),
                _ => y.gelu(),
            }
        }
    }

    pub struct Model {
        layers: [Block; LAYERS],
        head: Linear<HIDDEN, 2>,
    }

    impl Model {
        pub fn forward(&self, #[shape(batch, HIDDEN)] x: Tensor) -> Tensor {
            let mut h = x.clone();
            for i in 0..LAYERS {
                h = self.layers[i].forward(&h, i);
            }
            for layer in &self.layers {
                h = h + layer.forward(&h, 1) * 0.5;
            }
            let mut acc = h.clone();
            for i in 1..=2 {
                acc += h.square() * (i as f64);
            }
            if USE_GATE {
                acc = where_(acc.gt(0.0), acc, acc * 0.1);
            }
            let b = x.dim(0);
            let flat = acc.reshape([b, 2, -1]).reshape([b, HIDDEN]);
            self.head.forward(&flat).softmax(-1)
        }
    }
}

fn main() {
    let model = m::Model::random(0);
    let x = Tensor::randn(&[3, m::HIDDEN], 1);
    let fused = model.forward(&x).unwrap();
    let eager = model.forward_eager(&x).unwrap();
    assert_eq!(fused.shape(), &[3, 2]);
    assert!(fused.max_abs_diff(&eager).unwrap() < 1e-4);
}
