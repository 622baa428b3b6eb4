//! Tensor methods: `x.exp()`, `x.matmul(&w)`, `x.sum(-1, true)`, `x.reshape([b, s, 4, 8])`, ... Each checks its
//! arguments (constants where the graph needs them) and adds one op, whose type errors point at the call.

use super::{closest, dim_value, Lowerer, Value};
use crate::front::consts::ConstVal;
use crate::front::diag::At;
use crate::infer::MAX_ELEMENTS;
use crate::ir::{BinaryOp, DType, Dim, NodeId, Op, ReduceOp, UnaryOp};

/// Every tensor method with how it is called, for arity errors and the "unknown method" message.
const METHODS: &[(&str, &str)] = &[
    ("neg", "x.neg()"),
    ("abs", "x.abs()"),
    ("exp", "x.exp()"),
    ("log", "x.log()"),
    ("sqrt", "x.sqrt()"),
    ("rsqrt", "x.rsqrt()"),
    ("tanh", "x.tanh()"),
    ("sigmoid", "x.sigmoid()"),
    ("relu", "x.relu()"),
    ("gelu", "x.gelu()"),
    ("gelu_tanh", "x.gelu_tanh()"),
    ("silu", "x.silu()"),
    ("erf", "x.erf()"),
    ("sin", "x.sin()"),
    ("cos", "x.cos()"),
    ("floor", "x.floor()"),
    ("ceil", "x.ceil()"),
    ("round", "x.round()"),
    ("trunc", "x.trunc()"),
    ("square", "x.square()"),
    ("clone", "x.clone()"),
    ("fused", "expr.fused()"),
    ("to_f32", "ids.to_f32()"),
    ("to_i64", "positions.to_i64()"),
    ("add", "a.add(&b)"),
    ("sub", "a.sub(&b)"),
    ("mul", "a.mul(&b)"),
    ("div", "a.div(&b)"),
    ("max", "a.max(&b) or x.max(axis, keepdim)"),
    ("min", "a.min(&b) or x.min(axis, keepdim)"),
    ("argmax", "x.argmax(axis, keepdim)"),
    ("argmin", "x.argmin(axis, keepdim)"),
    ("pow", "a.pow(&b)"),
    ("clamp", "x.clamp(lo, hi)"),
    ("lt", "a.lt(&b)"),
    ("le", "a.le(&b)"),
    ("gt", "a.gt(&b)"),
    ("ge", "a.ge(&b)"),
    ("eq", "a.eq(&b)"),
    ("ne", "a.ne(&b)"),
    ("sum", "x.sum(axis, keepdim)"),
    ("mean", "x.mean(axis, keepdim)"),
    ("softmax", "x.softmax(axis)"),
    ("log_softmax", "x.log_softmax(axis)"),
    ("cumsum", "x.cumsum(axis)"),
    ("layer_norm", "x.layer_norm(&gamma, &beta, eps)"),
    ("rms_norm", "x.rms_norm(&gamma, eps)"),
    ("matmul", "a.matmul(&b)"),
    ("t", "x.t()"),
    ("transpose", "x.transpose(axis_a, axis_b)"),
    ("permute", "x.permute([0, 2, 1, 3])"),
    ("reshape", "x.reshape([batch, seq, HEADS, HEAD_DIM])"),
    ("slice", "x.slice(axis, start, end)"),
    ("narrow", "x.narrow(axis, start, len)"),
    ("write", "self.cache.write(axis, start, value)"),
    ("dim", "x.dim(axis)"),
];

