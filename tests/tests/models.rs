//! Both example models: fused == eager == the f64 reference, at several dynamic dims.

use fuse_examples::models::{encoder::encoder::EncoderLayer, mlp::mlp::Mlp};
use fuse_runtime::Tensor;
use fuse_tests::harness::{assert_close, reference};

#[test]
fn encoder_layer_matches_reference() {
    let model = EncoderLayer::random(7);
    for (batch, seq) in [(1, 1), (2, 5), (3, 17)] {
        let x = Tensor::randn(&[batch, seq, 384], 11 + seq as u64);
        let mut mask = vec![1.0f32; batch * seq];
        for b in 0..batch {
            for s in (seq - b.min(seq - 1))..seq {
                mask[b * seq + s] = 0.0;
            }
        }
        let mask = Tensor::from_f32(&[batch, seq], mask).unwrap();
        let fused = model.forward(&x, &mask).unwrap();
        let eager = model.forward_eager(&x, &mask).unwrap();
        let want = reference(
            EncoderLayer::spec(),
            model.weights().expect("f32 weights"),
            &[&x, &mask],
        );
        assert_close("encoder fused", &fused, &want[0], 1e-4, 1e-4);
        assert_close("encoder eager", &eager, &want[0], 1e-4, 1e-4);
    }
}

#[test]
fn mlp_matches_reference() {
    let model = Mlp::random(3);
    for batch in [1, 4, 9] {
        let x = Tensor::randn(&[batch, 1024], batch as u64);
        let fused = model.forward(&x).unwrap();
        let eager = model.forward_eager(&x).unwrap();
        let want = reference(Mlp::spec(), model.weights().expect("f32 weights"), &[&x]);
        assert_close("mlp fused", &fused, &want[0], 1e-4, 1e-3);
        assert_close("mlp eager", &eager, &want[0], 1e-4, 1e-3);
    }
}
