//! Binding dynamic dims, and the checks on inputs, params and node shapes.

use super::*;

/// `x: [batch, 3]`, `y: [batch, 1]` → `x + y`, `reshape(x, [3*batch])`, `x.sum(0)`.
fn dynamic_graph() -> Graph {
    let mut g = Graph::new();
    let b = g.dyn_dim("batch");
    let x = input(&mut g, ty(DType::F32, vec![Dim::symbol(b), Dim::fixed(3)]));
    let y = input(&mut g, ty(DType::F32, vec![Dim::symbol(b), Dim::fixed(1)]));
    let s = add(&mut g, Op::Binary(BinaryOp::Add, x, y));
    let flat = Shape(vec![Dim::symbol(b).mul(&Dim::fixed(3))]);
    let r = add(
        &mut g,
        Op::Reshape {
            input: x,
            shape: flat,
        },
    );
    let m = add(
        &mut g,
        Op::Reduce {
            op: ReduceOp::Sum,
            input: x,
            axis: 0,
            keepdim: false,
        },
    );
    g.outputs = vec![s, r, m];
    g
}

#[test]
fn dynamic_dims_bind_and_check() {
    let g = dynamic_graph();
    let out = interpret(&g, &[arange(&[2, 3]), t(&[2, 1], &[10.0, 20.0])], &[]).unwrap();
    assert_close(&out[0], &[2, 3], &[10.0, 11.0, 12.0, 23.0, 24.0, 25.0]);
    assert_close(&out[1], &[6], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_close(&out[2], &[3], &[3.0, 5.0, 7.0]);
    let out = interpret(&g, &[arange(&[1, 3]), t(&[1, 1], &[1.0])], &[]).unwrap();
    assert_close(&out[0], &[1, 3], &[1.0, 2.0, 3.0]);
    assert_eq!(
        interpret_all(&g, &[arange(&[1, 3]), arange(&[1, 1])], &[])
            .unwrap()
            .len(),
        5
    );

    let err = interpret(&g, &[arange(&[2, 3]), arange(&[4, 1])], &[]).unwrap_err();
    assert!(
        matches!(&err, RefError::DimConflict { name, first: 2, second: 4, input: 1 } if name == "batch"),
        "{err}"
    );
    let err = interpret(&g, &[arange(&[2, 4]), arange(&[2, 1])], &[]).unwrap_err();
    assert!(
        matches!(err, RefError::InputShape { index: 0, .. }),
        "{err}"
    );
    let err = interpret(&g, &[arange(&[2, 3, 1]), arange(&[2, 1])], &[]).unwrap_err();
    assert!(
        matches!(err, RefError::InputShape { index: 0, .. }),
        "{err}"
    );
    let err = interpret(&g, &[arange(&[2, 3])], &[]).unwrap_err();
    assert!(
        matches!(
            err,
            RefError::Count {
                what: "input",
                expected: 2,
                got: 1
            }
        ),
        "{err}"
    );
    let bad = RefTensor {
        shape: vec![2, 1],
        data: vec![1.0],
    };
    let err = interpret(&g, &[arange(&[2, 3]), bad], &[]).unwrap_err();
    assert!(
        matches!(
            err,
            RefError::BadTensor {
                index: 1,
                len: 1,
                numel: 2,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn compound_dynamic_dims() {
    // `a: [2*batch]` binds batch = 3 from 6 and rejects 5; `b: [batch*seq]` is solved once `c: [seq]` binds seq.
    let mut g = Graph::new();
    let (batch, seq) = (g.dyn_dim("batch"), g.dyn_dim("seq"));
    let a = input(
        &mut g,
        ty(DType::F32, vec![Dim::fixed(2).mul(&Dim::symbol(batch))]),
    );
    let b = input(
        &mut g,
        ty(DType::F32, vec![Dim::symbol(batch).mul(&Dim::symbol(seq))]),
    );
    let c = input(&mut g, ty(DType::F32, vec![Dim::symbol(seq)]));
    g.outputs = vec![a, b, c];
    let out = interpret(&g, &[arange(&[6]), arange(&[12]), arange(&[4])], &[]).unwrap();
    assert_eq!(out[1].shape, vec![12]);
    let err = interpret(&g, &[arange(&[5]), arange(&[12]), arange(&[4])], &[]).unwrap_err();
    assert!(
        matches!(err, RefError::InputShape { index: 0, .. }),
        "{err}"
    );
    let err = interpret(&g, &[arange(&[6]), arange(&[10]), arange(&[4])], &[]).unwrap_err();
    assert!(
        matches!(err, RefError::InputShape { index: 1, .. }),
        "{err}"
    );
    // Without `c`, `seq` cannot be determined.
    let mut g = Graph::new();
    let (batch, seq) = (g.dyn_dim("batch"), g.dyn_dim("seq"));
    let b = input(
        &mut g,
        ty(DType::F32, vec![Dim::symbol(batch).mul(&Dim::symbol(seq))]),
    );
    g.outputs = vec![b];
    let err = interpret(&g, &[arange(&[12])], &[]).unwrap_err();
    assert!(matches!(err, RefError::UnboundDim { .. }), "{err}");
}

#[test]
fn param_and_node_shape_checks() {
    let mut g = Graph::new();
    let x = f32_input(&mut g, &[3]);
    let p = param(&mut g, &[3]);
    let y = add(&mut g, Op::Binary(BinaryOp::Add, x, p));
    g.outputs = vec![y];
    let err = interpret(&g, &[arange(&[3])], &[arange(&[4])]).unwrap_err();
    assert!(
        matches!(err, RefError::ParamShape { index: 0, .. }),
        "{err}"
    );
    let err = interpret(&g, &[arange(&[3])], &[]).unwrap_err();
    assert!(
        matches!(err, RefError::Count { what: "param", .. }),
        "{err}"
    );
    // A node pushed with a wrong type is caught by the shape check.
    let bad = g.push(
        Node {
            op: Op::Binary(BinaryOp::Add, x, x),
            ty: ty(DType::F32, fixed(&[5])),
        },
        Span::call_site(),
    );
    g.outputs = vec![bad];
    let err = interpret(&g, &[arange(&[3])], &[arange(&[3])]).unwrap_err();
    assert!(
        matches!(&err, RefError::NodeShape { expected, got, .. } if *expected == [5] && *got == [3]),
        "{err}"
    );
}