/// Names from other tensor libraries, and what to write here.
const ALIASES: &[(&str, &str)] = &[
    ("view", "use `x.reshape([..])`"),
    ("flatten", "use `x.reshape([..])`"),
    (
        "unsqueeze",
        "use `x.reshape([..])` with a 1 where the new axis goes",
    ),
    ("squeeze", "use `x.reshape([..])` without the size-1 axis"),
    ("mm", "use `a.matmul(&b)`"),
    ("bmm", "use `a.matmul(&b)`"),
    ("dot", "use `a.matmul(&b)`"),
    ("size", "use `x.dim(axis)`"),
    ("shape", "use `x.dim(axis)`"),
    ("float", "use `x.to_f32()`"),
    ("masked_fill", "use `where_(mask, value, x)`"),
    (
        "expand",
        "size-1 axes broadcast in every op: use the tensor as it is",
    ),
    (
        "expand_as",
        "size-1 axes broadcast in every op: use the tensor as it is",
    ),
    ("chunk", "use `x.narrow(axis, start, len)` for each part"),
    ("split", "use `x.narrow(axis, start, len)` for each part"),
    (
        "tril",
        "compare two `arange`s' positions and pick with `where_` (the README's causal mask)",
    ),
    (
        "triu",
        "compare two `arange`s' positions and pick with `where_` (the README's causal mask)",
    ),
    (
        "var",
        "use `(x - x.mean(axis, true)).square().mean(axis, true)`, the biased variance (PyTorch's default \
         divides by n - 1)",
    ),
    (
        "std",
        "use `(x - x.mean(axis, true)).square().mean(axis, true).sqrt()`, from the biased variance (PyTorch's \
         default divides by n - 1)",
    ),
    (
        "contiguous",
        "it is not needed: the compiler plans memory layouts; remove it",
    ),
    ("powi", "use `x.pow(n)` or `x.square()`"),
    ("powf", "use `x.pow(y)`"),
    ("ln", "use `x.log()`"),
    ("fix", "use `x.trunc()`"),
    ("clip", "use `x.clamp(lo, hi)`"),
    ("reciprocal", "use `1.0 / x`"),
    (
        "round_ties_even",
        "use `x.round()` (ties to even, as PyTorch's)",
    ),
    ("rint", "use `x.round()` (ties to even, as PyTorch's)"),
];

