//! Shape and dtype inference: the type of each op from the types of its operands, or a message that names the
//! shapes involved. Runs inside [`Graph::add`], so every node in a graph is well-typed.

use crate::ir::{DType, Dim, Graph, Op, Shape, TensorType};

/// Why an op cannot be typed. The front end attaches the span of the user's expression.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TypeError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, TypeError> {
    Err(TypeError(msg.into()))
}

/// NumPy broadcasting: align right; equal dims stay, a static 1 stretches. A dynamic dim never stretches
/// implicitly, since its run-time value is not known here.
pub fn broadcast(g: &Graph, a: &Shape, b: &Shape) -> Result<Shape, TypeError> {
    let rank = a.rank().max(b.rank());
    let mut dims = Vec::with_capacity(rank);
    for i in 0..rank {
        let da = (i + a.rank()).checked_sub(rank).map(|j| &a.0[j]);
        let db = (i + b.rank()).checked_sub(rank).map(|j| &b.0[j]);
        let dim = match (da, db) {
            (Some(x), None) | (None, Some(x)) => x.clone(),
            (Some(x), Some(y)) if x == y => x.clone(),
            (Some(x), Some(y)) if x.is_one() => y.clone(),
            (Some(x), Some(y)) if y.is_one() => x.clone(),
            _ => {
                return err(format!(
                    "shapes {} and {} cannot be broadcast together (dim {} differs)",
                    g.fmt_shape(a),
                    g.fmt_shape(b),
                    i
                ))
            }
        };
        dims.push(dim);
    }
    Ok(Shape(dims))
}

fn float_operand(g: &Graph, what: &str, ty: &TensorType) -> Result<(), TypeError> {
    if ty.dtype == DType::I64 {
        return err(format!(
            "{what} needs f32 values but got integer ids ({}); convert with `.to_f32()` first",
            g.fmt_shape(&ty.shape)
        ));
    }
    Ok(())
}

