//! Shape and dtype inference: the type of each op from the types of its operands, or a message that names the
//! shapes involved. Runs inside [`Graph::add`], so every node in a graph is well-typed.

use crate::ir::{BinaryOp, DType, Dim, Graph, NodeId, Op, Shape, TensorType};

/// Why an op cannot be typed. The front end attaches the span of the user's expression.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct TypeError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, TypeError> {
    Err(TypeError(msg.into()))
}

/// The most elements a tensor may have, counting dynamic dims as 1. Far above any real model, and low enough that
/// byte counts and buffer offsets computed from shapes never overflow in the planner or the kernels.
pub const MAX_ELEMENTS: usize = 1 << 40;

/// `a * b`, or `None` when the constant part overflows [`MAX_ELEMENTS`].
pub fn mul_dims(a: &Dim, b: &Dim) -> Option<Dim> {
    let coeff = a
        .coeff
        .checked_mul(b.coeff)
        .filter(|&c| c <= MAX_ELEMENTS)?;
    let mut syms = a.syms.clone();
    syms.extend_from_slice(&b.syms);
    syms.sort_unstable();
    Some(Dim { coeff, syms })
}

/// The element count as one monomial, or `None` past [`MAX_ELEMENTS`] (unlike [`Shape::numel`], never overflows).
pub fn numel(shape: &Shape) -> Option<Dim> {
    shape
        .0
        .iter()
        .try_fold(Dim::fixed(1), |acc, d| mul_dims(&acc, d))
}

/// Refuses shapes too large for any tensor.
pub fn check_size(g: &Graph, shape: &Shape) -> Result<(), TypeError> {
    if numel(shape).is_none() {
        return err(format!(
            "a tensor of shape {} would have more than 2^40 elements",
            g.fmt_shape(shape)
        ));
    }
    Ok(())
}

fn type_of(g: &Graph, id: NodeId) -> Result<TensorType, TypeError> {
    match g.nodes.get(id.index()) {
        Some(node) => Ok(node.ty.clone()),
        None => err(format!("internal: operand {id} is not in the graph")),
    }
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
            (Some(x), Some(y)) => {
                let why = if x.as_static().is_some() && y.as_static().is_some() {
                    "neither is 1".to_string()
                } else {
                    "a dynamic dim only matches itself or a static 1".to_string()
                };
                return err(format!(
                    "shapes {} and {} cannot be broadcast together: aligned from the right, dims `{}` and `{}` \
                     differ and {why}; reshape one side so the dims match or are 1",
                    g.fmt_shape(a),
                    g.fmt_shape(b),
                    g.fmt_dim(x),
                    g.fmt_dim(y),
                ));
            }
            (None, None) => return err("internal: broadcast past both ranks"),
        };
        dims.push(dim);
    }
    Ok(Shape(dims))
}

/// Every op computes in f32; ids and masks are converted explicitly, so a mix-up is an error, not a silent cast.
fn float_operand(g: &Graph, what: &str, ty: &TensorType) -> Result<(), TypeError> {
    match ty.dtype {
        DType::F32 => Ok(()),
        DType::I64 => err(format!(
            "`{what}` needs f32 values, but this operand holds integer ids (i64 {}); convert them with `.to_f32()` \
             first",
            g.fmt_shape(&ty.shape)
        )),
        DType::Bool => err(format!(
            "`{what}` needs f32 values, but this operand is a mask (bool {}, from a comparison); a mask must go \
             through `where_(mask, a, b)` or `.to_f32()` first",
            g.fmt_shape(&ty.shape)
        )),
    }
}

/// Operands of `+ - * /`, `max`, ...: f32 on both sides, with a message that names both when they are mixed.
fn binary_operands(
    g: &Graph,
    op: BinaryOp,
    x: &TensorType,
    y: &TensorType,
) -> Result<(), TypeError> {
    let what = op_text(op);
    if op.is_comparison() && x.dtype != DType::I64 && y.dtype != DType::I64 {
        return Ok(()); // masks compare like the 0.0/1.0 they are stored as
    }
    if x.dtype != y.dtype && x.dtype != DType::Bool && y.dtype != DType::Bool {
        return err(format!(
            "mixed dtypes: `{what}` of {} {} and {} {}; convert the i64 ids with `.to_f32()` first",
            x.dtype.name(),
            g.fmt_shape(&x.shape),
            y.dtype.name(),
            g.fmt_shape(&y.shape)
        ));
    }
    float_operand(g, what, x)?;
    float_operand(g, what, y)
}

fn op_text(op: BinaryOp) -> &'static str {
    match op {
        BinaryOp::Add => "+",
        BinaryOp::Sub => "-",
        BinaryOp::Mul => "*",
        BinaryOp::Div => "/",
        other => other.name(),
    }
}

