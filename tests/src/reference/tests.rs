//! Tests of the reference: hand-computed cases for every op (`ops`), and the input and shape checks (`inputs`).

use fuse_kernels::ir::{
    BinaryOp, DType, Dim, Graph, InputInfo, Node, NodeId, Op, ParamInfo, ReduceOp, Shape,
    TensorType, UnaryOp,
};
use proc_macro2::Span;

use super::{interpret, interpret_all, RefError, RefTensor};

fn ty(dtype: DType, dims: Vec<Dim>) -> TensorType {
    TensorType {
        dtype,
        shape: Shape(dims),
    }
}

fn fixed(dims: &[usize]) -> Vec<Dim> {
    dims.iter().map(|&d| Dim::fixed(d)).collect()
}

fn input(g: &mut Graph, ty: TensorType) -> NodeId {
    let i = g.inputs.len();
    g.inputs.push(InputInfo {
        name: format!("x{i}"),
        ty: ty.clone(),
        binds: None,
    });
    g.push(
        Node {
            op: Op::Input(i as u32),
            ty,
        },
        Span::call_site(),
    )
}

fn f32_input(g: &mut Graph, dims: &[usize]) -> NodeId {
    input(g, ty(DType::F32, fixed(dims)))
}

fn param(g: &mut Graph, dims: &[usize]) -> NodeId {
    let i = g.params.len();
    let ty = ty(DType::F32, fixed(dims));
    g.params.push(ParamInfo {
        name: format!("p{i}"),
        ty: ty.clone(),
    });
    g.push(
        Node {
            op: Op::Param(i as u32),
            ty,
        },
        Span::call_site(),
    )
}

fn add(g: &mut Graph, op: Op) -> NodeId {
    g.add(op, Span::call_site()).expect("well-typed op")
}

fn t(shape: &[usize], data: &[f64]) -> RefTensor {
    RefTensor::new(shape.to_vec(), data.to_vec())
}

fn arange(shape: &[usize]) -> RefTensor {
    let n: usize = shape.iter().product();
    t(shape, &(0..n).map(|i| i as f64).collect::<Vec<_>>())
}

/// Runs `g` with `out` as its only output.
fn run(g: &mut Graph, out: NodeId, inputs: &[RefTensor], params: &[RefTensor]) -> RefTensor {
    g.outputs = vec![out];
    interpret(g, inputs, params).unwrap().remove(0)
}

#[track_caller]
fn assert_close(got: &RefTensor, shape: &[usize], want: &[f64]) {
    assert_eq!(got.shape, shape, "shape");
    assert_eq!(got.data.len(), want.len(), "length");
    for (i, (g, w)) in got.data.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-12 * w.abs().max(1.0),
            "element {i}: got {g}, want {w}"
        );
    }
}

mod inputs;
mod ops;