/// The type of `op`, given the types already in `g`.
pub fn infer(g: &Graph, op: &Op) -> Result<TensorType, TypeError> {
    let ty = |id: crate::ir::NodeId| g.ty(id).clone();
    let f32_of = |shape: Shape| TensorType {
        dtype: DType::F32,
        shape,
    };
    match op {
        Op::Input(i) => Ok(g.inputs[*i as usize].ty.clone()),
        Op::Param(i) => Ok(g.params[*i as usize].ty.clone()),
        Op::Scalar(_) => Ok(f32_of(Shape::scalar())),
        Op::Unary(u, a) => {
            let a = ty(*a);
            float_operand(g, u.name(), &a)?;
            Ok(f32_of(a.shape))
        }
        Op::Binary(b, x, y) => {
            let (x, y) = (ty(*x), ty(*y));
            float_operand(g, b.name(), &x)?;
            float_operand(g, b.name(), &y)?;
            let shape = broadcast(g, &x.shape, &y.shape)?;
            let dtype = if b.is_comparison() {
                DType::Bool
            } else {
                DType::F32
            };
            if !b.is_comparison() && (x.dtype == DType::Bool || y.dtype == DType::Bool) {
                return err(format!(
                    "`{}` on a mask: masks are booleans; use `where_(mask, a, b)` or `mask.to_f32()`",
                    b.name()
                ));
            }
            Ok(TensorType { dtype, shape })
        }
        Op::Where(m, a, b) => {
            let (m, a, b) = (ty(*m), ty(*a), ty(*b));
            if m.dtype != DType::Bool {
                return err(format!(
                    "`where_` needs a mask (a comparison such as `x.gt(0.0)`) as its first argument, got {}",
                    m.dtype.name()
                ));
            }
            float_operand(g, "where_", &a)?;
            float_operand(g, "where_", &b)?;
            let ab = broadcast(g, &a.shape, &b.shape)?;
            Ok(f32_of(broadcast(g, &m.shape, &ab)?))
        }
        Op::Cast(a, to) => {
            if *to != DType::F32 {
                return err("only `to_f32()` casts are supported");
            }
            Ok(f32_of(ty(*a).shape))
        }
        Op::Reduce {
            op,
            input,
            axis,
            keepdim,
        } => {
            let a = ty(*input);
            float_operand(g, op.name(), &a)?;
            check_axis(g, &a.shape, *axis)?;
            let mut dims = a.shape.0.clone();
            if *keepdim {
                dims[*axis] = Dim::fixed(1);
            } else {
                dims.remove(*axis);
            }
            Ok(f32_of(Shape(dims)))
        }
        Op::Softmax { input, axis } => {
            let a = ty(*input);
            float_operand(g, "softmax", &a)?;
            check_axis(g, &a.shape, *axis)?;
            Ok(f32_of(a.shape))
        }
        Op::LayerNorm {
            input, gamma, beta, ..
        } => {
            let a = ty(*input);
            float_operand(g, "layer_norm", &a)?;
            norm_weight(g, "layer_norm", "gamma", &a.shape, &ty(*gamma))?;
            norm_weight(g, "layer_norm", "beta", &a.shape, &ty(*beta))?;
            Ok(f32_of(a.shape))
        }
        Op::RmsNorm { input, gamma, .. } => {
            let a = ty(*input);
            float_operand(g, "rms_norm", &a)?;
            norm_weight(g, "rms_norm", "gamma", &a.shape, &ty(*gamma))?;
            Ok(f32_of(a.shape))
        }
        Op::MatMul(a, b) => matmul(g, &ty(*a), &ty(*b)),
        Op::Permute { input, perm } => {
            let a = ty(*input);
            let mut seen = vec![false; a.shape.rank()];
            if perm.len() != a.shape.rank()
                || perm
                    .iter()
                    .any(|&p| p >= seen.len() || std::mem::replace(&mut seen[p], true))
            {
                return err(format!(
                    "permutation {perm:?} is not a permutation of the {} axes of {}",
                    a.shape.rank(),
                    g.fmt_shape(&a.shape)
                ));
            }
            let dims = perm.iter().map(|&p| a.shape.0[p].clone()).collect();
            Ok(TensorType {
                dtype: a.dtype,
                shape: Shape(dims),
            })
        }
        Op::Reshape { input, shape } => {
            let a = ty(*input);
            if a.shape.numel() != shape.numel() {
                return err(format!(
                    "cannot reshape {} ({} elements) to {} ({} elements)",
                    g.fmt_shape(&a.shape),
                    g.fmt_dim(&a.shape.numel()),
                    g.fmt_shape(shape),
                    g.fmt_dim(&shape.numel())
                ));
            }
            Ok(TensorType {
                dtype: a.dtype,
                shape: shape.clone(),
            })
        }
        Op::Slice {
            input,
            axis,
            start,
            end,
        } => {
            let a = ty(*input);
            check_axis(g, &a.shape, *axis)?;
            let Some(len) = a.shape.0[*axis].as_static() else {
                return err(format!(
                    "slice on axis {axis} of {}: the axis is dynamic; slices need a static axis",
                    g.fmt_shape(&a.shape)
                ));
            };
            if start >= end || *end > len {
                return err(format!(
                    "slice {start}..{end} is out of range for axis {axis} of {} (length {len})",
                    g.fmt_shape(&a.shape)
                ));
            }
            let mut dims = a.shape.0.clone();
            dims[*axis] = Dim::fixed(end - start);
            Ok(TensorType {
                dtype: a.dtype,
                shape: Shape(dims),
            })
        }
        Op::Concat { inputs, axis } => concat(g, inputs, *axis),
        Op::Embedding { table, ids } => {
            let (t, i) = (ty(*table), ty(*ids));
            if i.dtype != DType::I64 {
                return err(format!(
                    "embedding ids must be integer ids (an i64 input), got {} {}",
                    i.dtype.name(),
                    g.fmt_shape(&i.shape)
                ));
            }
            float_operand(g, "embedding table", &t)?;
            if t.shape.rank() != 2 || t.shape.0[0].as_static().is_none() {
                return err(format!(
                    "embedding table must be a static 2-D [vocab, dim] tensor, got {}",
                    g.fmt_shape(&t.shape)
                ));
            }
            let mut dims = i.shape.0.clone();
            dims.push(t.shape.0[1].clone());
            Ok(f32_of(Shape(dims)))
        }
    }
}

