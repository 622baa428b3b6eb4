//! An independent f64 reference interpreter of the fuse IR, used to check the compiled kernels.
//!
//! It shares no code with the kernels: it reads only the IR types of `fuse-kernels` and evaluates every node
//! naively, in f64, on dense row-major tensors. Simple and obviously correct beats fast here.

mod erf;
mod index;
pub(crate) mod ops;
#[cfg(test)]
mod tests;

use fuse_kernels::ir::{Dim, Graph, NodeId, Op, Shape};

pub use erf::erf;

/// A dense row-major f64 tensor. Bool values are 0.0/1.0; i64 ids are stored as f64 (exact below 2^53).
#[derive(Clone, Debug, PartialEq)]
pub struct RefTensor {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl RefTensor {
    /// A tensor of `shape` holding `data` in row-major order. Panics if the lengths disagree.
    pub fn new(shape: Vec<usize>, data: Vec<f64>) -> Self {
        let numel: usize = shape.iter().product();
        assert_eq!(
            data.len(),
            numel,
            "RefTensor::new: shape {shape:?} holds {numel} values, got {}",
            data.len()
        );
        RefTensor { shape, data }
    }

    /// A rank-0 tensor.
    pub fn scalar(v: f64) -> Self {
        RefTensor {
            shape: Vec::new(),
            data: vec![v],
        }
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Why the reference could not evaluate a graph.
#[derive(Debug, thiserror::Error)]
pub enum RefError {
    #[error("the graph has {expected} {what}s, got {got}")]
    Count {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("{what} {index}: shape {shape:?} holds {numel} values but the data has {len}")]
    BadTensor {
        what: &'static str,
        index: usize,
        shape: Vec<usize>,
        numel: usize,
        len: usize,
    },
    #[error("input {index} (`{name}`) is declared {expected}, got shape {got:?}")]
    InputShape {
        index: usize,
        name: String,
        expected: String,
        got: Vec<usize>,
    },
    #[error(
        "param {index} (`{name}`) is declared {expected} = {expected_dims:?}, got shape {got:?}"
    )]
    ParamShape {
        index: usize,
        name: String,
        expected: String,
        expected_dims: Vec<usize>,
        got: Vec<usize>,
    },
    #[error("dynamic dim `{name}` is bound to {first} and to {second} (by input {input})")]
    DimConflict {
        name: String,
        first: usize,
        second: usize,
        input: usize,
    },
    #[error("dynamic dim `{name}` is negative at these inputs")]
    NegativeDim { name: String },
    #[error("dynamic dim `{name}` is not determined by the input shapes")]
    UnboundDim { name: String },
    #[error("{node} ({op}): id {id} is not a row of the {vocab}-row table")]
    IdOutOfRange {
        node: NodeId,
        op: String,
        id: f64,
        vocab: usize,
    },
    #[error("{node} ({op}): computed shape {got:?} but its type evaluates to {expected:?}")]
    NodeShape {
        node: NodeId,
        op: String,
        expected: Vec<usize>,
        got: Vec<usize>,
    },
    #[error("{node} ({op}): {msg}")]
    Invalid {
        node: NodeId,
        op: String,
        msg: String,
    },
}

/// Evaluates every output of `graph`. `inputs[i]` is the i-th `forward` input, `params[i]` the i-th param
/// (`graph.params[i]`). The dynamic dims are bound from the input shapes (a dim name bound to two values is an
/// error) and every node's shape is checked against `Shape::eval` of its inferred type.
pub fn interpret(
    graph: &Graph,
    inputs: &[RefTensor],
    params: &[RefTensor],
) -> Result<Vec<RefTensor>, RefError> {
    let values = interpret_all(graph, inputs, params)?;
    Ok(graph
        .outputs
        .iter()
        .map(|id| values[id.index()].clone())
        .collect())
}

/// How the interpreter keeps each node's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arithmetic {
    /// In f64.
    F64,
    /// Rounded to f32 after each node (each node's own arithmetic still in f64): what an evaluation of the same
    /// graph in f32 errs by where a node absorbs or cancels what its operands held, as a -1e9 mask added to a
    /// score of 0.5 does.
    F32Nodes,
}

/// [`interpret`] for a model with `#[state]` fields: `states[i]` is what state i holds when the call starts; returns
/// the outputs and then every state as the call leaves it (its `write`'s value, or unchanged).
pub fn interpret_with_states(
    graph: &Graph,
    inputs: &[RefTensor],
    params: &[RefTensor],
    states: &[RefTensor],
) -> Result<(Vec<RefTensor>, Vec<RefTensor>), RefError> {
    interpret_with_states_in(graph, inputs, params, states, Arithmetic::F64)
}

