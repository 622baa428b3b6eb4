//! Hand-computed cases for every op.

use super::*;

#[test]
fn unary_ops() {
    let cases: [(UnaryOp, [f64; 4]); 13] = [
        (UnaryOp::Neg, [1.0, 0.0, -0.5, -2.0]),
        (UnaryOp::Abs, [1.0, 0.0, 0.5, 2.0]),
        (
            UnaryOp::Exp,
            [
                0.36787944117144233,
                1.0,
                1.6487212707001282,
                7.38905609893065,
            ],
        ),
        (
            UnaryOp::Tanh,
            [
                -0.7615941559557649,
                0.0,
                0.46211715726000974,
                0.9640275800758169,
            ],
        ),
        (
            UnaryOp::Sigmoid,
            [
                0.2689414213699951,
                0.5,
                0.6224593312018546,
                0.8807970779778823,
            ],
        ),
        (UnaryOp::Relu, [0.0, 0.0, 0.5, 2.0]),
        (
            UnaryOp::Sin,
            [
                -0.8414709848078965,
                0.0,
                0.479425538604203,
                0.9092974268256817,
            ],
        ),
        (
            UnaryOp::Cos,
            [
                0.5403023058681398,
                1.0,
                0.8775825618903728,
                -0.4161468365471424,
            ],
        ),
        (
            UnaryOp::Gelu,
            [
                -0.15865525393145707,
                0.0,
                0.34573123063700656,
                1.9544997361036416,
            ],
        ),
        (
            UnaryOp::GeluTanh,
            [
                -0.15880800939172324,
                0.0,
                0.34571400982514394,
                1.954597694087775,
            ],
        ),
        (
            UnaryOp::Silu,
            [
                -0.2689414213699951,
                0.0,
                0.3112296656009273,
                1.7615941559557646,
            ],
        ),
        (
            UnaryOp::Erf,
            [
                -0.8427007929497149,
                0.0,
                0.5204998778130465,
                0.9953222650189527,
            ],
        ),
        (
            UnaryOp::Log,
            [
                f64::NAN,
                f64::NEG_INFINITY,
                -std::f64::consts::LN_2,
                std::f64::consts::LN_2,
            ],
        ),
    ];
    for (op, want) in cases {
        let mut g = Graph::new();
        let x = f32_input(&mut g, &[4]);
        let y = add(&mut g, Op::Unary(op, x));
        let got = run(&mut g, y, &[t(&[4], &[-1.0, 0.0, 0.5, 2.0])], &[]);
        if op == UnaryOp::Log {
            assert!(got.data[0].is_nan() && got.data[1] == f64::NEG_INFINITY);
            assert_close(&t(&[2], &got.data[2..]), &[2], &want[2..]);
        } else {
            assert_close(&got, &[4], &want);
        }
    }
    for (op, want) in [
        (UnaryOp::Sqrt, [2.0, std::f64::consts::SQRT_2, 0.5]),
        (UnaryOp::Rsqrt, [0.5, std::f64::consts::FRAC_1_SQRT_2, 2.0]),
    ] {
        let mut g = Graph::new();
        let x = f32_input(&mut g, &[3]);
        let y = add(&mut g, Op::Unary(op, x));
        assert_close(
            &run(&mut g, y, &[t(&[3], &[4.0, 2.0, 0.25])], &[]),
            &[3],
            &want,
        );
    }
}

/// Rounding: `round`'s ties go to even, `trunc` toward zero.
#[test]
fn rounding_ops() {
    let x = [-1.5, -0.5, 0.5, 2.5, -2.25];
    for (op, want) in [
        (UnaryOp::Floor, [-2.0, -1.0, 0.0, 2.0, -3.0]),
        (UnaryOp::Ceil, [-1.0, 0.0, 1.0, 3.0, -2.0]),
        (UnaryOp::Round, [-2.0, 0.0, 0.0, 2.0, -2.0]),
        (UnaryOp::Trunc, [-1.0, 0.0, 0.0, 2.0, -2.0]),
    ] {
        let mut g = Graph::new();
        let input = f32_input(&mut g, &[5]);
        let y = add(&mut g, Op::Unary(op, input));
        assert_close(&run(&mut g, y, &[t(&[5], &x)], &[]), &[5], &want);
    }
}

fn binary(op: BinaryOp, a: RefTensor, b: RefTensor) -> RefTensor {
    let mut g = Graph::new();
    let x = f32_input(&mut g, &a.shape);
    let y = f32_input(&mut g, &b.shape);
    let z = add(&mut g, Op::Binary(op, x, y));
    run(&mut g, z, &[a, b], &[])
}

