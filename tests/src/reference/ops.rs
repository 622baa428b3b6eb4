//! The ops, one naive f64 function each. `None` means the operand shapes do not fit the op (the IR's inference
//! should have refused the graph); the caller turns it into an error naming the node.

use std::f64::consts::{FRAC_1_SQRT_2, FRAC_2_SQRT_PI};

use fuse_kernels::ir::{BinaryOp, ReduceOp, UnaryOp};

use super::erf::erf;
use super::index::{
    broadcast_shape, broadcast_strides, for_each_index, for_each_lane, offset, strides,
};
use super::RefTensor;

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

pub fn unary(op: UnaryOp, a: &RefTensor) -> RefTensor {
    let f = |x: f64| match op {
        UnaryOp::Neg => -x,
        UnaryOp::Abs => x.abs(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => sigmoid(x),
        // NaN stays NaN, as in PyTorch (`f64::max` would give 0).
        UnaryOp::Relu => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        UnaryOp::Gelu => x / 2.0 * (1.0 + erf(x * FRAC_1_SQRT_2)),
        UnaryOp::GeluTanh => {
            // √(2/π) = (2/√π) · (1/√2)
            let k = FRAC_2_SQRT_PI * FRAC_1_SQRT_2;
            x / 2.0 * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
        }
        UnaryOp::Silu => x * sigmoid(x),
        UnaryOp::Erf => erf(x),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::Round => x.round_ties_even(),
        UnaryOp::Trunc => x.trunc(),
    };
    RefTensor::new(a.shape.clone(), a.data.iter().map(|&x| f(x)).collect())
}

pub fn binary(op: BinaryOp, a: &RefTensor, b: &RefTensor) -> Option<RefTensor> {
    let bool = |c: bool| if c { 1.0 } else { 0.0 };
    zip_broadcast(&[a, b], |e| {
        let (x, y) = (e[0], e[1]);
        match op {
            BinaryOp::Add => x + y,
            BinaryOp::Sub => x - y,
            BinaryOp::Mul => x * y,
            BinaryOp::Div => x / y,
            BinaryOp::Max => maximum(x, y),
            BinaryOp::Min => -maximum(-x, -y),
            BinaryOp::Pow => x.powf(y),
            BinaryOp::Lt => bool(x < y),
            BinaryOp::Le => bool(x <= y),
            BinaryOp::Gt => bool(x > y),
            BinaryOp::Ge => bool(x >= y),
            BinaryOp::Eq => bool(x == y),
            BinaryOp::Ne => bool(x != y),
        }
    })
}

/// Broadcasts all `args` together (NumPy rules) and applies `f` to each tuple of corresponding elements.
pub fn zip_broadcast(args: &[&RefTensor], f: impl Fn(&[f64]) -> f64) -> Option<RefTensor> {
    let mut out: Vec<usize> = Vec::new();
    for a in args {
        out = broadcast_shape(&out, &a.shape)?;
    }
    let st: Vec<Vec<usize>> = args
        .iter()
        .map(|a| broadcast_strides(&a.shape, &out))
        .collect();
    let mut data = Vec::new();
    let mut elems = vec![0.0; args.len()];
    for_each_index(&out, |idx| {
        for (k, a) in args.iter().enumerate() {
            elems[k] = a.data[offset(idx, &st[k])];
        }
        data.push(f(&elems));
    });
    Some(RefTensor::new(out, data))
}

pub fn reduce(op: ReduceOp, a: &RefTensor, axis: usize, keepdim: bool) -> Option<RefTensor> {
    if axis >= a.shape.len() {
        return None;
    }
    let mut data = Vec::new();
    for_each_lane(&a.shape, axis, |base, stride, len| {
        let lane = (0..len).map(|k| a.data[base + k * stride]);
        data.push(match op {
            ReduceOp::Sum => lane.sum(),
            ReduceOp::Mean => lane.sum::<f64>() / len as f64,
            ReduceOp::Max => lane.fold(f64::NEG_INFINITY, maximum),
        });
    });
    let mut shape = a.shape.clone();
    if keepdim {
        shape[axis] = 1;
    } else {
        shape.remove(axis);
    }
    Some(RefTensor::new(shape, data))
}

pub fn softmax(a: &RefTensor, axis: usize) -> Option<RefTensor> {
    if axis >= a.shape.len() {
        return None;
    }
    let mut data = a.data.clone();
    for_each_lane(&a.shape, axis, |base, stride, len| {
        let at = |k: usize| base + k * stride;
        let max = (0..len)
            .map(|k| a.data[at(k)])
            .fold(f64::NEG_INFINITY, f64::max);
        // A lane of -∞ alone (every position masked) is all zeros, as fuse documents (PyTorch gives NaN).
        let max = if max == f64::NEG_INFINITY { 0.0 } else { max };
        let sum: f64 = (0..len).map(|k| (a.data[at(k)] - max).exp()).sum();
        for k in 0..len {
            let e = (a.data[at(k)] - max).exp();
            data[at(k)] = if sum == 0.0 { 0.0 } else { e / sum };
        }
    });
    Some(RefTensor::new(a.shape.clone(), data))
}

/// The running sum along `axis` (each lane's element `k` is the sum of its elements `0..=k`).
pub fn cumsum(a: &RefTensor, axis: usize) -> Option<RefTensor> {
    if axis >= a.shape.len() {
        return None;
    }
    let mut data = a.data.clone();
    for_each_lane(&a.shape, axis, |base, stride, len| {
        let mut total = 0.0;
        for k in 0..len {
            total += a.data[base + k * stride];
            data[base + k * stride] = total;
        }
    });
    Some(RefTensor::new(a.shape.clone(), data))
}

/// Normalises each lane of the last axis: `(x - mean) / sqrt(var + eps) * gamma + beta` with the biased variance.
pub fn layer_norm(
    a: &RefTensor,
    gamma: &RefTensor,
    beta: &RefTensor,
    eps: f64,
) -> Option<RefTensor> {
    let d = *a.shape.last()?;
    if gamma.shape != [d] || beta.shape != [d] {
        return None;
    }
    let mut data = a.data.clone();
    for_each_lane(&a.shape, a.shape.len() - 1, |base, _, len| {
        let x = &a.data[base..base + len];
        let mean = x.iter().sum::<f64>() / len as f64;
        let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / len as f64;
        let inv = 1.0 / (var + eps).sqrt();
        for k in 0..len {
            data[base + k] = (x[k] - mean) * inv * gamma.data[k] + beta.data[k];
        }
    });
    Some(RefTensor::new(a.shape.clone(), data))
}

/// `x / sqrt(mean(x²) + eps) * gamma` over the last axis.
pub fn rms_norm(a: &RefTensor, gamma: &RefTensor, eps: f64) -> Option<RefTensor> {
    let d = *a.shape.last()?;
    if gamma.shape != [d] {
        return None;
    }
    let mut data = a.data.clone();
    for_each_lane(&a.shape, a.shape.len() - 1, |base, _, len| {
        let x = &a.data[base..base + len];
        let ms = x.iter().map(|v| v * v).sum::<f64>() / len as f64;
        let inv = 1.0 / (ms + eps).sqrt();
        for k in 0..len {
            data[base + k] = x[k] * inv * gamma.data[k];
        }
    });
    Some(RefTensor::new(a.shape.clone(), data))
}

/// `[..., m, k] × [..., k, n] → [..., m, n]`, the leading axes broadcast.
pub fn matmul(a: &RefTensor, b: &RefTensor) -> Option<RefTensor> {
    let (ra, rb) = (a.shape.len(), b.shape.len());
    if ra < 2 || rb < 2 || a.shape[ra - 1] != b.shape[rb - 2] {
        return None;
    }
    let (m, k, n) = (a.shape[ra - 2], a.shape[ra - 1], b.shape[rb - 1]);
    let (batch_a, batch_b) = (&a.shape[..ra - 2], &b.shape[..rb - 2]);
    let batch = broadcast_shape(batch_a, batch_b)?;
    // Strides in whole matrices; each matrix is a contiguous block.
    let (sa, sb) = (
        broadcast_strides(batch_a, &batch),
        broadcast_strides(batch_b, &batch),
    );
    let mut data = Vec::new();
    for_each_index(&batch, |idx| {
        let (oa, ob) = (offset(idx, &sa) * m * k, offset(idx, &sb) * k * n);
        for i in 0..m {
            for j in 0..n {
                let dot = (0..k)
                    .map(|p| a.data[oa + i * k + p] * b.data[ob + p * n + j])
                    .sum();
                data.push(dot);
            }
        }
    });
    let mut shape = batch;
    shape.extend([m, n]);
    Some(RefTensor::new(shape, data))
}

/// `out.dims[i] = in.dims[perm[i]]`.
pub fn permute(a: &RefTensor, perm: &[usize]) -> Option<RefTensor> {
    let mut sorted = perm.to_vec();
    sorted.sort_unstable();
    if sorted != (0..a.shape.len()).collect::<Vec<_>>() {
        return None;
    }
    let st = strides(&a.shape);
    let shape: Vec<usize> = perm.iter().map(|&p| a.shape[p]).collect();
    let read: Vec<usize> = perm.iter().map(|&p| st[p]).collect();
    let mut data = Vec::new();
    for_each_index(&shape, |idx| data.push(a.data[offset(idx, &read)]));
    Some(RefTensor::new(shape, data))
}

/// Elements `start..end` of `axis`.
pub fn slice(a: &RefTensor, axis: usize, start: usize, end: usize) -> Option<RefTensor> {
    if axis >= a.shape.len() || start > end || end > a.shape[axis] {
        return None;
    }
    let st = strides(&a.shape);
    let mut shape = a.shape.clone();
    shape[axis] = end - start;
    let mut data = Vec::new();
    for_each_index(&shape, |idx| {
        data.push(a.data[start * st[axis] + offset(idx, &st)])
    });
    Some(RefTensor::new(shape, data))
}

/// Concatenation along `axis`; all other dims must be equal.
pub fn concat(parts: &[&RefTensor], axis: usize) -> Option<RefTensor> {
    let first = parts.first()?;
    if axis >= first.shape.len() {
        return None;
    }
    let mut shape = first.shape.clone();
    shape[axis] = 0;
    for p in parts {
        let mut other = p.shape.clone();
        if other.len() != shape.len() {
            return None;
        }
        shape[axis] += other[axis];
        other[axis] = shape[axis];
        if other != shape {
            return None;
        }
    }
    let mut data = Vec::new();
    for_each_index(&shape, |idx| {
        let mut local = idx.to_vec();
        for p in parts {
            if local[axis] < p.shape[axis] {
                data.push(p.data[offset(&local, &strides(&p.shape))]);
                return;
            }
            local[axis] -= p.shape[axis];
        }
    });
    Some(RefTensor::new(shape, data))
}

/// Rows of `table` (`[V, D]`) picked by `ids` → `ids.shape + [D]`. `Err(id)` for an id that is not an integer in
/// `0..V`.
pub fn embedding(table: &RefTensor, ids: &RefTensor) -> Result<Option<RefTensor>, f64> {
    let &[vocab, d] = table.shape.as_slice() else {
        return Ok(None);
    };
    let mut data = Vec::with_capacity(ids.numel() * d);
    for &id in &ids.data {
        if !(id >= 0.0 && id < vocab as f64 && id.fract() == 0.0) {
            return Err(id);
        }
        let row = id as usize;
        data.extend_from_slice(&table.data[row * d..(row + 1) * d]);
    }
    let mut shape = ids.shape.clone();
    shape.push(d);
    Ok(Some(RefTensor::new(shape, data)))
}

/// `state` with elements `[start, start + len)` of `axis` replaced by `value` (`len` its length there); `None` when
/// the value does not fit there or differs from the state outside that axis.
pub fn write(state: &RefTensor, axis: usize, start: usize, value: &RefTensor) -> Option<RefTensor> {
    let (s, v) = (&state.shape, &value.shape);
    if axis >= s.len() || v.len() != s.len() || (0..s.len()).any(|d| d != axis && s[d] != v[d]) {
        return None;
    }
    if start.checked_add(v[axis])? > s[axis] {
        return None;
    }
    let inner: usize = s[axis + 1..].iter().product();
    let outer: usize = s[..axis].iter().product();
    let mut out = state.clone();
    for o in 0..outer {
        for a in 0..v[axis] {
            let src = (o * v[axis] + a) * inner;
            let dst = (o * s[axis] + start + a) * inner;
            out.data[dst..dst + inner].copy_from_slice(&value.data[src..src + inner]);
        }
    }
    Some(out)
}

/// The larger of `x` and `y`, NaN where either is (PyTorch's `maximum` and `amax`; `f64::max` skips a NaN).
fn maximum(x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        f64::NAN
    } else {
        x.max(y)
    }
}
