//! Ids are checked against every embedding table they index, before any kernel runs: one ids input feeding a
//! large and a small table is bounded by the small one, whichever call comes first in `forward`.

use fuse_runtime::{fused_model, Error, Tensor};

#[fused_model]
pub mod two_tables {
    pub struct BigFirst {
        #[shape(1000, 8)]
        big: Tensor,
        #[shape(10, 8)]
        small: Tensor,
    }
    impl BigFirst {
        pub fn forward(&self, #[shape(n)] ids: Tensor<i64>) -> Tensor {
            embedding(&self.big, &ids) + embedding(&self.small, &ids)
        }
    }

    pub struct SmallFirst {
        #[shape(1000, 8)]
        big: Tensor,
        #[shape(10, 8)]
        small: Tensor,
    }
    impl SmallFirst {
        pub fn forward(&self, #[shape(n)] ids: Tensor<i64>) -> Tensor {
            embedding(&self.small, &ids) + embedding(&self.big, &ids)
        }
    }
}

use two_tables::{BigFirst, SmallFirst};

/// `big[id] + small[id]` for each id, from the model's own weights (an independent gather on the host).
fn expected(big: &Tensor, small: &Tensor, ids: &[i64]) -> Vec<f32> {
    let (b, s) = (big.as_f32().unwrap(), small.as_f32().unwrap());
    ids.iter()
        .flat_map(|&i| {
            let r = i as usize * 8;
            (0..8).map(move |c| b[r + c] + s[r + c])
        })
        .collect()
}

fn assert_refused(result: fuse_runtime::Result<Tensor>, id: i64) {
    match result {
        Err(Error::IdOutOfRange {
            input,
            id: found,
            vocab,
            table,
        }) => {
            assert_eq!((input.as_str(), found, vocab), ("ids", id, 10));
            assert_eq!(table, "small");
        }
        other => panic!("expected IdOutOfRange on table `small`, got {other:?}"),
    }
}

#[test]
fn ids_are_bounded_by_the_smallest_table_in_either_call_order() {
    let big_first = BigFirst::random(3);
    let small_first = SmallFirst::random(3);
    let bad = Tensor::from_i64(&[3], vec![5, 50, 999]).unwrap();
    assert_refused(big_first.forward(&bad), 50);
    assert_refused(small_first.forward(&bad), 50);
    assert_refused(big_first.forward_eager(&bad), 50);
    let negative = Tensor::from_i64(&[2], vec![1, -1]).unwrap();
    assert_refused(big_first.forward(&negative), -1);

    let message = big_first.forward(&bad).unwrap_err().to_string();
    assert!(
        message.contains("`small`") && message.contains("10 rows"),
        "{message}"
    );

    // Ids valid for both tables still run, and give big[id] + small[id].
    let ids = vec![0, 9, 3, 9];
    let good = Tensor::from_i64(&[4], ids.clone()).unwrap();
    for (model_out, weights) in [
        (
            big_first.forward(&good).unwrap(),
            big_first.compiled().weights().expect("f32 weights"),
        ),
        (
            small_first.forward(&good).unwrap(),
            small_first.compiled().weights().expect("f32 weights"),
        ),
    ] {
        // Weights are in declaration order: big, then small.
        let want = expected(&weights[0], &weights[1], &ids);
        let got = model_out.as_f32().unwrap();
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-6 * (1.0 + w.abs()), "{g} vs {w}");
        }
    }
}