impl Lowerer<'_> {
    pub(super) fn tensor_method(&mut self, x: NodeId, m: &syn::ExprMethodCall) -> Value {
        let method = m.method.to_string();
        let at = At::until(&m.method, m.paren_token.span.close());
        let usage = METHODS.iter().find(|(n, _)| *n == method).map(|(_, u)| *u);
        let Some(usage) = usage else {
            self.eval_args_for_errors(&m.args);
            self.diags.error_at(&m.method, unknown_method(&method));
            return Value::Poison;
        };
        // Arrays are read as syntax (`[0, 2, 1, 3]`), so these two take their argument unevaluated.
        match method.as_str() {
            "permute" if self.arity(m, 1, usage) => return self.permute(x, &m.args[0], at),
            "reshape" if self.arity(m, 1, usage) => {
                let Some(shape) = self.dim_list(&m.args[0], x) else {
                    return Value::Poison;
                };
                return self.add(Op::Reshape { input: x, shape }, at);
            }
            "permute" | "reshape" => return Value::Poison,
            _ => {}
        }
        let args: Vec<Value> = m.args.iter().map(|a| self.eval(a)).collect();
        let arg_at: Vec<At> = m.args.iter().map(At::of).collect();
        if args.iter().any(|a| matches!(a, Value::Poison)) {
            return Value::Poison;
        }
        let rank = self.g.ty(x).shape.rank();
        match (method.as_str(), args.len()) {
            ("sum" | "mean" | "max" | "min" | "argmax" | "argmin", 2) => {
                let op = match method.as_str() {
                    "sum" => ReduceOp::Sum,
                    "mean" => ReduceOp::Mean,
                    _ => ReduceOp::Max,
                };
                let Some(axis) = self.axis(&args[0], arg_at[0], x) else {
                    return Value::Poison;
                };
                let keepdim = match &args[1] {
                    Value::Const(ConstVal::Bool(b)) => *b,
                    other => {
                        let what = self.describe(other);
                        self.diags.error(
                            arg_at[1],
                            format!("keepdim must be `true` or `false`, not {what}"),
                        );
                        return Value::Poison;
                    }
                };
                if let Some(smallest) = match method.as_str() {
                    "argmax" => Some(false),
                    "argmin" => Some(true),
                    _ => None,
                } {
                    return self.first_extreme(x, axis, keepdim, smallest, at);
                }
                let make = move |input, axis| Op::Reduce {
                    op,
                    input,
                    axis,
                    keepdim,
                };
                if method != "min" {
                    return self.along_last_axis(x, axis, at, make, keepdim);
                }
                // The minimum is the negated maximum of the negated values: exact, and NaN where the lane holds
                // one, as `max` is. Both negations fuse into the reduction's kernel.
                let Value::Tensor(negated) = self.add(Op::Unary(UnaryOp::Neg, x), at) else {
                    return Value::Poison;
                };
                match self.along_last_axis(negated, axis, at, make, keepdim) {
                    Value::Tensor(largest) => self.add(Op::Unary(UnaryOp::Neg, largest), at),
                    other => other,
                }
            }
            (name, 0) if UnaryOp::from_name(name).is_some() => match UnaryOp::from_name(name) {
                Some(u) => self.add(Op::Unary(u, x), at),
                None => Value::Poison,
            },
            ("square", 0) => self.add(Op::Binary(BinaryOp::Mul, x, x), at),
            ("clone", 0) => Value::Tensor(x),
            ("to_f32", 0) => self.add(Op::Cast(x, DType::F32), at),
            // PyTorch's `.long()`: toward zero. Computed ids stay f32 whole numbers (exact below 2²⁴), which an
            // embedding reads when their range is bounded (`crate::id_range`); i64 ids are already integers.
            ("to_i64", 0) => match self.g.ty(x).dtype {
                DType::I64 => Value::Tensor(x),
                _ => self.add(Op::Unary(UnaryOp::Trunc, x), at),
            },
            ("t", 0) => {
                if rank < 2 {
                    let shape = self.g.fmt_shape(&self.g.ty(x).shape);
                    self.diags.error(
                        at,
                        format!("`t()` swaps the last two axes, so it needs rank 2 or more, but this is {shape}"),
                    );
                    return Value::Poison;
                }
                let mut perm: Vec<usize> = (0..rank).collect();
                perm.swap(rank - 1, rank - 2);
                self.add(Op::Permute { input: x, perm }, at)
            }
            (name, 1) if BinaryOp::from_method(name).is_some() => {
                let (Some(op), Some(y)) = (
                    BinaryOp::from_method(name),
                    self.operand(&args[0], arg_at[0]),
                ) else {
                    return Value::Poison;
                };
                self.add(Op::Binary(op, x, y), at)
            }
            // PyTorch's `clamp(min, max)`: `min(max(x, lo), hi)`, so `hi` wins where `lo > hi`, and a NaN stays NaN.
            ("clamp", 2) => {
                let lo = self.operand(&args[0], arg_at[0]);
                let hi = self.operand(&args[1], arg_at[1]);
                let (Some(lo), Some(hi)) = (lo, hi) else {
                    return Value::Poison;
                };
                match self.add(Op::Binary(BinaryOp::Max, x, lo), at) {
                    Value::Tensor(low) => self.add(Op::Binary(BinaryOp::Min, low, hi), at),
                    other => other,
                }
            }
            ("matmul", 1) => match self.operand(&args[0], arg_at[0]) {
                Some(y) => self.add(Op::MatMul(x, y), at),
                None => Value::Poison,
            },
            // Row ops that keep the row's shape.
            (row_op @ ("softmax" | "cumsum"), 1) => match self.axis(&args[0], arg_at[0], x) {
                Some(axis) => self.along_last_axis(
                    x,
                    axis,
                    at,
                    |input, axis| match row_op {
                        "softmax" => Op::Softmax { input, axis },
                        _ => Op::Cumsum { input, axis },
                    },
                    true,
                ),
                None => Value::Poison,
            },
            ("log_softmax", 1) => match self.axis(&args[0], arg_at[0], x) {
                Some(axis) => self.log_softmax(x, axis, at),
                None => Value::Poison,
            },
            ("layer_norm", 3) => {
                let gamma = self.operand(&args[0], arg_at[0]);
                let beta = self.operand(&args[1], arg_at[1]);
                let eps = self.const_float(&args[2], arg_at[2], "eps");
                let (Some(gamma), Some(beta), Some(eps)) = (gamma, beta, eps) else {
                    return Value::Poison;
                };
                self.add(
                    Op::LayerNorm {
                        input: x,
                        gamma,
                        beta,
                        eps,
                    },
                    at,
                )
            }
            ("rms_norm", 2) => {
                let gamma = self.operand(&args[0], arg_at[0]);
                let eps = self.const_float(&args[1], arg_at[1], "eps");
                let (Some(gamma), Some(eps)) = (gamma, eps) else {
                    return Value::Poison;
                };
                self.add(
                    Op::RmsNorm {
                        input: x,
                        gamma,
                        eps,
                    },
                    at,
                )
            }
            ("transpose", 2) => {
                let a = self.axis(&args[0], arg_at[0], x);
                let b = self.axis(&args[1], arg_at[1], x);
                let (Some(a), Some(b)) = (a, b) else {
                    return Value::Poison;
                };
                let mut perm: Vec<usize> = (0..rank).collect();
                perm.swap(a, b);
                self.add(Op::Permute { input: x, perm }, at)
            }
            ("slice", 3) => self.slice(x, &args, &arg_at, at),
            ("narrow", 3) => self.narrow(x, &args, &arg_at, at),
            ("write", 3) => self.write_state(x, &args, &arg_at, at),
            ("dim", 1) => match self.axis(&args[0], arg_at[0], x) {
                Some(axis) => dim_value(&self.g.ty(x).shape.0[axis]),
                None => Value::Poison,
            },
            (_, n) => {
                self.diags.error(
                    at,
                    format!("`{method}` is called as `{usage}`, but this call has {n} argument(s)"),
                );
                Value::Poison
            }
        }
    }

    fn arity(&mut self, m: &syn::ExprMethodCall, n: usize, usage: &str) -> bool {
        if m.args.len() == n {
            return true;
        }
        self.diags.error(
            At::until(&m.method, m.paren_token.span.close()),
            format!(
                "`{}` is called as `{usage}`, but this call has {} argument(s)",
                m.method,
                m.args.len()
            ),
        );
        false
    }

    fn slice(&mut self, x: NodeId, args: &[Value], arg_at: &[At], at: At) -> Value {
        let axis = self.axis(&args[0], arg_at[0], x);
        let start = self.const_int(&args[1], arg_at[1], "a slice start");
        let end = self.const_int(&args[2], arg_at[2], "a slice end");
        let (Some(axis), Some(start), Some(end)) = (axis, start, end) else {
            return Value::Poison;
        };
        let (Ok(start), Ok(end)) = (usize::try_from(start), usize::try_from(end)) else {
            self.diags.error(
                at,
                format!("slice bounds count from the start of the axis and cannot be negative: got {start}..{end}"),
            );
            return Value::Poison;
        };
        // `end <= start` is left to inference, which says the slice is empty.
        self.add(
            Op::Slice {
                input: x,
                axis,
                start: Dim::fixed(start),
                len: Dim::fixed(end.saturating_sub(start)),
            },
            at,
        )
    }

    /// `x.narrow(axis, start, len)`: elements `[start, start + len)`, each bound a constant or a dim (`past`,
    /// `x.dim(1)`, `past * 2`); a bound the build cannot prove is checked at run time.
    fn narrow(&mut self, x: NodeId, args: &[Value], arg_at: &[At], at: At) -> Value {
        let axis = self.axis(&args[0], arg_at[0], x);
        let start = match (&args[1], axis) {
            (Value::Const(ConstVal::Int(n)), Some(axis)) if *n < 0 => {
                self.start_before_end(x, axis, n.unsigned_abs(), arg_at[1])
            }
            _ => self.dim_bound(&args[1], arg_at[1], "a narrow start", 0),
        };
        let len = self.dim_bound(&args[2], arg_at[2], "a narrow length", 1);
        let (Some(axis), Some(start), Some(len)) = (axis, start, len) else {
            return Value::Poison;
        };
        self.add(
            Op::Slice {
                input: x,
                axis,
                start,
                len,
            },
            at,
        )
    }

    /// A negative narrow start, PyTorch's: `back` elements before the end of the axis (`narrow(1, -1, 1)` is the
    /// last position, at `seq - 1` of a `seq`-long axis).
    fn start_before_end(&mut self, x: NodeId, axis: usize, back: u64, at: At) -> Option<Dim> {
        let size = self.g.ty(x).shape.0[axis].clone();
        let back = usize::try_from(back).unwrap_or(usize::MAX);
        let start = match size.as_static() {
            Some(n) => n.checked_sub(back).map(Dim::fixed),
            None => self.g.difference(&size, &Dim::fixed(back)),
        };
        if start.is_none() {
            let size = self.g.fmt_dim(&size);
            self.diags.error(
                at,
                format!(
                    "a narrow start of -{back} counts from the end of axis {axis}, of length {size}, and would start \
                     before it"
                ),
            );
        }
        start
    }

    /// `self.cache.write(axis, start, value)`: the state with `[start, start + len)` of `axis` replaced by
    /// `value`. A state is written once per call: a second write would have to order two in-place updates.
    fn write_state(&mut self, x: NodeId, args: &[Value], arg_at: &[At], at: At) -> Value {
        let axis = self.axis(&args[0], arg_at[0], x);
        let start = self.dim_bound(&args[1], arg_at[1], "a write start", 0);
        let value = self.operand(&args[2], arg_at[2]);
        let (Some(axis), Some(start), Some(value)) = (axis, start, value) else {
            return Value::Poison;
        };
        if let Op::State(index) = self.g.node(x).op {
            if self.state_writes.contains_key(&index) {
                let name = self.g.states[index as usize].name.clone();
                self.diags.error(
                    at,
                    format!(
                        "the state `{name}` is written a second time in this call; a call writes each state once \
                         (concatenate the values and write them together)"
                    ),
                );
                return Value::Poison;
            }
            self.state_writes.insert(index, at);
        }
        self.add(
            Op::Write {
                state: x,
                axis,
                start,
                value,
            },
            at,
        )
    }

    /// A narrow bound: an integer constant of at least `min`, or a dim.
    pub(super) fn dim_bound(&mut self, v: &Value, at: At, what: &str, min: i64) -> Option<Dim> {
        match v {
            Value::Dim(d) => Some(d.clone()),
            Value::Const(ConstVal::Int(n)) if *n >= min && *n as u64 <= MAX_ELEMENTS as u64 => {
                Some(Dim::fixed(*n as usize))
            }
            Value::Poison => None,
            other => {
                let found = self.describe(other);
                self.diags.error(
                    at,
                    format!(
                        "{what} must be an integer of at least {min} or a dim (`past`, `x.dim(1)`, a `#[dim]` \
                         argument of `forward`), but this is {found}"
                    ),
                );
                None
            }
        }
    }

    pub(super) fn const_int(&mut self, v: &Value, at: At, what: &str) -> Option<i64> {
        let found = match v {
            Value::Const(ConstVal::Int(i)) => return Some(*i),
            Value::Poison => return None,
            Value::Dim(d) => format!(
                "the dynamic dim `{}`, which is known only at run time",
                self.g.fmt_dim(d)
            ),
            other => self.describe(other),
        };
        self.diags.error(
            at,
            format!("{what} must be an integer constant, but this is {found}"),
        );
        None
    }

    fn const_float(&mut self, v: &Value, at: At, what: &str) -> Option<f64> {
        match v {
            Value::Const(c) if c.as_f64().is_some() => {
                let f = c.as_f64()?;
                self.finite_f32(f, at)
            }
            Value::Poison => None,
            other => {
                let found = self.describe(other);
                self.diags.error(
                    at,
                    format!("{what} must be a number constant, but this is {found}"),
                );
                None
            }
        }
    }

    /// A possibly negative axis of `x`, checked against its rank.
    pub(super) fn axis(&mut self, v: &Value, at: At, x: NodeId) -> Option<usize> {
        let a = self.const_int(v, at, "an axis")?;
        let shape = &self.g.ty(x).shape;
        let rank = shape.rank() as i64;
        let norm = if a < 0 { a.saturating_add(rank) } else { a };
        if norm < 0 || norm >= rank {
            let text = self.g.fmt_shape(shape);
            let valid = if rank == 0 {
                "a scalar has no axes".to_string()
            } else {
                format!("valid axes are 0..{rank}, or -{rank}..-1 counting from the end")
            };
            self.diags.error(
                at,
                format!(
                    "axis {a} is out of range for a tensor of shape {text} (rank {rank}); {valid}"
                ),
            );
            return None;
        }
        Some(norm as usize)
    }

    /// PyTorch's `log_softmax`: `s - log(sum(exp(s)))` with `s = x - max(x)` along `axis`, so a value far below
    /// its row's largest stays finite where `softmax().log()` would give `log(0)`. Made along the last axis (the
    /// input permuted there once, as for `softmax`), where the two reductions keep the axis and are read back over
    /// their rows: the whole of it is one row kernel.
    fn log_softmax(&mut self, x: NodeId, axis: usize, at: At) -> Value {
        let build = |this: &mut Self, x: NodeId, last: usize| {
            let reduce = |op, input| Op::Reduce {
                op,
                input,
                axis: last,
                keepdim: true,
            };
            let largest = tensor(this.add(reduce(ReduceOp::Max, x), at))?;
            let shifted = tensor(this.add(Op::Binary(BinaryOp::Sub, x, largest), at))?;
            let exp = tensor(this.add(Op::Unary(UnaryOp::Exp, shifted), at))?;
            let total = tensor(this.add(reduce(ReduceOp::Sum, exp), at))?;
            let log = tensor(this.add(Op::Unary(UnaryOp::Log, total), at))?;
            tensor(this.add(Op::Binary(BinaryOp::Sub, shifted, log), at))
        };
        self.along_last_axis_with(x, axis, at, build, true)
    }

    /// PyTorch's `argmax` (`argmin` where `smallest`): the position along `axis` of the row's first largest
    /// (smallest) value, or of its first NaN, which PyTorch counts as beyond every number. The positions are f32
    /// whole numbers, as every id the model computes is (an `embedding` reads them; [`crate::id_range`] bounds them
    /// by the axis). Made along the last axis from ops the planner makes two row kernels of: `m`, the row's largest
    /// of `x` (of `-x` for the smallest; NaN where the row holds one), then the positions where `x` equals `m` or is
    /// NaN, and the least of them, the other positions standing in as the last one, which every row reaches anyway.
    /// `+0.0` and `-0.0` are equal, as in PyTorch. Over an axis of length 0 there is no position: a dynamic one
    /// must be at least 1 (the plan report says so), as PyTorch refuses an empty reduction.
    fn first_extreme(
        &mut self,
        x: NodeId,
        axis: usize,
        keepdim: bool,
        smallest: bool,
        at: At,
    ) -> Value {
        let name = if smallest { "argmin" } else { "argmax" };
        let x = match self.g.ty(x).dtype {
            DType::F32 => x,
            // A mask's 0.0 and 1.0, as PyTorch's `argmax` of a bool tensor finds the first true.
            DType::Bool => match self.add(Op::Cast(x, DType::F32), at) {
                Value::Tensor(x) => x,
                other => return other,
            },
            DType::I64 => {
                let shape = self.g.fmt_shape(&self.g.ty(x).shape);
                self.diags.error(
                    at,
                    format!(
                        "`{name}` needs f32 values, but this operand holds integer ids (i64 {shape}); convert them \
                         with `.to_f32()` first (exact up to 2^24, as token ids are)"
                    ),
                );
                return Value::Poison;
            }
        };
        let build = |this: &mut Self, x: NodeId, last: usize| {
            let largest_along = |input, keepdim| Op::Reduce {
                op: ReduceOp::Max,
                input,
                axis: last,
                keepdim,
            };
            let negated = |this: &mut Self, v| tensor(this.add(Op::Unary(UnaryOp::Neg, v), at));
            let extreme = match smallest {
                true => {
                    let flipped = negated(this, x)?;
                    let largest = tensor(this.add(largest_along(flipped, true), at))?;
                    negated(this, largest)?
                }
                false => tensor(this.add(largest_along(x, true), at))?,
            };
            let hit = tensor(this.add(Op::Binary(BinaryOp::Eq, x, extreme), at))?;
            let nan = tensor(this.add(Op::Binary(BinaryOp::Ne, x, x), at))?;
            let len = this.g.ty(x).shape.0[last].clone();
            let static_len = len.as_static();
            let start = Dim::fixed(0);
            let ids = tensor(this.add(Op::Arange { start, len }, at))?;
            let positions = tensor(this.add(Op::Cast(ids, DType::F32), at))?;
            // The last position: a constant where the axis is static; else the positions' last, a view of them
            // that keeps their bound.
            let final_position = match static_len {
                Some(n) => this.scalar((n - 1) as f64, at.start),
                None => {
                    let start = this.start_before_end(positions, 0, 1, at)?;
                    let len = Dim::fixed(1);
                    let last = Op::Slice {
                        input: positions,
                        axis: 0,
                        start,
                        len,
                    };
                    tensor(this.add(last, at))?
                }
            };
            let at_hits = tensor(this.add(Op::Where(hit, positions, final_position), at))?;
            let candidates = tensor(this.add(Op::Where(nan, positions, at_hits), at))?;
            // The least candidate, made as `min(axis, ..)` is: the negated largest of the negated.
            let flipped = negated(this, candidates)?;
            let least = tensor(this.add(largest_along(flipped, keepdim), at))?;
            negated(this, least)
        };
        self.along_last_axis_with(x, axis, at, build, keepdim)
    }

    /// Canonicalises a reduction or softmax over `axis` to one over the last axis (the only form the planner and
    /// the kernels know): permute `axis` to the end, apply `make`, and permute back when the axis is kept.
    fn along_last_axis(
        &mut self,
        x: NodeId,
        axis: usize,
        at: At,
        make: impl Fn(NodeId, usize) -> Op,
        axis_kept: bool,
    ) -> Value {
        let one_op = |this: &mut Self, input, axis| tensor(this.add(make(input, axis), at));
        self.along_last_axis_with(x, axis, at, one_op, axis_kept)
    }

    /// [`Self::along_last_axis`] for what `build` makes of the input along its last axis (one op or several).
    fn along_last_axis_with(
        &mut self,
        x: NodeId,
        axis: usize,
        at: At,
        build: impl FnOnce(&mut Self, NodeId, usize) -> Option<NodeId>,
        axis_kept: bool,
    ) -> Value {
        let rank = self.g.ty(x).shape.rank();
        if axis + 1 == rank {
            return build(self, x, axis).map_or(Value::Poison, Value::Tensor);
        }
        let mut perm: Vec<usize> = (0..rank).filter(|&a| a != axis).collect();
        perm.push(axis);
        let Value::Tensor(moved) = self.add(
            Op::Permute {
                input: x,
                perm: perm.clone(),
            },
            at,
        ) else {
            return Value::Poison;
        };
        let Some(y) = build(self, moved, rank - 1) else {
            return Value::Poison;
        };
        if !axis_kept {
            return Value::Tensor(y);
        }
        let mut inverse = vec![0; rank];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p] = i;
        }
        self.add(
            Op::Permute {
                input: y,
                perm: inverse,
            },
            at,
        )
    }
}