#[test]
fn binary_ops_and_comparisons() {
    let a = || t(&[3], &[1.0, 2.0, 3.0]);
    let b = || t(&[3], &[2.0, 2.0, 2.0]);
    for (op, want) in [
        (BinaryOp::Add, [3.0, 4.0, 5.0]),
        (BinaryOp::Sub, [-1.0, 0.0, 1.0]),
        (BinaryOp::Mul, [2.0, 4.0, 6.0]),
        (BinaryOp::Div, [0.5, 1.0, 1.5]),
        (BinaryOp::Max, [2.0, 2.0, 3.0]),
        (BinaryOp::Min, [1.0, 2.0, 2.0]),
        (BinaryOp::Pow, [1.0, 4.0, 9.0]),
        (BinaryOp::Lt, [1.0, 0.0, 0.0]),
        (BinaryOp::Le, [1.0, 1.0, 0.0]),
        (BinaryOp::Gt, [0.0, 0.0, 1.0]),
        (BinaryOp::Ge, [0.0, 1.0, 1.0]),
        (BinaryOp::Eq, [0.0, 1.0, 0.0]),
        (BinaryOp::Ne, [1.0, 0.0, 1.0]),
    ] {
        assert_close(&binary(op, a(), b()), &[3], &want);
    }
}

#[test]
fn broadcasting() {
    let row = t(&[3], &[1.0, 2.0, 3.0]);
    let m = t(&[2, 3], &[10.0, 20.0, 30.0, 40.0, 50.0, 60.0]);
    let want = [11.0, 22.0, 33.0, 41.0, 52.0, 63.0];
    assert_close(
        &binary(BinaryOp::Add, row.clone(), m.clone()),
        &[2, 3],
        &want,
    );
    assert_close(&binary(BinaryOp::Add, m, row), &[2, 3], &want);
    let col = t(&[2, 1], &[1.0, 2.0]);
    let row = t(&[1, 3], &[1.0, 10.0, 100.0]);
    let want = [1.0, 10.0, 100.0, 2.0, 20.0, 200.0];
    assert_close(&binary(BinaryOp::Mul, col, row), &[2, 3], &want);
    // A scalar constant broadcasts everywhere: x.pow(2.0) - 1.0.
    let mut g = Graph::new();
    let x = f32_input(&mut g, &[2, 2]);
    let two = add(&mut g, Op::Scalar(2.0));
    let one = add(&mut g, Op::Scalar(1.0));
    let sq = add(&mut g, Op::Binary(BinaryOp::Pow, x, two));
    let y = add(&mut g, Op::Binary(BinaryOp::Sub, sq, one));
    let got = run(&mut g, y, &[t(&[2, 2], &[1.0, 2.0, 3.0, -4.0])], &[]);
    assert_close(&got, &[2, 2], &[0.0, 3.0, 8.0, 15.0]);
}

#[test]
fn where_and_cast() {
    // where_(x.gt(0), x, 0.5)
    let mut g = Graph::new();
    let x = f32_input(&mut g, &[2, 2]);
    let zero = add(&mut g, Op::Scalar(0.0));
    let half = add(&mut g, Op::Scalar(0.5));
    let m = add(&mut g, Op::Binary(BinaryOp::Gt, x, zero));
    let y = add(&mut g, Op::Where(m, x, half));
    let got = run(&mut g, y, &[t(&[2, 2], &[-1.0, 2.0, 3.0, -4.0])], &[]);
    assert_close(&got, &[2, 2], &[0.5, 2.0, 3.0, 0.5]);
    // A bool input mask [2, 1] against a [3] and a [2, 3]; the mask also cast to f32.
    let mut g = Graph::new();
    let m = input(&mut g, ty(DType::Bool, fixed(&[2, 1])));
    let a = f32_input(&mut g, &[3]);
    let b = f32_input(&mut g, &[2, 3]);
    let y = add(&mut g, Op::Where(m, a, b));
    let c = add(&mut g, Op::Cast(m, DType::F32));
    g.outputs = vec![y, c];
    let ins = [
        t(&[2, 1], &[1.0, 0.0]),
        t(&[3], &[1.0, 2.0, 3.0]),
        t(&[2, 3], &[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0]),
    ];
    let out = interpret(&g, &ins, &[]).unwrap();
    assert_close(&out[0], &[2, 3], &[1.0, 2.0, 3.0, -4.0, -5.0, -6.0]);
    assert_close(&out[1], &[2, 1], &[1.0, 0.0]);
}

