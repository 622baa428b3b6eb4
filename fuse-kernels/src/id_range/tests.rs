//! Ranges of ids made in a model, captured from source as a user writes them.

use super::{of, IdRange};
use crate::ir::Dim;

/// The range of `forward`'s returned value, over `ids` `[b, s]` (i64) and `x` `[b, s]` (f32); `None` when it is
/// not bounded.
fn range(body: &str) -> Option<IdRange> {
    let source = format!(
        "#[fused_model] mod m {{ pub struct M {{}} impl M {{ pub fn forward(&self, #[shape(b, s)] ids: \
         Tensor<i64>, #[shape(b, s)] x: Tensor) -> Tensor {{ {body} }} }} }}"
    );
    let capture = crate::front::capture_str(&source).unwrap_or_else(|e| panic!("{e}"));
    assert!(capture.errors.is_none(), "{body}: does not capture");
    let g = &capture.models[0].graph;
    of(g, g.outputs[0])
}

/// `coeff · seq` (`seq` is the second dim the capture names).
fn seq_dim(coeff: usize) -> Dim {
    Dim {
        coeff,
        syms: vec![1],
    }
}

fn seq(coeff: usize) -> Option<Dim> {
    Some(seq_dim(coeff))
}

#[test]
fn robertas_positions_run_from_one_to_seq_plus_one() {
    let tokens = "let t = ids.to_f32().ne(1.0).to_f32();";
    let want = IdRange {
        lo: 1,
        c: 1,
        m: seq(1),
    };
    assert_eq!(
        range(&format!("{tokens} t.cumsum(1) * t + 1.0")),
        Some(want.clone())
    );
    assert_eq!(want.as_rows(), Some((Dim::fixed(2), seq_dim(1))));
    // Twice the count, less a constant; a mask's constant bound folds into the constant.
    assert_eq!(
        range(&format!("{tokens} (t.cumsum(1) * 2.0 + 3.0 - 3.0).floor()")),
        Some(IdRange {
            lo: 0,
            c: 0,
            m: seq(2)
        })
    );
    assert_eq!(
        range(&format!("{tokens} where_(t.gt(0.0), t * 5.0, t + 2.0)")),
        Some(IdRange {
            lo: 0,
            c: 5,
            m: None
        })
    );
    // Positions from an arange, offset.
    assert_eq!(
        range("arange(0, x.dim(1)).to_f32().reshape([1, x.dim(1)]) + 2.0"),
        Some(IdRange {
            lo: 2,
            c: 1,
            m: seq(1)
        })
    );
}

/// `clamp` (`min(max(x, lo), hi)`) of bounded ids: a constant upper bound, whatever `seq`.
#[test]
fn clamped_ids_have_the_clamps_bounds() {
    let positions = "let t = ids.to_f32().ne(1.0).to_f32(); let p = t.cumsum(1) * t + 1.0;";
    assert_eq!(
        range(&format!("{positions} p.clamp(0.0, 511.0)")),
        Some(IdRange {
            lo: 1,
            c: 511,
            m: None
        })
    );
    assert_eq!(
        range(&format!("{positions} p.max(3.0)")),
        Some(IdRange {
            lo: 3,
            c: 3,
            m: seq(1)
        })
    );
    // Two counts: the smaller constant part of the same monomial; of different ones, either bound holds.
    assert_eq!(
        range(&format!("{positions} p.min(&(t.cumsum(1) + 4.0))")),
        Some(IdRange {
            lo: 1,
            c: 1,
            m: seq(1)
        })
    );
    assert_eq!(
        range(&format!("{positions} p.max(&(t.cumsum(1) * 2.0))")),
        None
    );
}

#[test]
fn values_without_a_provable_range_are_not_bounded() {
    for body in [
        "x",
        "x.relu()",
        "ids.to_f32()",
        "x.gt(0.0).to_f32() * x",
        "x.gt(0.0).to_f32() * 0.5",
        "x.gt(0.0).to_f32() - x",
        "x.gt(0.0).to_f32() / 2.0",
        "x.gt(0.0).to_f32().cumsum(1) * x.gt(0.0).to_f32().cumsum(1)",
        "x.gt(0.0).to_f32().exp()",
        // A clamp does not bound what may be NaN.
        "x.clamp(0.0, 10.0).trunc()",
        "x.max(0.0).min(10.0)",
    ] {
        assert_eq!(range(body), None, "{body}");
    }
}

/// `argmax` and `argmin` give positions along their axis, `0..=s - 1`; so does the least of bounded ids along an
/// axis (`min(axis, ..)`), while the least of a value that is not bounded stays unbounded.
#[test]
fn first_extremes_lie_along_their_axis() {
    let along_seq = Some(IdRange {
        lo: 0,
        c: -1,
        m: seq(1),
    });
    assert_eq!(range("x.argmax(1, false)"), along_seq);
    assert_eq!(range("x.argmin(-1, true)"), along_seq);
    let along_batch = Dim {
        coeff: 1,
        syms: vec![0],
    };
    assert_eq!(
        range("x.argmax(0, false)"),
        Some(IdRange {
            lo: 0,
            c: -1,
            m: Some(along_batch)
        })
    );
    let tokens = "let t = ids.to_f32().ne(1.0).to_f32();";
    assert_eq!(
        range(&format!("{tokens} (t.cumsum(1) * t + 1.0).min(1, true)")),
        Some(IdRange {
            lo: 1,
            c: 1,
            m: seq(1)
        })
    );
    assert_eq!(range("x.min(1, true)"), None);
    assert_eq!(range("x.max(1, true)"), None);
}

/// A concat holds its inputs' values: bounded when one upper bound holds them all.
#[test]
fn concats_hold_their_inputs_ranges() {
    assert_eq!(
        range("concat([x.argmax(1, true), x.argmin(1, true) + 2.0], 1)"),
        Some(IdRange {
            lo: 0,
            c: 1,
            m: seq(1)
        })
    );
    assert_eq!(range("concat([x.argmax(1, true), x], 1)"), None);
    assert_eq!(
        range("concat([x.argmax(1, true), x.argmax(0, true).reshape([1, x.dim(1)])], 0)"),
        None
    );
}
