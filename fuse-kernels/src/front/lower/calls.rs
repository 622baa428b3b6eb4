//! Method calls and free functions: tensor ops, sub-model calls (inlined), and the model-language built-ins.

use proc_macro2::Span;
use syn::spanned::Spanned;

use super::{dim_of, Instance, Lowerer, Scope, Value, MAX_CALL_DEPTH};
use crate::front::consts::ConstVal;
use crate::ir::{BinaryOp, DType, Op, ReduceOp, Shape, UnaryOp};

/// The tensor methods, for the "unknown method" message.
const TENSOR_METHODS: &str = "neg abs exp log sqrt rsqrt tanh sigmoid relu gelu gelu_tanh silu square, \
add sub mul div max min pow lt le gt ge eq ne, sum mean max (axis, keepdim), softmax, layer_norm, rms_norm, \
matmul, t, transpose, permute, reshape, slice, to_f32, dim";

impl Lowerer<'_> {
    pub(super) fn eval_method(&mut self, m: &syn::ExprMethodCall) -> Value {
        if let Some(turbofish) = &m.turbofish {
            self.diags
                .error(turbofish.span(), "generic method calls are not supported in a model");
            return Value::Poison;
        }
        let receiver = self.eval(&m.receiver);
        let method = m.method.to_string();
        match receiver {
            Value::Poison => {
                for a in &m.args {
                    self.eval(a);
                }
                Value::Poison
            }
            Value::Model(inst) => {
                let args: Vec<Value> = m.args.iter().map(|a| self.eval(a)).collect();
                self.call_model(inst, &m.method, args)
            }
            Value::Tensor(id) => self.tensor_method(id, m, &method),
            Value::Const(_) => match crate::front::consts::eval_const(
                &syn::Expr::MethodCall(m.clone()),
                &self.src.consts,
                &self.instance_generics(),
            ) {
                Ok(c) => Value::Const(c),
                Err(e) => {
                    self.diags.push(e);
                    Value::Poison
                }
            },
            Value::Models(_) => {
                self.diags.error(
                    m.method.span(),
                    "an array of sub-models is used with `for layer in &self.layers` or indexed with a constant",
                );
                Value::Poison
            }
            _ => {
                self.diags
                    .error(m.method.span(), format!("no method `{method}` on this value"));
                Value::Poison
            }
        }
    }

    /// Inlines `inst.method(args)`: the callee sees only `self` and its arguments.
    fn call_model(&mut self, inst: Instance, method: &syn::Ident, args: Vec<Value>) -> Value {
        let owner = self.src.structs[inst.def].name.to_string();
        let Some(f) = self
            .src
            .methods
            .get(&(owner.clone(), method.to_string()))
            .cloned()
        else {
            self.diags.error(
                method.span(),
                format!("model `{owner}` has no method `{method}`"),
            );
            return Value::Poison;
        };
        let key = format!("{owner}::{method}");
        if self.call_stack.contains(&key) {
            self.diags.error(
                method.span(),
                format!("`{key}` calls itself: recursion cannot be unrolled into a static graph; use `for` over a constant range"),
            );
            return Value::Poison;
        }
        if self.call_stack.len() >= MAX_CALL_DEPTH {
            self.diags
                .error(method.span(), "model calls nest too deeply");
            return Value::Poison;
        }
        if !matches!(f.sig.inputs.first(), Some(syn::FnArg::Receiver(_))) {
            self.diags
                .error(f.sig.ident.span(), "model methods take `&self` first");
            return Value::Poison;
        }
        let params: Vec<&syn::PatType> = f
            .sig
            .inputs
            .iter()
            .filter_map(|a| match a {
                syn::FnArg::Typed(t) => Some(t),
                syn::FnArg::Receiver(_) => None,
            })
            .collect();
        if params.len() != args.len() {
            self.diags.error(
                method.span(),
                format!(
                    "`{key}` takes {} argument(s), {} given",
                    params.len(),
                    args.len()
                ),
            );
            return Value::Poison;
        }
        if let Some(r) = f.sig.receiver() {
            if r.mutability.is_some() {
                self.diags.error(
                    r.span(),
                    "model methods take `&self`: a model cannot mutate itself",
                );
            }
        }
        self.scopes.push(Scope {
            vars: vec![("self".to_string(), Value::Model(inst))],
        });
        for (p, v) in params.iter().zip(args) {
            self.bind_pat(&p.pat, v);
        }
        self.call_stack.push(key);
        let out = self.eval_fn_body(&f.block);
        self.call_stack.pop();
        self.scopes.pop();
        out
    }

    fn args(&mut self, m: &syn::ExprMethodCall) -> Vec<Value> {
        m.args.iter().map(|a| self.eval(a)).collect()
    }

    fn arity(&mut self, m: &syn::ExprMethodCall, n: usize, usage: &str) -> bool {
        if m.args.len() == n {
            return true;
        }
        self.diags.error(
            m.method.span(),
            format!("`{}` takes {n} argument(s): {usage}", m.method),
        );
        false
    }

    fn const_int(&mut self, v: &Value, span: Span, what: &str) -> Option<i64> {
        match v {
            Value::Const(ConstVal::Int(i)) => Some(*i),
            Value::Poison => None,
            _ => {
                self.diags
                    .error(span, format!("{what} must be an integer constant"));
                None
            }
        }
    }

    fn const_float(&mut self, v: &Value, span: Span, what: &str) -> Option<f64> {
        match v {
            Value::Const(c) if c.as_f64().is_some() => c.as_f64(),
            Value::Poison => None,
            _ => {
                self.diags.error(span, format!("{what} must be a constant"));
                None
            }
        }
    }

    /// A possibly negative axis, checked against `rank`.
    fn axis(&mut self, v: &Value, span: Span, rank: usize) -> Option<usize> {
        let a = self.const_int(v, span, "an axis")?;
        let norm = if a < 0 { a + rank as i64 } else { a };
        if norm < 0 || norm >= rank as i64 {
            self.diags.error(
                span,
                format!("axis {a} is out of range for a tensor of rank {rank}"),
            );
            return None;
        }
        Some(norm as usize)
    }

    fn tensor_method(&mut self, x: crate::ir::NodeId, m: &syn::ExprMethodCall, method: &str) -> Value {
        let span = m.span();
        let rank = self.g.ty(x).shape.rank();
        let arg_spans: Vec<Span> = m.args.iter().map(|a| a.span()).collect();
        if let Some(u) = UnaryOp::from_name(method) {
            if !self.arity(m, 0, "call it as `x.exp()`") {
                return Value::Poison;
            }
            return self.add(Op::Unary(u, x), span);
        }
        match method {
            "square" if self.arity(m, 0, "`x.square()`") => {
                return self.add(Op::Binary(BinaryOp::Mul, x, x), span)
            }
            "to_f32" if self.arity(m, 0, "`ids.to_f32()`") => {
                return self.add(Op::Cast(x, DType::F32), span)
            }
            "t" if self.arity(m, 0, "`x.t()` swaps the last two axes") => {
                if rank < 2 {
                    self.diags
                        .error(span, "`t()` needs a tensor of rank 2 or more");
                    return Value::Poison;
                }
                let mut perm: Vec<usize> = (0..rank).collect();
                perm.swap(rank - 1, rank - 2);
                return self.add(Op::Permute { input: x, perm }, span);
            }
            "permute" if self.arity(m, 1, "`x.permute([0, 2, 1, 3])`") => {
                let Some(perm) = self.int_list(&m.args[0]) else {
                    return Value::Poison;
                };
                let perm = perm.into_iter().map(|p| p.max(0) as usize).collect();
                return self.add(Op::Permute { input: x, perm }, span);
            }
            "reshape" if self.arity(m, 1, "`x.reshape([batch, seq, HEADS, HEAD_DIM])`") => {
                let Some(shape) = self.dim_list(&m.args[0]) else {
                    return Value::Poison;
                };
                return self.add(Op::Reshape { input: x, shape }, span);
            }
            _ => {}
        }
        let args = self.args(m);
        if args.iter().any(|a| matches!(a, Value::Poison)) {
            return Value::Poison;
        }
        match method {
            "sum" | "mean" | "max" if args.len() == 2 => {
                let op = match method {
                    "sum" => ReduceOp::Sum,
                    "mean" => ReduceOp::Mean,
                    _ => ReduceOp::Max,
                };
                let Some(axis) = self.axis(&args[0], arg_spans[0], rank) else {
                    return Value::Poison;
                };
                let keepdim = match &args[1] {
                    Value::Const(ConstVal::Bool(b)) => *b,
                    _ => {
                        self.diags
                            .error(arg_spans[1], "keepdim must be `true` or `false`");
                        return Value::Poison;
                    }
                };
                self.along_last_axis(x, axis, span, |input, axis| Op::Reduce {
                    op,
                    input,
                    axis,
                    keepdim,
                }, keepdim)
            }
            _ if BinaryOp::from_method(method).is_some() => {
                let Some(op) = BinaryOp::from_method(method) else {
                    return Value::Poison;
                };
                if !self.arity(m, 1, "one tensor or constant") {
                    return Value::Poison;
                }
                let Some(y) = self.operand(&args[0], arg_spans[0]) else {
                    return Value::Poison;
                };
                self.add(Op::Binary(op, x, y), span)
            }
            "matmul" if self.arity(m, 1, "`a.matmul(&b)`") => {
                let Some(y) = self.operand(&args[0], arg_spans[0]) else {
                    return Value::Poison;
                };
                self.add(Op::MatMul(x, y), span)
            }
            "softmax" if self.arity(m, 1, "`x.softmax(axis)`") => {
                let Some(axis) = self.axis(&args[0], arg_spans[0], rank) else {
                    return Value::Poison;
                };
                self.along_last_axis(x, axis, span, |input, axis| Op::Softmax { input, axis }, true)
            }
            "layer_norm" if self.arity(m, 3, "`x.layer_norm(&gamma, &beta, eps)`") => {
                let (Some(gamma), Some(beta)) = (
                    self.operand(&args[0], arg_spans[0]),
                    self.operand(&args[1], arg_spans[1]),
                ) else {
                    return Value::Poison;
                };
                let Some(eps) = self.const_float(&args[2], arg_spans[2], "eps") else {
                    return Value::Poison;
                };
                self.add(
                    Op::LayerNorm {
                        input: x,
                        gamma,
                        beta,
                        eps,
                    },
                    span,
                )
            }
            "rms_norm" if self.arity(m, 2, "`x.rms_norm(&gamma, eps)`") => {
                let Some(gamma) = self.operand(&args[0], arg_spans[0]) else {
                    return Value::Poison;
                };
                let Some(eps) = self.const_float(&args[1], arg_spans[1], "eps") else {
                    return Value::Poison;
                };
                self.add(Op::RmsNorm { input: x, gamma, eps }, span)
            }
            "transpose" if self.arity(m, 2, "`x.transpose(axis_a, axis_b)`") => {
                let (Some(a), Some(b)) = (
                    self.axis(&args[0], arg_spans[0], rank),
                    self.axis(&args[1], arg_spans[1], rank),
                ) else {
                    return Value::Poison;
                };
                let mut perm: Vec<usize> = (0..rank).collect();
                perm.swap(a, b);
                self.add(Op::Permute { input: x, perm }, span)
            }
            "slice" if self.arity(m, 3, "`x.slice(axis, start, end)`") => {
                let Some(axis) = self.axis(&args[0], arg_spans[0], rank) else {
                    return Value::Poison;
                };
                let (Some(start), Some(end)) = (
                    self.const_int(&args[1], arg_spans[1], "a slice start"),
                    self.const_int(&args[2], arg_spans[2], "a slice end"),
                ) else {
                    return Value::Poison;
                };
                if start < 0 || end < 0 {
                    self.diags.error(span, "slice bounds must be non-negative");
                    return Value::Poison;
                }
                self.add(
                    Op::Slice {
                        input: x,
                        axis,
                        start: start as usize,
                        end: end as usize,
                    },
                    span,
                )
            }
            "dim" if self.arity(m, 1, "`x.dim(axis)`") => {
                let Some(axis) = self.axis(&args[0], arg_spans[0], rank) else {
                    return Value::Poison;
                };
                Value::Dim(self.g.ty(x).shape.0[axis].clone())
            }
            "sum" | "mean" | "max" | "min" | "matmul" | "softmax" | "layer_norm" | "rms_norm"
            | "transpose" | "permute" | "reshape" | "slice" | "dim" | "square" | "to_f32" | "t" => {
                Value::Poison // arity already reported
            }
            other => {
                self.diags.error(
                    m.method.span(),
                    format!("unknown tensor method `{other}`; the supported ops are: {TENSOR_METHODS}"),
                );
                Value::Poison
            }
        }
    }

    /// Canonicalises a reduction or softmax over `axis` to one over the last axis (the only form the planner and
    /// the kernels know): permute `axis` to the end, apply `make`, and permute back when the axis is kept.
    fn along_last_axis(
        &mut self,
        x: crate::ir::NodeId,
        axis: usize,
        span: Span,
        make: impl Fn(crate::ir::NodeId, usize) -> Op,
        axis_kept: bool,
    ) -> Value {
        let rank = self.g.ty(x).shape.rank();
        if axis + 1 == rank {
            return self.add(make(x, axis), span);
        }
        let mut perm: Vec<usize> = (0..rank).filter(|&a| a != axis).collect();
        perm.push(axis);
        let Value::Tensor(moved) = self.add(Op::Permute { input: x, perm: perm.clone() }, span) else {
            return Value::Poison;
        };
        let Value::Tensor(y) = self.add(make(moved, rank - 1), span) else {
            return Value::Poison;
        };
        if !axis_kept {
            return Value::Tensor(y);
        }
        let mut inverse = vec![0; rank];
        for (i, &p) in perm.iter().enumerate() {
            inverse[p] = i;
        }
        self.add(Op::Permute { input: y, perm: inverse }, span)
    }

    fn int_list(&mut self, e: &syn::Expr) -> Option<Vec<i64>> {
        let elems = self.array_elems(e)?;
        let mut out = Vec::new();
        for el in elems {
            let v = self.eval(&el);
            out.push(self.const_int(&v, el.span(), "each entry")?);
        }
        Some(out)
    }

    fn dim_list(&mut self, e: &syn::Expr) -> Option<Shape> {
        let elems = self.array_elems(e)?;
        let mut dims = Vec::new();
        for el in elems {
            let v = self.eval(&el);
            match dim_of(&v) {
                Some(d) => dims.push(d),
                None => {
                    if !matches!(v, Value::Poison) {
                        self.diags.error(
                            el.span(),
                            "a reshape dim is a positive constant, a dynamic dim name, or a product of them",
                        );
                    }
                    return None;
                }
            }
        }
        Some(Shape(dims))
    }

    fn array_elems(&mut self, e: &syn::Expr) -> Option<Vec<syn::Expr>> {
        match e {
            syn::Expr::Array(a) => Some(a.elems.iter().cloned().collect()),
            syn::Expr::Reference(r) => self.array_elems(&r.expr),
            other => {
                self.diags
                    .error(other.span(), "expected an array literal like `[0, 2, 1, 3]`");
                None
            }
        }
    }

    pub(super) fn eval_call(&mut self, c: &syn::ExprCall) -> Value {
        let name = match c.func.as_ref() {
            syn::Expr::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
            _ => None,
        };
        let span = c.span();
        match (name.as_deref(), c.args.len()) {
            (Some("where_"), 3) => {
                let vals: Vec<Value> = c.args.iter().map(|a| self.eval(a)).collect();
                let ids: Vec<Option<crate::ir::NodeId>> = vals
                    .iter()
                    .zip(&c.args)
                    .map(|(v, a)| self.operand(v, a.span()))
                    .collect();
                match ids[..] {
                    [Some(mask), Some(a), Some(b)] => self.add(Op::Where(mask, a, b), span),
                    _ => Value::Poison,
                }
            }
            (Some("embedding"), 2) => {
                let table = self.eval(&c.args[0]);
                let ids = self.eval(&c.args[1]);
                match (
                    self.operand(&table, c.args[0].span()),
                    self.operand(&ids, c.args[1].span()),
                ) {
                    (Some(table), Some(ids)) => self.add(Op::Embedding { table, ids }, span),
                    _ => Value::Poison,
                }
            }
            (Some("concat"), 2) => {
                let Some(elems) = self.array_elems(&c.args[0]) else {
                    return Value::Poison;
                };
                let mut inputs = Vec::new();
                for el in &elems {
                    let v = self.eval(el);
                    inputs.push(self.operand(&v, el.span()));
                }
                let Some(inputs) = inputs.into_iter().collect::<Option<Vec<_>>>() else {
                    return Value::Poison;
                };
                let Some(first) = inputs.first() else {
                    self.diags.error(span, "concat needs at least one tensor");
                    return Value::Poison;
                };
                let rank = self.g.ty(*first).shape.rank();
                let axis_v = self.eval(&c.args[1]);
                let Some(axis) = self.axis(&axis_v, c.args[1].span(), rank) else {
                    return Value::Poison;
                };
                self.add(Op::Concat { inputs, axis }, span)
            }
            (Some(f @ ("where_" | "embedding" | "concat")), n) => {
                let usage = match f {
                    "where_" => "`where_(mask, a, b)`",
                    "embedding" => "`embedding(&table, &ids)`",
                    _ => "`concat([a, b], axis)`",
                };
                self.diags
                    .error(c.func.span(), format!("`{f}` takes {usage}, got {n} argument(s)"));
                Value::Poison
            }
            _ => {
                self.diags.error(
                    c.func.span(),
                    "calls to functions outside the model are not supported; the built-ins are `where_`, `embedding` and `concat`, and a model's own methods are called as `self.method(..)`",
                );
                Value::Poison
            }
        }
    }
}
