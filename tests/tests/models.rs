//! Both example models: fused == eager == the f64 reference, at several dynamic dims; and the examples at a dim
//! of 0, as PyTorch takes it.

use fuse_examples::models::{
    encoder::encoder::EncoderLayer, minilm::minilm::MiniLm, mlp::mlp::Mlp,
};
use fuse_runtime::{Error, Tensor};
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

/// An empty batch returns empty outputs, as in PyTorch, and so does an empty sequence where nothing sums over it
/// (self-attention over no positions is no positions); MiniLM's mean pooling over `seq` would make its
/// embeddings out of nothing, so `seq` 0 is `Error::ZeroDim` there unless the batch is empty too (an empty batch
/// padded to its longest sentence), while its empty batch is `[0, 384]`.
#[test]
fn example_models_at_a_dim_of_zero() {
    let encoder = EncoderLayer::random(7);
    for (batch, seq) in [(0, 5), (2, 0)] {
        let x = Tensor::randn(&[batch, seq, 384], 3);
        let mask = Tensor::from_f32(&[batch, seq], vec![1.0; batch * seq]).unwrap();
        let want = reference(
            EncoderLayer::spec(),
            encoder.weights().expect("f32 weights"),
            &[&x, &mask],
        );
        for got in [encoder.forward(&x, &mask), encoder.forward_eager(&x, &mask)] {
            let got = got.unwrap_or_else(|e| panic!("encoder at {batch}x{seq}: {e}"));
            assert_eq!(got.shape(), [batch, seq, 384]);
            assert_close("encoder", &got, &want[0], 0.0, 0.0);
        }
    }
    let mlp = Mlp::random(3);
    assert_eq!(
        mlp.forward(&Tensor::zeros(&[0, 1024])).unwrap().shape(),
        [0, 1024]
    );

    let minilm = MiniLm::random(5);
    let call = |batch: usize, seq: usize| {
        let ids = Tensor::from_i64(&[batch, seq], vec![1; batch * seq]).unwrap();
        let mask = Tensor::from_f32(&[batch, seq], vec![1.0; batch * seq]).unwrap();
        minilm.forward(&ids, &ids, &mask)
    };
    assert_eq!(call(0, 7).unwrap().shape(), [0, 384]);
    assert_eq!(call(2, 7).unwrap().shape(), [2, 384]);
    assert_eq!(call(0, 0).unwrap().shape(), [0, 384]);
    // The positions are the table's first `seq` rows: one past its 512 is refused, not read past.
    assert_eq!(call(1, 512).unwrap().shape(), [1, 384]);
    match call(1, 513) {
        Err(e @ Error::NarrowOutOfRange { .. }) => assert_eq!(
            e.to_string(),
            "narrow of axis 0 of embeddings.position_embeddings.weight [512, 384]: start 0 + length 513 > 512"
        ),
        other => panic!("MiniLM at seq 513: {other:?}"),
    }
    match call(2, 0) {
        Err(Error::ZeroDim { dim, unless }) => {
            assert_eq!(
                (dim.as_str(), unless),
                ("seq", vec![vec!["batch".to_string()]])
            )
        }
        other => panic!("MiniLM at seq 0: {other:?}"),
    }
}