type ReduceCase = (ReduceOp, usize, bool, &'static [usize], &'static [f64]);

#[test]
fn reductions() {
    let x = || t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let cases: [ReduceCase; 6] = [
        (ReduceOp::Sum, 0, false, &[3], &[5.0, 7.0, 9.0]),
        (ReduceOp::Sum, 0, true, &[1, 3], &[5.0, 7.0, 9.0]),
        (ReduceOp::Sum, 1, false, &[2], &[6.0, 15.0]),
        (ReduceOp::Mean, 1, true, &[2, 1], &[2.0, 5.0]),
        (ReduceOp::Max, 0, false, &[3], &[4.0, 5.0, 6.0]),
        (ReduceOp::Max, 1, true, &[2, 1], &[3.0, 6.0]),
    ];
    for (op, axis, keepdim, shape, want) in cases {
        let mut g = Graph::new();
        let i = f32_input(&mut g, &[2, 3]);
        let r = add(
            &mut g,
            Op::Reduce {
                op,
                input: i,
                axis,
                keepdim,
            },
        );
        assert_close(&run(&mut g, r, &[x()], &[]), shape, want);
    }
    // The middle axis of a [2, 2, 2] arange.
    let mut g = Graph::new();
    let i = f32_input(&mut g, &[2, 2, 2]);
    let r = add(
        &mut g,
        Op::Reduce {
            op: ReduceOp::Sum,
            input: i,
            axis: 1,
            keepdim: false,
        },
    );
    assert_close(
        &run(&mut g, r, &[arange(&[2, 2, 2])], &[]),
        &[2, 2],
        &[2.0, 4.0, 10.0, 12.0],
    );
}

#[test]
fn softmax() {
    let mut g = Graph::new();
    let i = f32_input(&mut g, &[3]);
    let s = add(&mut g, Op::Softmax { input: i, axis: 0 });
    let got = run(&mut g, s, &[t(&[3], &[1.0, 2.0, 3.0])], &[]);
    assert_close(
        &got,
        &[3],
        &[0.09003057317038046, 0.24472847105479764, 0.6652409557748218],
    );
    // Along axis 0 of [[1000, 1], [1000, 3]]: columns [0.5, 0.5] and [1/(1+e²), e²/(1+e²)]; large values stay finite.
    let mut g = Graph::new();
    let i = f32_input(&mut g, &[2, 2]);
    let s = add(&mut g, Op::Softmax { input: i, axis: 0 });
    let got = run(&mut g, s, &[t(&[2, 2], &[1000.0, 1.0, 1000.0, 3.0])], &[]);
    let want = [0.5, 0.11920292202211757, 0.5, 0.8807970779778823];
    assert_close(&got, &[2, 2], &want);
}

/// Running sums along either axis of [[1, 2, 3], [4, 5, 6]].
#[test]
fn cumsum() {
    let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
    for (axis, want) in [
        (1, [1.0, 3.0, 6.0, 4.0, 9.0, 15.0]),
        (0, [1.0, 2.0, 3.0, 5.0, 7.0, 9.0]),
    ] {
        let mut g = Graph::new();
        let i = f32_input(&mut g, &[2, 3]);
        let s = add(&mut g, Op::Cumsum { input: i, axis });
        assert_close(&run(&mut g, s, &[t(&[2, 3], &x)], &[]), &[2, 3], &want);
    }
}

#[test]
fn norms() {
    // Row 1: mean 2.5, var 1.25, + eps 0.75 = 2 → [-1.5, -0.5, 0.5, 1.5]/√2. Row 2 is constant → beta.
    let mut g = Graph::new();
    let x = f32_input(&mut g, &[2, 4]);
    let gamma = param(&mut g, &[4]);
    let beta = param(&mut g, &[4]);
    let eps = 0.75;
    let y = add(
        &mut g,
        Op::LayerNorm {
            input: x,
            gamma,
            beta,
            eps,
        },
    );
    let xs = t(&[2, 4], &[1.0, 2.0, 3.0, 4.0, 2.0, 2.0, 2.0, 2.0]);
    let ps = [
        t(&[4], &[1.0, 2.0, 1.0, 0.5]),
        t(&[4], &[0.0, 0.0, 1.0, -1.0]),
    ];
    let got = run(&mut g, y, &[xs], &ps);
    let want = [
        -1.0606601717798212,
        -0.7071067811865475,
        1.3535533905932737,
        -0.4696699141100894,
        0.0,
        0.0,
        1.0,
        -1.0,
    ];
    assert_close(&got, &[2, 4], &want);
    // mean(x²) = 7.5, + eps 0.5 = 8 → x/(2√2) * gamma.
    let mut g = Graph::new();
    let x = f32_input(&mut g, &[1, 4]);
    let gamma = param(&mut g, &[4]);
    let y = add(
        &mut g,
        Op::RmsNorm {
            input: x,
            gamma,
            eps: 0.5,
        },
    );
    let got = run(
        &mut g,
        y,
        &[t(&[1, 4], &[1.0, 2.0, 3.0, 4.0])],
        &[t(&[4], &[1.0, 1.0, 2.0, 0.5])],
    );
    let want = [
        0.35355339059327373,
        0.7071067811865475,
        2.1213203435596424,
        0.7071067811865475,
    ];
    assert_close(&got, &[1, 4], &want);
}

