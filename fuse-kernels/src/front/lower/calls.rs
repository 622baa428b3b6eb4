//! Calls: methods on models (inlined), on constants and on tensors (see `ops`), and the built-in functions
//! `where_`, `embedding`, `concat` and `arange`.

use super::ops::tensor;
use super::{closest, Instance, Lowerer, Scope, Value, MAX_CALL_DEPTH};
use crate::front::consts::{apply_method, ConstVal};
use crate::front::diag::At;
use crate::ir::{BinaryOp, DType, Dim, NodeId, Op, Shape};

const BUILTINS: [&str; 4] = ["where_", "embedding", "concat", "arange"];

impl Lowerer<'_> {
    pub(super) fn eval_method(&mut self, m: &syn::ExprMethodCall) -> Value {
        if let Some(turbofish) = &m.turbofish {
            self.diags.error_at(
                turbofish,
                "generic method calls are not supported in a model; remove the `::<..>`",
            );
            return Value::Poison;
        }
        let first = NodeId(self.g.nodes.len() as u32);
        let receiver = self.eval(&m.receiver);
        let method = m.method.to_string();
        let call_at = At::until(&m.method, m.paren_token.span.close());
        if method == "fused" {
            if let Value::Tensor(id) = receiver {
                return self.promise_fused(id, first, m, call_at);
            }
        }
        match receiver {
            Value::Tensor(id) => self.tensor_method(id, m),
            Value::Model(inst) => {
                let args: Vec<Value> = m.args.iter().map(|a| self.eval(a)).collect();
                self.call_model(inst, &m.method, call_at, args)
            }
            Value::Const(c) => {
                let args: Vec<Value> = m.args.iter().map(|a| self.eval(a)).collect();
                let mut consts = Vec::new();
                for a in &args {
                    match a {
                        Value::Const(c) => consts.push(c.clone()),
                        Value::Poison => return Value::Poison,
                        other => {
                            let what = self.describe(other);
                            self.diags.error(
                                call_at,
                                format!("`{method}` on the constant `{c}` needs constant arguments, not {what}"),
                            );
                            return Value::Poison;
                        }
                    }
                }
                match apply_method(&method, c, &consts) {
                    Ok(v) => Value::Const(v),
                    Err(msg) => {
                        self.diags.error_at(&m.method, msg);
                        Value::Poison
                    }
                }
            }
            Value::Models(ms) if method == "len" && m.args.is_empty() => {
                Value::Const(ConstVal::Int(ms.len as i64))
            }
            Value::Models(_) => {
                self.diags.error_at(
                    &m.method,
                    "an array of sub-models is looped over (`for layer in &self.layers`) or indexed with a constant \
                     (`self.layers[0]`); it has no method `{method}` besides `len()`"
                        .replace("{method}", &method),
                );
                Value::Poison
            }
            Value::Poison => {
                self.eval_args_for_errors(&m.args);
                Value::Poison
            }
            other => {
                let what = self.describe(&other);
                self.diags
                    .error_at(&m.method, format!("no method `{method}` on {what}"));
                Value::Poison
            }
        }
    }

    /// `expr.fused()`: the value of `expr`, plus the promise that the ops just added for it share one kernel.
    fn promise_fused(
        &mut self,
        value: NodeId,
        first: NodeId,
        m: &syn::ExprMethodCall,
        call_at: At,
    ) -> Value {
        if !m.args.is_empty() {
            self.eval_args_for_errors(&m.args);
            self.diags.error(
                call_at,
                "`fused` is called as `expr.fused()`, with no arguments",
            );
            return Value::Poison;
        }
        self.g.promises.push(crate::ir::FusedPromise {
            first,
            end: NodeId(self.g.nodes.len() as u32),
            start_span: call_at.start,
            end_span: call_at.end,
        });
        Value::Tensor(value)
    }

    /// Inlines `inst.method(args)`: the callee sees only `self` and its arguments.
    fn call_model(
        &mut self,
        inst: Instance,
        method: &syn::Ident,
        call_at: At,
        args: Vec<Value>,
    ) -> Value {
        let owner = self.src.structs[inst.def].name.to_string();
        let Some(f) = self
            .src
            .methods
            .get(&(owner.clone(), method.to_string()))
            .cloned()
        else {
            let methods: Vec<&str> = self
                .src
                .methods
                .keys()
                .filter(|(o, _)| *o == owner)
                .map(|(_, m)| m.as_str())
                .collect();
            let hint = match closest(&method.to_string(), methods.iter().copied()) {
                Some(c) => format!("; did you mean `{c}`?"),
                None if methods.is_empty() => format!("; it has no `impl {owner}` block"),
                None => format!("; its methods are: {}", methods.join(", ")),
            };
            self.diags.error_at(
                method,
                format!("model `{owner}` has no method `{method}`{hint}"),
            );
            return Value::Poison;
        };
        let key = format!("{owner}::{method}");
        if self.call_stack.contains(&key) {
            self.diags.error_at(
                method,
                format!(
                    "`{key}` calls itself: recursion cannot be unrolled into a static graph; repeat work with a `for` \
                     loop over a constant range or an array of sub-models"
                ),
            );
            return Value::Poison;
        }
        if self.call_stack.len() >= MAX_CALL_DEPTH {
            self.diags.error_at(
                method,
                format!(
                    "model calls nest more than {MAX_CALL_DEPTH} deep here; the compiler gives up"
                ),
            );
            return Value::Poison;
        }
        let Some(syn::FnArg::Receiver(receiver)) = f.sig.inputs.first() else {
            self.diags.error_at(
                &f.sig.ident,
                format!("`{key}` must take `&self` first to be called as a model method"),
            );
            return Value::Poison;
        };
        if receiver.mutability.is_some() {
            self.diags.error_at(
                receiver,
                "model methods take `&self`: a model cannot mutate itself while it runs",
            );
        }
        if f.sig
            .generics
            .params
            .iter()
            .any(|p| !matches!(p, syn::GenericParam::Lifetime(_)))
        {
            self.diags.error_at(
                &f.sig.generics,
                "model methods cannot be generic: the compiler cannot resolve their type or const parameters; use \
                 module consts or the struct's const generics",
            );
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
                call_at,
                format!(
                    "`{key}` takes {} argument(s), but {} were given",
                    params.len(),
                    args.len()
                ),
            );
            return Value::Poison;
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

    pub(super) fn eval_call(&mut self, c: &syn::ExprCall) -> Value {
        let name = match c.func.as_ref() {
            syn::Expr::Path(p) if p.qself.is_none() => {
                p.path.segments.last().map(|s| s.ident.to_string())
            }
            _ => None,
        };
        let at = At::of(c);
        match (name.as_deref(), c.args.len()) {
            (Some("where_"), 3) => {
                let vals: Vec<Value> = c.args.iter().map(|a| self.eval(a)).collect();
                let mut ids = Vec::new();
                for (v, a) in vals.iter().zip(&c.args) {
                    ids.push(self.operand(v, At::of(a)));
                }
                match ids[..] {
                    [Some(mask), Some(a), Some(b)] => self.add(Op::Where(mask, a, b), at),
                    _ => Value::Poison,
                }
            }
            (Some("embedding"), 2) => {
                let table = self.eval(&c.args[0]);
                let ids = self.eval(&c.args[1]);
                match (
                    self.operand(&table, At::of(&c.args[0])),
                    self.operand(&ids, At::of(&c.args[1])),
                ) {
                    (Some(table), Some(ids)) => self.add(Op::Embedding { table, ids }, at),
                    _ => Value::Poison,
                }
            }
            (Some("concat"), 2) => self.concat(c, at),
            (Some("arange"), 2) => {
                let start = self.eval(&c.args[0]);
                let len = self.eval(&c.args[1]);
                let start = self.dim_bound(&start, At::of(&c.args[0]), "an arange start", 0);
                let len = self.dim_bound(&len, At::of(&c.args[1]), "an arange length", 1);
                match (start, len) {
                    (Some(start), Some(len)) => self.add(Op::Arange { start, len }, at),
                    _ => Value::Poison,
                }
            }
            (Some(f @ ("where_" | "embedding" | "concat" | "arange")), n) => {
                let usage = match f {
                    "where_" => "`where_(mask, a, b)`",
                    "embedding" => "`embedding(&table, &ids)`",
                    "arange" => "`arange(start, len)`",
                    _ => "`concat([a, b], axis)`",
                };
                self.diags.error(
                    at,
                    format!("`{f}` is called as {usage}, but this call has {n} argument(s)"),
                );
                Value::Poison
            }
            (Some(local), _) if self.lookup(local).is_some() => {
                // A name bound by `let`: its value already failed (a closure), or it is not callable.
                self.eval_args_for_errors(&c.args);
                match self.lookup(local) {
                    Some(Value::Poison) | None => {}
                    Some(other) => {
                        let what = self.describe(&other);
                        self.diags
                            .error_at(&c.func, format!("`{local}` is {what}, not a function"));
                    }
                }
                Value::Poison
            }
            (Some(rejected), _) if self.src.rejected.contains(rejected) => {
                // A free function of the module, reported where it is declared.
                self.eval_args_for_errors(&c.args);
                Value::Poison
            }
            (name, _) => {
                self.eval_args_for_errors(&c.args);
                let message = self.unknown_function(name);
                self.diags.error_at(&c.func, message);
                Value::Poison
            }
        }
    }

    /// Evaluates the arguments of a call that already failed, for the errors inside them; array literals are
    /// skipped, since only the call they belong to could have read them.
    pub(super) fn eval_args_for_errors(
        &mut self,
        args: &syn::punctuated::Punctuated<syn::Expr, syn::Token![,]>,
    ) {
        for a in args {
            let is_array = match a {
                syn::Expr::Reference(r) => matches!(*r.expr, syn::Expr::Array(_)),
                other => matches!(other, syn::Expr::Array(_)),
            };
            if !is_array {
                self.eval(a);
            }
        }
    }

    fn concat(&mut self, c: &syn::ExprCall, at: At) -> Value {
        let Some(elems) = self.array_elems(&c.args[0]) else {
            return Value::Poison;
        };
        let mut inputs = Vec::new();
        for el in &elems {
            let v = self.eval(el);
            inputs.push(self.operand(&v, At::of(el)));
        }
        let axis_v = self.eval(&c.args[1]);
        let Some(inputs) = inputs.into_iter().collect::<Option<Vec<NodeId>>>() else {
            return Value::Poison;
        };
        let Some(&first) = inputs.first() else {
            self.diags
                .error_at(&c.args[0], "`concat` needs at least one tensor");
            return Value::Poison;
        };
        let Some(axis) = self.axis(&axis_v, At::of(&c.args[1]), first) else {
            return Value::Poison;
        };
        let Some(inputs) = self.broadcast_for_concat(inputs, axis, at) else {
            return Value::Poison;
        };
        self.add(Op::Concat { inputs, axis }, at)
    }

    /// PyTorch's `cat` wants equal sizes outside its axis; fuse broadcasts size-1 axes in every op, so in `concat`
    /// too: an input whose axis is 1 where another input's is longer takes that length (ViT's `[1, 1, HIDDEN]`
    /// `[CLS]` row before `[batch, patches, HIDDEN]`). Each such axis is `where_(mask, x, x)` over a mask that is
    /// true everywhere, of the longer length, made from the dims alone: `x`'s values exactly, repeated (by a small
    /// kernel of their own: a kernel that reads a concat does not recompute a broadcast value). Inputs whose other
    /// axes disagree otherwise are left as they are, for the type check to report.
    fn broadcast_for_concat(
        &mut self,
        inputs: Vec<NodeId>,
        axis: usize,
        at: At,
    ) -> Option<Vec<NodeId>> {
        let shapes: Vec<Shape> = inputs.iter().map(|&x| self.g.ty(x).shape.clone()).collect();
        let rank = shapes.first().map_or(0, Shape::rank);
        if shapes.iter().any(|s| s.rank() != rank) {
            return Some(inputs);
        }
        let mut out = Vec::with_capacity(inputs.len());
        for (&input, shape) in inputs.iter().zip(&shapes) {
            let mut x = input;
            for i in (0..rank).filter(|&i| i != axis && shape.0[i].is_one()) {
                let Some(len) = shapes.iter().map(|s| &s.0[i]).find(|d| !d.is_one()) else {
                    continue;
                };
                let mask = self.true_along(len.clone(), i, rank, at)?;
                x = tensor(self.add(Op::Where(mask, x, x), at))?;
            }
            out.push(x);
        }
        Some(out)
    }

    /// A mask, true everywhere, `len` long along axis `i` of `rank` axes and 1 along the others.
    fn true_along(&mut self, len: Dim, i: usize, rank: usize, at: At) -> Option<NodeId> {
        let start = Dim::fixed(0);
        let positions = tensor(self.add(
            Op::Arange {
                start,
                len: len.clone(),
            },
            at,
        ))?;
        let floats = tensor(self.add(Op::Cast(positions, DType::F32), at))?;
        let mut dims = vec![Dim::fixed(1); rank];
        dims[i] = len;
        let reshape = Op::Reshape {
            input: floats,
            shape: Shape(dims),
        };
        let shaped = tensor(self.add(reshape, at))?;
        let zero = self.scalar(0.0, at.start);
        tensor(self.add(Op::Binary(BinaryOp::Ge, shaped, zero), at))
    }

    /// What to say about a call to something that is not a built-in.
    fn unknown_function(&self, name: Option<&str>) -> String {
        let builtins =
            "the built-in functions are `where_(mask, a, b)`, `embedding(&table, &ids)` and \
                        `concat([a, b], axis)`";
        let Some(name) = name else {
            return format!(
                "only built-in functions and model methods can be called in a model; {builtins}"
            );
        };
        if let Some(inst) = self.current_instance() {
            let owner = self.src.structs[inst.def].name.to_string();
            if self
                .src
                .methods
                .contains_key(&(owner.clone(), name.to_string()))
            {
                return format!("`{name}` is a method of `{owner}`: call it as `self.{name}(..)`");
            }
        }
        match name {
            "Ok" | "Some" => {
                return format!(
                    "a model returns tensors directly, not wrapped in `{name}(..)`: write the tensor itself"
                )
            }
            "Tensor" | "zeros" | "ones" | "full" | "arange" | "randn" => {
                return format!(
                    "a model cannot create tensors with `{name}`: values come from inputs, parameters and constants \
                     (a number like `0.5` broadcasts as a tensor)"
                )
            }
            _ => {}
        }
        match closest(name, BUILTINS) {
            Some(c) => format!("cannot call `{name}` in a model; did you mean `{c}`? {builtins}"),
            None => format!(
                "cannot call `{name}`: functions outside the model cannot be compiled into its graph; {builtins}, and \
                 a model's own methods are called as `self.method(..)`"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::output_shape;

    #[test]
    fn concat_broadcasts_size_one_axes_outside_its_axis() {
        let cls = "(&self, #[shape(1, 1, 8)] c: Tensor, #[shape(b, s, 8)] x: Tensor) -> Tensor";
        assert_eq!(
            output_shape(&format!("{cls} {{ concat([c, x], 1) }}")).as_deref(),
            Ok("[b, 1 + s, 8]")
        );
        // Along the last axis, both leading axes broadcast.
        let wide = "(&self, #[shape(1, 1, 2)] c: Tensor, #[shape(b, s, 8)] x: Tensor) -> Tensor";
        assert_eq!(
            output_shape(&format!("{wide} {{ concat([x, c], 2) }}")).as_deref(),
            Ok("[b, s, 10]")
        );
        // A length other than 1 that differs is still an error, which says what broadcasts.
        let two = "(&self, #[shape(2, 1, 8)] c: Tensor, #[shape(b, s, 8)] x: Tensor) -> Tensor";
        let err = output_shape(&format!("{two} {{ concat([c, x], 1) }}")).unwrap_err();
        assert!(
            err.contains("differ outside that axis") && err.contains("size-1 axis"),
            "{err}"
        );
    }
}