fn check_axis(g: &Graph, shape: &Shape, axis: usize) -> Result<(), TypeError> {
    if axis >= shape.rank() {
        return err(format!(
            "axis {axis} is out of range for {} (rank {})",
            g.fmt_shape(shape),
            shape.rank()
        ));
    }
    Ok(())
}

fn norm_weight(
    g: &Graph,
    op: &str,
    what: &str,
    x: &Shape,
    w: &TensorType,
) -> Result<(), TypeError> {
    let Some(last) = x.last() else {
        return err(format!("{op} needs at least one axis"));
    };
    if w.shape.0.as_slice() != std::slice::from_ref(last) {
        return err(format!(
            "{op}: {what} must have shape [{}] (the last axis of {}), got {}",
            g.fmt_dim(last),
            g.fmt_shape(x),
            g.fmt_shape(&w.shape)
        ));
    }
    if last.as_static().is_none() {
        return err(format!(
            "{op} normalises over a dynamic last axis in {}; the normalised axis must be static",
            g.fmt_shape(x)
        ));
    }
    Ok(())
}

fn matmul(g: &Graph, a: &TensorType, b: &TensorType) -> Result<TensorType, TypeError> {
    float_operand(g, "matmul", a)?;
    float_operand(g, "matmul", b)?;
    let (ra, rb) = (a.shape.rank(), b.shape.rank());
    if ra < 2 || rb < 2 {
        return err(format!(
            "matmul needs operands of rank 2 or more, got {} and {}",
            g.fmt_shape(&a.shape),
            g.fmt_shape(&b.shape)
        ));
    }
    let (m, ka) = (&a.shape.0[ra - 2], &a.shape.0[ra - 1]);
    let (kb, n) = (&b.shape.0[rb - 2], &b.shape.0[rb - 1]);
    if ka != kb {
        return err(format!(
            "matmul inner dims differ: {} × {} ({} vs {})",
            g.fmt_shape(&a.shape),
            g.fmt_shape(&b.shape),
            g.fmt_dim(ka),
            g.fmt_dim(kb)
        ));
    }
    let batch_a = Shape(a.shape.0[..ra - 2].to_vec());
    let batch_b = Shape(b.shape.0[..rb - 2].to_vec());
    let mut dims = broadcast(g, &batch_a, &batch_b)
        .map_err(|e| TypeError(format!("matmul batch dims: {}", e.0)))?
        .0;
    dims.push(m.clone());
    dims.push(n.clone());
    Ok(TensorType {
        dtype: DType::F32,
        shape: Shape(dims),
    })
}

fn concat(g: &Graph, inputs: &[crate::ir::NodeId], axis: usize) -> Result<TensorType, TypeError> {
    let Some(first) = inputs.first() else {
        return err("concat needs at least one tensor");
    };
    let first = g.ty(*first).clone();
    check_axis(g, &first.shape, axis)?;
    let mut total = 0usize;
    for &id in inputs {
        let t = g.ty(id);
        float_operand(g, "concat", t)?;
        let same_rank = t.shape.rank() == first.shape.rank();
        let others_equal = same_rank
            && (0..t.shape.rank()).all(|i| i == axis || t.shape.0[i] == first.shape.0[i]);
        if !others_equal {
            return err(format!(
                "concat along axis {axis}: {} and {} differ outside that axis",
                g.fmt_shape(&first.shape),
                g.fmt_shape(&t.shape)
            ));
        }
        let Some(len) = t.shape.0[axis].as_static() else {
            return err(format!(
                "concat along axis {axis} of {}: the axis is dynamic; concat needs a static axis",
                g.fmt_shape(&t.shape)
            ));
        };
        total += len;
    }
    let mut dims = first.shape.0.clone();
    dims[axis] = Dim::fixed(total);
    Ok(TensorType {
        dtype: DType::F32,
        shape: Shape(dims),
    })
}