/// [`interpret_with_states`] in `arithmetic`.
pub fn interpret_with_states_in(
    graph: &Graph,
    inputs: &[RefTensor],
    params: &[RefTensor],
    states: &[RefTensor],
    arithmetic: Arithmetic,
) -> Result<(Vec<RefTensor>, Vec<RefTensor>), RefError> {
    let values = interpret_nodes(graph, inputs, params, states, arithmetic)?;
    let outputs = graph
        .outputs
        .iter()
        .map(|id| values[id.index()].clone())
        .collect();
    let mut after = states.to_vec();
    for id in graph.ids() {
        if let Op::Write { state, .. } = graph.node(id).op {
            if let Op::State(i) = graph.node(state).op {
                after[i as usize] = values[id.index()].clone();
            }
        }
    }
    Ok((outputs, after))
}

/// Same as [`interpret`], but returns the value of every node, indexed like `graph.nodes`.
pub fn interpret_all(
    graph: &Graph,
    inputs: &[RefTensor],
    params: &[RefTensor],
) -> Result<Vec<RefTensor>, RefError> {
    interpret_nodes(graph, inputs, params, &[], Arithmetic::F64)
}

fn interpret_nodes(
    graph: &Graph,
    inputs: &[RefTensor],
    params: &[RefTensor],
    states: &[RefTensor],
    arithmetic: Arithmetic,
) -> Result<Vec<RefTensor>, RefError> {
    check_tensors("input", graph.inputs.len(), inputs)?;
    check_tensors("state", graph.states.len(), states)?;
    check_tensors("param", graph.params.len(), params)?;
    let dyn_values = bind_dyn_dims(graph, inputs)?;
    for (index, (info, t)) in graph.params.iter().zip(params).enumerate() {
        let expected_dims = eval_shape(graph, &dyn_values, &info.ty.shape)?;
        if t.shape != expected_dims {
            return Err(RefError::ParamShape {
                index,
                name: info.name.clone(),
                expected: graph.fmt_shape(&info.ty.shape),
                expected_dims,
                got: t.shape.clone(),
            });
        }
    }

    let mut values: Vec<RefTensor> = Vec::with_capacity(graph.nodes.len());
    for id in graph.ids() {
        let node = graph.node(id);
        let expected = eval_shape(graph, &dyn_values, &node.ty.shape)?;
        let invalid = |msg: String| RefError::Invalid {
            node: id,
            op: node.op.name(),
            msg,
        };
        for operand in node.op.operands() {
            if operand >= id {
                return Err(invalid(format!(
                    "operand {operand} does not come before it"
                )));
            }
        }
        let v = |n: NodeId| &values[n.index()];
        let value = match &node.op {
            Op::Input(i) => inputs.get(*i as usize).cloned(),
            Op::Param(i) => params.get(*i as usize).cloned(),
            Op::State(i) => states
                .get(*i as usize)
                .filter(|t| t.shape == expected)
                .cloned(),
            Op::Write {
                state,
                axis,
                start,
                value,
            } => {
                let start = eval_dim(graph, &dyn_values, start)?;
                ops::write(v(*state), *axis, start, v(*value))
            }
            Op::Arange { start, len } => {
                let start = eval_dim(graph, &dyn_values, start)?;
                let len = eval_dim(graph, &dyn_values, len)?;
                let values = (start..start + len).map(|p| p as f64).collect();
                Some(RefTensor::new(vec![len], values))
            }
            Op::Scalar(x) => Some(RefTensor::scalar(*x)),
            Op::Unary(u, a) => Some(ops::unary(*u, v(*a))),
            Op::Binary(b, x, y) => ops::binary(*b, v(*x), v(*y)),
            Op::Where(m, a, b) => ops::zip_broadcast(&[v(*m), v(*a), v(*b)], |e| {
                if e[0] != 0.0 {
                    e[1]
                } else {
                    e[2]
                }
            }),
            Op::Cast(a, _) => Some(v(*a).clone()),
            Op::Reduce {
                op,
                input,
                axis,
                keepdim,
            } => ops::reduce(*op, v(*input), *axis, *keepdim),
            Op::Softmax { input, axis } => ops::softmax(v(*input), *axis),
            Op::Cumsum { input, axis } => ops::cumsum(v(*input), *axis),
            Op::LayerNorm {
                input,
                gamma,
                beta,
                eps,
            } => ops::layer_norm(v(*input), v(*gamma), v(*beta), *eps),
            Op::RmsNorm { input, gamma, eps } => ops::rms_norm(v(*input), v(*gamma), *eps),
            Op::MatMul(a, b) => ops::matmul(v(*a), v(*b)),
            Op::Permute { input, perm } => ops::permute(v(*input), perm),
            Op::Reshape { input, .. } => (v(*input).numel() == expected.iter().product::<usize>())
                .then(|| RefTensor::new(expected.clone(), v(*input).data.clone())),
            Op::Slice {
                input,
                axis,
                start,
                len,
            } => {
                let start = eval_dim(graph, &dyn_values, start)?;
                let end = start.checked_add(eval_dim(graph, &dyn_values, len)?);
                end.and_then(|end| ops::slice(v(*input), *axis, start, end))
            }
            Op::Concat {
                inputs: pieces,
                axis,
            } => {
                let parts: Vec<&RefTensor> = pieces.iter().map(|&n| v(n)).collect();
                ops::concat(&parts, *axis)
            }
            Op::Embedding { table, ids } => {
                ops::embedding(v(*table), v(*ids)).map_err(|bad| RefError::IdOutOfRange {
                    node: id,
                    op: node.op.name(),
                    id: bad,
                    vocab: v(*table).shape.first().copied().unwrap_or(0),
                })?
            }
        };
        let Some(mut value) = value else {
            let shapes: Vec<&[usize]> = node
                .op
                .operands()
                .iter()
                .map(|n| values[n.index()].shape.as_slice())
                .collect();
            return Err(invalid(format!(
                "its operands (shapes {shapes:?}) or indices do not fit the op"
            )));
        };
        if value.shape != expected {
            return Err(RefError::NodeShape {
                node: id,
                op: node.op.name(),
                expected,
                got: value.shape,
            });
        }
        if arithmetic == Arithmetic::F32Nodes {
            for x in &mut value.data {
                *x = f64::from(*x as f32);
            }
        }
        values.push(value);
    }
    for out in &graph.outputs {
        if out.index() >= values.len() {
            return Err(RefError::Invalid {
                node: *out,
                op: "output".into(),
                msg: "the output names a node that does not exist".into(),
            });
        }
    }
    Ok(values)
}