/// The type of `op`, given the types already in `g`.
pub fn infer(g: &Graph, op: &Op) -> Result<TensorType, TypeError> {
    let out = infer_unchecked(g, op)?;
    check_size(g, &out.shape)?;
    Ok(out)
}

fn infer_unchecked(g: &Graph, op: &Op) -> Result<TensorType, TypeError> {
    let ty = |id: NodeId| type_of(g, id);
    let f32_of = |shape: Shape| TensorType {
        dtype: DType::F32,
        shape,
    };
    match op {
        Op::Input(i) => match g.inputs.get(*i as usize) {
            Some(input) => Ok(input.ty.clone()),
            None => err(format!("internal: there is no input {i}")),
        },
        Op::Param(i) => match g.params.get(*i as usize) {
            Some(param) => Ok(param.ty.clone()),
            None => err(format!("internal: there is no parameter {i}")),
        },
        Op::State(i) => match g.states.get(*i as usize) {
            Some(state) => Ok(state.ty.clone()),
            None => err(format!("internal: there is no state {i}")),
        },
        Op::Write {
            state,
            axis,
            start,
            value,
        } => write(g, *state, *axis, start, *value),
        Op::Arange { len, .. } => Ok(TensorType {
            dtype: DType::I64,
            shape: Shape(vec![len.clone()]),
        }),
        Op::Scalar(_) => Ok(f32_of(Shape::scalar())),
        Op::Unary(u, a) => {
            let a = ty(*a)?;
            float_operand(g, u.name(), &a)?;
            Ok(f32_of(a.shape))
        }
        Op::Binary(b, x, y) => {
            let (x, y) = (ty(*x)?, ty(*y)?);
            binary_operands(g, *b, &x, &y)?;
            let shape = broadcast(g, &x.shape, &y.shape)?;
            let dtype = if b.is_comparison() {
                DType::Bool
            } else {
                DType::F32
            };
            Ok(TensorType { dtype, shape })
        }
        Op::Where(m, a, b) => {
            let (m, a, b) = (ty(*m)?, ty(*a)?, ty(*b)?);
            if m.dtype != DType::Bool {
                return err(format!(
                    "`where_` needs a mask as its first argument (a comparison such as `x.gt(0.0)`), but this is \
                     {} {}; compare it first, e.g. `m.gt(0.5)`",
                    m.dtype.name(),
                    g.fmt_shape(&m.shape)
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
            Ok(f32_of(ty(*a)?.shape))
        }
        Op::Reduce {
            op,
            input,
            axis,
            keepdim,
        } => {
            let a = ty(*input)?;
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
        Op::Softmax { input, axis } | Op::Cumsum { input, axis } => {
            let a = ty(*input)?;
            float_operand(g, &op.name(), &a)?;
            check_axis(g, &a.shape, *axis)?;
            Ok(f32_of(a.shape))
        }
        Op::LayerNorm {
            input, gamma, beta, ..
        } => {
            let a = ty(*input)?;
            float_operand(g, "layer_norm", &a)?;
            norm_weight(g, "layer_norm", "gamma", &a.shape, &ty(*gamma)?)?;
            norm_weight(g, "layer_norm", "beta", &a.shape, &ty(*beta)?)?;
            Ok(f32_of(a.shape))
        }
        Op::RmsNorm { input, gamma, .. } => {
            let a = ty(*input)?;
            float_operand(g, "rms_norm", &a)?;
            norm_weight(g, "rms_norm", "gamma", &a.shape, &ty(*gamma)?)?;
            Ok(f32_of(a.shape))
        }
        Op::MatMul(a, b) => matmul(g, &ty(*a)?, &ty(*b)?),
        Op::Permute { input, perm } => {
            let a = ty(*input)?;
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
            let a = ty(*input)?;
            let (Some(from), Some(to)) = (numel(&a.shape), numel(shape)) else {
                return err(format!(
                    "cannot reshape {} to {}: too many elements",
                    g.fmt_shape(&a.shape),
                    g.fmt_shape(shape)
                ));
            };
            if from != to || shape.0.iter().any(|d| d.coeff == 0) {
                return err(format!(
                    "cannot reshape {} ({} elements) to {} ({} elements): a reshape keeps the element count",
                    g.fmt_shape(&a.shape),
                    g.fmt_dim(&from),
                    g.fmt_shape(shape),
                    g.fmt_dim(&to)
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
            len,
        } => {
            let a = ty(*input)?;
            check_axis(g, &a.shape, *axis)?;
            let size = &a.shape.0[*axis];
            if slice_fits(g, start, len, size) == Some(false) {
                return err(slice_out_of_range(g, &a.shape, *axis, start, len));
            }
            let mut dims = a.shape.0.clone();
            dims[*axis] = len.clone();
            Ok(TensorType {
                dtype: a.dtype,
                shape: Shape(dims),
            })
        }
        Op::Concat { inputs, axis } => concat(g, inputs, *axis),
        Op::Embedding { table, ids } => {
            let (t, i) = (ty(*table)?, ty(*ids)?);
            float_operand(g, "embedding table", &t)?;
            if t.shape.rank() != 2 || t.shape.0[0].as_static().is_none() {
                return err(format!(
                    "embedding table must be a static 2-D [vocab, dim] tensor, got {}",
                    g.fmt_shape(&t.shape)
                ));
            }
            if i.dtype != DType::I64 {
                computed_ids(g, *ids, &i, &t.shape.0[0])?;
            }
            // Positions made by an `arange` past the table's end at every dim value: refused here, at the line.
            if let Some((start, len)) = g.arange_behind(*ids) {
                if slice_fits(g, &start, &len, &t.shape.0[0]) == Some(false) {
                    return err(format!(
                        "embedding ids from `arange({}, {})` reach past the end of the table {}, whatever the dims",
                        g.fmt_dim(&start),
                        g.fmt_dim(&len),
                        g.fmt_shape(&t.shape)
                    ));
                }
            }
            let mut dims = i.shape.0.clone();
            dims.push(t.shape.0[1].clone());
            Ok(f32_of(Shape(dims)))
        }
    }
}

/// Ids an embedding reads from a value the model computed: whole numbers whose range [`crate::id_range`] bounds
/// inside the table (at build time, or by a bound the runtime checks when it binds the dims).
fn computed_ids(g: &Graph, ids: NodeId, ty: &TensorType, rows: &Dim) -> Result<(), TypeError> {
    let shape = g.fmt_shape(&ty.shape);
    let Some(range) = (ty.dtype == DType::F32)
        .then(|| crate::id_range::of(g, ids))
        .flatten()
    else {
        return err(format!(
            "embedding ids must be integer ids: an i64 input (`#[shape(..)] ids: Tensor<i64>`), an `arange`, or \
             ids the model computes from masks, positions and whole constants with `+`, `*`, `cumsum`, `max`, `min` \
             (RoBERTa's positions: `(tokens.cumsum(1) * tokens + 1.0).to_i64()`), whose range fuse can bound; this \
             is {} {shape}, and its range cannot be bounded",
            ty.dtype.name()
        ));
    };
    let rows_n = rows.as_static().unwrap_or(usize::MAX);
    let past_end = match range.static_hi() {
        Some(hi) => usize::try_from(hi).map_or(range.lo < 0, |hi| hi >= rows_n),
        None => range
            .as_rows()
            .is_none_or(|(start, len)| slice_fits(g, &start, &len, rows) == Some(false)),
    };
    if range.lo < 0 || past_end {
        let hi = match &range.m {
            Some(m) => format!("{} + {}", g.fmt_dim(m), range.c),
            None => range.c.to_string(),
        };
        return err(format!(
            "embedding ids computed in the model run from {} to {hi}, outside the table's {rows_n} rows",
            range.lo
        ));
    }
    Ok(())
}

/// `state.write(axis, start, value)`: `value` has the state's shape except along `axis`, where it must fit at
/// `start` (checked at run time when that depends on the dims).
fn write(
    g: &Graph,
    state: NodeId,
    axis: usize,
    start: &Dim,
    value: NodeId,
) -> Result<TensorType, TypeError> {
    let s = type_of(g, state)?;
    if !matches!(g.node(state).op, Op::State(_)) {
        return err(format!(
            "`write` replaces part of a `#[state]` field (`self.k_cache.write(2, past, k)`), but this is a computed \
             value {}",
            g.fmt_shape(&s.shape)
        ));
    }
    let v = type_of(g, value)?;
    float_operand(g, "write", &v)?;
    check_axis(g, &s.shape, axis)?;
    let fits_around = v.shape.rank() == s.shape.rank()
        && (0..s.shape.rank()).all(|i| i == axis || v.shape.0[i] == s.shape.0[i]);
    if !fits_around {
        return err(format!(
            "`write` along axis {axis} of the state {}: the value {} must have the state's dims on every other axis",
            g.fmt_shape(&s.shape),
            g.fmt_shape(&v.shape)
        ));
    }
    let len = &v.shape.0[axis];
    if slice_fits(g, start, len, &s.shape.0[axis]) == Some(false) {
        return err(format!(
            "`write` of {} rows at {} along axis {axis} of the state {} always reaches past its end",
            g.fmt_dim(len),
            g.fmt_dim(start),
            g.fmt_shape(&s.shape)
        ));
    }
    Ok(s)
}

/// Whether `start + len <= size` with `len > 0`, as far as it is known at build time: `None` when it depends on the
/// dynamic dims (the runtime checks it when it binds them, see [`crate::plan::bounds`]).
pub fn slice_fits(g: &Graph, start: &Dim, len: &Dim, size: &Dim) -> Option<bool> {
    if len.coeff == 0 {
        return Some(false);
    }
    // `narrow(axis, past, seq)` of a `past + seq` axis ends exactly at its end, whatever the dims.
    // So does `narrow(axis, seq - 1, 1)` of a `seq` axis.
    let end = g.sum_terms(&[start, len], &[]);
    if start.as_static() != Some(0) && end.is_some() && end == g.sum_terms(&[size], &[]) {
        return Some(true);
    }
    match (start.as_static(), len.as_static(), size.as_static()) {
        (Some(s), Some(l), Some(n)) => Some(s.checked_add(l).is_some_and(|end| end <= n)),
        (Some(0), _, _) if len == size => Some(true),
        // The whole axis and then some: never fits, whatever the dims.
        (Some(_), _, _) if len == size => Some(false),
        _ => None,
    }
}

fn slice_out_of_range(g: &Graph, shape: &Shape, axis: usize, start: &Dim, len: &Dim) -> String {
    let size = &shape.0[axis];
    match (start.as_static(), len.as_static(), size.as_static()) {
        (Some(start), Some(len), Some(size)) => format!(
            "slice {start}..{} is empty or out of range for axis {axis} of {} (length {size}); a slice needs start < \
             end <= {size}",
            start.saturating_add(len),
            g.fmt_shape(shape)
        ),
        _ => format!(
            "narrow of axis {axis} of {} is always empty or out of range: start {} + length {} > {}",
            g.fmt_shape(shape),
            g.fmt_dim(start),
            g.fmt_dim(len),
            g.fmt_dim(size)
        ),
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
    float_operand(g, &format!("{op} {what}"), w)?;
    let Some(last) = x.last() else {
        return err(format!(
            "{op} needs at least one axis, but the input is a scalar"
        ));
    };
    if w.shape.0.as_slice() != std::slice::from_ref(last) {
        return err(format!(
            "`{op}`'s {what} must have shape [{}], the last axis of the input {}, but it is {}",
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
            "matmul needs operands of rank 2 or more, got {} and {}; reshape a vector of n to [1, n] or [n, 1]",
            g.fmt_shape(&a.shape),
            g.fmt_shape(&b.shape)
        ));
    }
    let (m, ka) = (&a.shape.0[ra - 2], &a.shape.0[ra - 1]);
    let (kb, n) = (&b.shape.0[rb - 2], &b.shape.0[rb - 1]);
    if ka != kb {
        return err(format!(
            "matmul inner dims differ: {} × {} multiplies a last axis of {} by a second-to-last axis of {}; \
             transpose or reshape one side (e.g. `.t()`) so they match",
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

fn concat(g: &Graph, inputs: &[NodeId], axis: usize) -> Result<TensorType, TypeError> {
    let Some(first) = inputs.first() else {
        return err("concat needs at least one tensor");
    };
    let first = type_of(g, *first)?;
    check_axis(g, &first.shape, axis)?;
    let mut lens = Vec::with_capacity(inputs.len());
    for &id in inputs {
        let t = &type_of(g, id)?;
        float_operand(g, "concat", t)?;
        let same_rank = t.shape.rank() == first.shape.rank();
        let others_equal =
            same_rank && (0..t.shape.rank()).all(|i| i == axis || t.shape.0[i] == first.shape.0[i]);
        if !others_equal {
            return err(format!(
                "concat along axis {axis}: {} and {} differ outside that axis (only a size-1 axis \
                 broadcasts to another input's length)",
                g.fmt_shape(&first.shape),
                g.fmt_shape(&t.shape)
            ));
        }
        lens.push(t.shape.0[axis].clone());
    }
    let refs: Vec<&Dim> = lens.iter().collect();
    let total = match g.sum_terms(&refs, &[]).and_then(|t| g.find_sum(&t)) {
        Some(d) if d.coeff <= MAX_ELEMENTS => d,
        Some(_) => return err("concat: the result is too large"),
        None => {
            return err(format!(
            "concat: the length {} is not a sum of dims less a constant, which is all a dim can be",
            lens.iter()
                .map(|d| g.fmt_dim(d))
                .collect::<Vec<_>>()
                .join(" + ")
        ))
        }
    };
    let mut dims = first.shape.0.clone();
    dims[axis] = total;
    Ok(TensorType {
        dtype: DType::F32,
        shape: Shape(dims),
    })
}