fn matmul(a: RefTensor, b: RefTensor) -> RefTensor {
    let mut g = Graph::new();
    let x = f32_input(&mut g, &a.shape);
    let y = f32_input(&mut g, &b.shape);
    let z = add(&mut g, Op::MatMul(x, y));
    run(&mut g, z, &[a, b], &[])
}

#[test]
fn matmuls() {
    let a = t(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = t(&[3, 2], &[7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
    assert_close(&matmul(a, b), &[2, 2], &[58.0, 64.0, 139.0, 154.0]);
    // [2, 2, 2] × [2, 2]: the rank-2 operand is shared by both batch entries.
    let a = t(&[2, 2, 2], &[1.0, 0.0, 0.0, 1.0, 1.0, 2.0, 3.0, 4.0]);
    let b = t(&[2, 2], &[5.0, 6.0, 7.0, 8.0]);
    let want = [5.0, 6.0, 7.0, 8.0, 19.0, 22.0, 43.0, 50.0];
    assert_close(&matmul(a, b), &[2, 2, 2], &want);
    // [2, 1, 1, 2] × [3, 2, 1] → [2, 3, 1, 1]: every row [1,2], [3,4] dotted with every column [1,0], [0,1], [1,1].
    let a = t(&[2, 1, 1, 2], &[1.0, 2.0, 3.0, 4.0]);
    let b = t(&[3, 2, 1], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    assert_close(
        &matmul(a, b),
        &[2, 3, 1, 1],
        &[1.0, 2.0, 3.0, 3.0, 4.0, 7.0],
    );
}

#[test]
fn views() {
    let mut g = Graph::new();
    let x = f32_input(&mut g, &[2, 3]);
    let p = add(
        &mut g,
        Op::Permute {
            input: x,
            perm: vec![1, 0],
        },
    );
    let r = add(
        &mut g,
        Op::Reshape {
            input: x,
            shape: Shape(fixed(&[3, 2])),
        },
    );
    let s = add(
        &mut g,
        Op::Slice {
            input: x,
            axis: 1,
            start: Dim::fixed(1),
            len: Dim::fixed(2),
        },
    );
    g.outputs = vec![p, r, s];
    let out = interpret(&g, &[arange(&[2, 3])], &[]).unwrap();
    assert_close(&out[0], &[3, 2], &[0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    assert_close(&out[1], &[3, 2], &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_close(&out[2], &[2, 2], &[1.0, 2.0, 4.0, 5.0]);
    // out[i, j, k] = x[j, k, i] = 12j + 4k + i.
    let mut g = Graph::new();
    let x = f32_input(&mut g, &[2, 3, 4]);
    let p = add(
        &mut g,
        Op::Permute {
            input: x,
            perm: vec![2, 0, 1],
        },
    );
    let want = [
        0.0, 4.0, 8.0, 12.0, 16.0, 20.0, 1.0, 5.0, 9.0, 13.0, 17.0, 21.0, 2.0, 6.0, 10.0, 14.0,
        18.0, 22.0, 3.0, 7.0, 11.0, 15.0, 19.0, 23.0,
    ];
    assert_close(
        &run(&mut g, p, &[arange(&[2, 3, 4])], &[]),
        &[4, 2, 3],
        &want,
    );
    // The middle axis of a [2, 3, 2].
    let mut g = Graph::new();
    let x = f32_input(&mut g, &[2, 3, 2]);
    let s = add(
        &mut g,
        Op::Slice {
            input: x,
            axis: 1,
            start: Dim::fixed(2),
            len: Dim::fixed(1),
        },
    );
    assert_close(
        &run(&mut g, s, &[arange(&[2, 3, 2])], &[]),
        &[2, 1, 2],
        &[4.0, 5.0, 10.0, 11.0],
    );
}

#[test]
fn concats() {
    let mut g = Graph::new();
    let a = f32_input(&mut g, &[2, 1]);
    let b = f32_input(&mut g, &[2, 2]);
    let c = add(
        &mut g,
        Op::Concat {
            inputs: vec![a, b, a],
            axis: 1,
        },
    );
    let ins = [t(&[2, 1], &[10.0, 20.0]), t(&[2, 2], &[1.0, 2.0, 3.0, 4.0])];
    let want = [10.0, 1.0, 2.0, 10.0, 20.0, 3.0, 4.0, 20.0];
    assert_close(&run(&mut g, c, &ins, &[]), &[2, 4], &want);
    let mut g = Graph::new();
    let a = f32_input(&mut g, &[1, 2]);
    let b = f32_input(&mut g, &[2, 2]);
    let c = add(
        &mut g,
        Op::Concat {
            inputs: vec![a, b],
            axis: 0,
        },
    );
    let ins = [t(&[1, 2], &[9.0, 8.0]), t(&[2, 2], &[1.0, 2.0, 3.0, 4.0])];
    assert_close(
        &run(&mut g, c, &ins, &[]),
        &[3, 2],
        &[9.0, 8.0, 1.0, 2.0, 3.0, 4.0],
    );
}

fn embedding_graph() -> Graph {
    let mut g = Graph::new();
    let table = param(&mut g, &[3, 2]);
    let ids = input(&mut g, ty(DType::I64, fixed(&[2, 2])));
    let e = add(&mut g, Op::Embedding { table, ids });
    let f = add(&mut g, Op::Cast(ids, DType::F32));
    g.outputs = vec![e, f];
    g
}

#[test]
fn embedding() {
    let g = embedding_graph();
    let table = t(&[3, 2], &[0.0, 1.0, 10.0, 11.0, 20.0, 21.0]);
    let ids = t(&[2, 2], &[2.0, 0.0, 1.0, 1.0]);
    let out = interpret(&g, &[ids], std::slice::from_ref(&table)).unwrap();
    let want = [20.0, 21.0, 0.0, 1.0, 10.0, 11.0, 10.0, 11.0];
    assert_close(&out[0], &[2, 2, 2], &want);
    assert_close(&out[1], &[2, 2], &[2.0, 0.0, 1.0, 1.0]);
    for bad in [3.0, -1.0, 0.5, f64::NAN] {
        let ids = t(&[2, 2], &[0.0, bad, 1.0, 1.0]);
        let err = interpret(&g, &[ids], std::slice::from_ref(&table)).unwrap_err();
        assert!(
            matches!(err, RefError::IdOutOfRange { vocab: 3, id, .. } if id.to_bits() == bad.to_bits()),
            "{err}"
        );
    }
}

/// NaN passes on as in PyTorch through `relu`, `max`, `min` and the max reduction (`f64::max` skips it), and a
/// softmax over a lane of -∞ alone is zeros, as fuse documents.
#[test]
fn nan_passes_on_and_a_masked_lane_is_zeros() {
    use crate::reference::ops;
    let x = RefTensor::new(vec![2, 2], vec![f64::NAN, 1.0, -2.0, 3.0]);
    let y = RefTensor::new(vec![2, 2], vec![0.0, f64::NAN, 5.0, -1.0]);
    let same = |got: &RefTensor, want: &[f64]| {
        assert!(
            got.data
                .iter()
                .zip(want)
                .all(|(g, w)| g == w || (g.is_nan() && w.is_nan())),
            "{:?} against {want:?}",
            got.data
        )
    };
    let nan = f64::NAN;
    same(&ops::unary(UnaryOp::Relu, &x), &[nan, 1.0, 0.0, 3.0]);
    same(
        &ops::binary(BinaryOp::Max, &x, &y).unwrap(),
        &[nan, nan, 5.0, 3.0],
    );
    same(
        &ops::binary(BinaryOp::Min, &x, &y).unwrap(),
        &[nan, nan, -2.0, -1.0],
    );
    same(
        &ops::reduce(ReduceOp::Max, &x, 1, false).unwrap(),
        &[nan, 3.0],
    );
    let masked = RefTensor::new(
        vec![2, 2],
        vec![f64::NEG_INFINITY, f64::NEG_INFINITY, 0.0, 0.0],
    );
    same(&ops::softmax(&masked, 1).unwrap(), &[0.0, 0.0, 0.5, 0.5]);
}