/// fuse's rule of empty values on the shapes of one call, node by node: the first node that computes a value with
/// elements from one without (a reduction, a product or attention over no positions; a concat's empty pieces
/// aside), or a state of no elements. PyTorch computes such a value (zeros, NaN) where fuse refuses the call with
/// `Error::ZeroDim`. This evaluates each node's shape, independently of the compiler's rule on the dims'
/// symbols (`Graph::zero_rule`), which the tests check against it.
pub fn empty_read(graph: &Graph, inputs: &[RefTensor]) -> Result<Option<NodeId>, RefError> {
    let vals = bind_dyn_dims(graph, inputs)?;
    let empty: Vec<bool> = graph
        .nodes
        .iter()
        .map(|n| Ok(eval_shape(graph, &vals, &n.ty.shape)?.contains(&0)))
        .collect::<Result<_, RefError>>()?;
    Ok(graph.ids().find(|&id| {
        let op = &graph.node(id).op;
        if empty[id.index()] {
            matches!(op, Op::State(_) | Op::Write { .. })
        } else {
            !matches!(op, Op::Concat { .. }) && op.operands().iter().any(|o| empty[o.index()])
        }
    }))
}

/// Checks the tensor count and that each tensor's data fills its shape.
fn check_tensors(what: &'static str, expected: usize, got: &[RefTensor]) -> Result<(), RefError> {
    if got.len() != expected {
        return Err(RefError::Count {
            what,
            expected,
            got: got.len(),
        });
    }
    for (index, t) in got.iter().enumerate() {
        if t.data.len() != t.numel() {
            return Err(RefError::BadTensor {
                what,
                index,
                shape: t.shape.clone(),
                numel: t.numel(),
                len: t.data.len(),
            });
        }
    }
    Ok(())
}