fn unknown_method(method: &str) -> String {
    if let Some((_, instead)) = ALIASES.iter().find(|(n, _)| *n == method) {
        return format!("unknown tensor method `{method}`; {instead}");
    }
    let names = METHODS.iter().map(|(n, _)| *n);
    if let Some(c) = closest(method, names) {
        return format!("unknown tensor method `{method}`; did you mean `{c}`?");
    }
    let all: Vec<&str> = METHODS.iter().map(|(n, _)| *n).collect();
    format!(
        "unknown tensor method `{method}`; the tensor methods are: {}",
        all.join(", ")
    )
}

/// The node of a value that is a tensor.
pub(super) fn tensor(v: Value) -> Option<NodeId> {
    match v {
        Value::Tensor(t) => Some(t),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::output_shape;
    use super::{unknown_method, ALIASES, METHODS};

    /// The output shape of `x.<call>` for an input `x` of `shape`, or its capture errors.
    fn shape_of(shape: &str, call: &str) -> Result<String, String> {
        output_shape(&format!(
            "(&self, #[shape({shape})] x: Tensor) -> Tensor {{ x.{call} }}"
        ))
    }

    /// `argmax` and `argmin` drop or keep their axis as the reductions do, take `keepdim` as they do, read a mask as
    /// its 0.0 and 1.0, and name themselves when given integer ids.
    #[test]
    fn first_extremes_have_a_reductions_shape() {
        assert_eq!(
            shape_of("b, 7, 5", "argmax(1, false)").as_deref(),
            Ok("[b, 5]")
        );
        assert_eq!(
            shape_of("b, 7, 5", "argmin(-1, true)").as_deref(),
            Ok("[b, 7, 1]")
        );
        assert_eq!(shape_of("b, s", "argmax(1, true)").as_deref(), Ok("[b, 1]"));
        let ids = shape_of("b, 3", "dim(1); arange(0, x.dim(1)).argmax(0, true)").unwrap_err();
        assert!(
            ids.contains("`argmax` needs f32 values, but this operand holds integer ids (i64 [3])"),
            "{ids}"
        );
        // A mask's first true, as PyTorch's `argmax` of a bool tensor.
        assert_eq!(
            shape_of("b, 3", "gt(0.0).argmax(1, false)").as_deref(),
            Ok("[b]")
        );
        let keepdim = shape_of("b, 3", "argmax(1, 1)").unwrap_err();
        assert!(
            keepdim.contains("keepdim must be `true` or `false`"),
            "{keepdim}"
        );
    }

    /// An alias is only reached for a name that is not a method: one that became a method must leave the list.
    #[test]
    fn no_alias_is_a_method() {
        for (alias, _) in ALIASES {
            assert!(
                METHODS.iter().all(|(m, _)| m != alias),
                "`{alias}` is a method"
            );
        }
        assert_eq!(
            unknown_method("var"),
            "unknown tensor method `var`; use `(x - x.mean(axis, true)).square().mean(axis, true)`, the biased \
             variance (PyTorch's default divides by n - 1)"
        );
    }
}