/// Binds the dynamic dims from the input shapes, then checks every input against its declaration.
///
/// A dim is `coeff × product of symbols`; a dim with exactly one distinct unbound symbol determines it (repeated
/// passes let `batch*seq` be solved once `seq` is known). A single-symbol dim that implies a different value for an
/// already bound symbol is a [`RefError::DimConflict`].
fn bind_dyn_dims(graph: &Graph, inputs: &[RefTensor]) -> Result<Vec<Option<usize>>, RefError> {
    let mut vals: Vec<Option<usize>> = vec![None; graph.dyn_dims.len()];
    let shape_err = |index: usize| RefError::InputShape {
        index,
        name: graph.inputs[index].name.clone(),
        expected: graph.fmt_shape(&graph.inputs[index].ty.shape),
        got: inputs[index].shape.clone(),
    };
    for (index, (info, t)) in graph.inputs.iter().zip(inputs).enumerate() {
        if info.ty.shape.rank() != t.shape.len() {
            return Err(shape_err(index));
        }
        // A `#[dim]` argument binds its dim by value.
        if let Some(sym) = info.binds {
            let value = t.data.first().copied().unwrap_or(-1.0);
            if value < 0.0 || value.fract() != 0.0 {
                return Err(shape_err(index));
            }
            vals[sym as usize] = Some(value as usize);
        }
    }
    let mut progress = true;
    while progress {
        progress = false;
        for (index, (info, t)) in graph.inputs.iter().zip(inputs).enumerate() {
            for (dim, &actual) in info.ty.shape.dims().iter().zip(&t.shape) {
                let mut syms = dim.syms.clone();
                syms.dedup(); // sorted, so duplicates are adjacent
                let unbound: Vec<u16> = syms
                    .iter()
                    .copied()
                    .filter(|&s| vals[s as usize].is_none())
                    .collect();
                // The symbol this dim determines: its only unbound one, or its only symbol if it has just one.
                let target = match (unbound.as_slice(), syms.as_slice()) {
                    ([s], _) | ([], [s]) => *s,
                    _ => continue,
                };
                let known = dim
                    .syms
                    .iter()
                    .filter(|&&s| s != target)
                    .fold(dim.coeff, |acc, &s| acc * vals[s as usize].unwrap_or(1));
                let power = dim.syms.iter().filter(|&&s| s == target).count() as u32;
                if known == 0 {
                    continue; // a zero-sized dim determines nothing; the final check decides
                }
                let implied = (actual % known == 0)
                    .then(|| int_root(actual / known, power))
                    .flatten();
                let Some(implied) = implied else {
                    return Err(shape_err(index));
                };
                match vals[target as usize] {
                    None => {
                        vals[target as usize] = Some(implied);
                        progress = true;
                    }
                    Some(first) if first != implied => {
                        return Err(RefError::DimConflict {
                            name: graph.dyn_dims[target as usize].clone(),
                            first,
                            second: implied,
                            input: index,
                        })
                    }
                    Some(_) => {}
                }
            }
        }
    }
    // A sum of dims (`past + seq`) is its terms' sum, whatever an input's shape says: the check below then
    // refuses an input whose length there differs.
    for d in &graph.derived {
        let mut sum = 0usize;
        for t in &d.terms {
            sum += eval_dim(graph, &vals, t)?;
        }
        let value = sum
            .checked_sub(d.less)
            .ok_or_else(|| RefError::NegativeDim {
                name: graph.dyn_dims[d.sym as usize].clone(),
            })?;
        vals[d.sym as usize] = Some(value);
    }
    for (index, (info, t)) in graph.inputs.iter().zip(inputs).enumerate() {
        if eval_shape(graph, &vals, &info.ty.shape)? != t.shape {
            return Err(shape_err(index));
        }
    }
    Ok(vals)
}

/// The `k`-th root of `n` if it is an integer.
fn int_root(n: usize, k: u32) -> Option<usize> {
    if k <= 1 {
        return Some(n);
    }
    let guess = (n as f64).powf(1.0 / k as f64).round() as usize;
    (guess.saturating_sub(1)..=guess + 1).find(|r| r.checked_pow(k) == Some(n))
}

/// One dim's value; an unbound dynamic dim is an error.
fn eval_dim(graph: &Graph, vals: &[Option<usize>], dim: &Dim) -> Result<usize, RefError> {
    Ok(eval_shape(graph, vals, &Shape(vec![dim.clone()]))?[0])
}

/// `Shape::eval`, but an unbound dynamic dim is an error instead of a panic.
fn eval_shape(
    graph: &Graph,
    vals: &[Option<usize>],
    shape: &Shape,
) -> Result<Vec<usize>, RefError> {
    let mut bound = Vec::with_capacity(vals.len());
    for (s, v) in vals.iter().enumerate() {
        let used = shape.dims().iter().any(|d| d.syms.contains(&(s as u16)));
        match v {
            Some(v) => bound.push(*v),
            None if used => {
                return Err(RefError::UnboundDim {
                    name: graph.dyn_dims[s].clone(),
                })
            }
            None => bound.push(0),
        }
    }
    Ok(shape.eval(&bound))
}
