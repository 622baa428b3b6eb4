//! Expressions: literals, names, fields, indexing, operators, casts and assignment.

use super::unsupported::operator_hint;
use super::{closest, dim_value, is_self, Lowerer, Value};
use crate::front::consts::{apply_binary, apply_cast, apply_unary, lit_value, ConstVal};
use crate::front::diag::At;
use crate::ir::{BinaryOp, Dim, Op, UnaryOp};

impl Lowerer<'_> {
    pub(super) fn eval(&mut self, e: &syn::Expr) -> Value {
        if !self.step(e) {
            return Value::Poison;
        }
        match e {
            syn::Expr::Lit(l) => match &l.lit {
                syn::Lit::Int(_) | syn::Lit::Float(_) | syn::Lit::Bool(_) => {
                    match lit_value(&l.lit) {
                        Ok(c) => Value::Const(c),
                        Err(err) => {
                            self.diags.push(err);
                            Value::Poison
                        }
                    }
                }
                other => {
                    self.diags.error_at(
                        other,
                        "only numbers and bools mean something in a model; strings, chars and bytes do not",
                    );
                    Value::Poison
                }
            },
            syn::Expr::Path(p) => self.eval_path(p),
            syn::Expr::Paren(p) => self.eval(&p.expr),
            syn::Expr::Group(g) => self.eval(&g.expr),
            syn::Expr::Reference(r) => {
                if let Some(m) = &r.mutability {
                    self.diags.error(
                        At::range(&r.and_token, m),
                        "`&mut` is not supported: values in a model are immutable; write `&x` or `x`",
                    );
                }
                self.eval(&r.expr)
            }
            syn::Expr::Block(b) => {
                if let Some(label) = &b.label {
                    self.diags.error_at(
                        label,
                        "labelled blocks are not supported: nothing can break out of them; remove the label",
                    );
                }
                self.eval_block(&b.block)
            }
            syn::Expr::Tuple(t) if t.elems.is_empty() => Value::Unit,
            syn::Expr::Tuple(t) => Value::Tuple(t.elems.iter().map(|e| self.eval(e)).collect()),
            syn::Expr::Field(f) => self.eval_field(f),
            syn::Expr::Index(i) => self.eval_index(i),
            syn::Expr::Binary(b) => self.eval_binary(b),
            syn::Expr::Unary(u) => self.eval_unary(u),
            syn::Expr::Cast(c) => self.eval_cast(c),
            syn::Expr::MethodCall(m) => self.eval_method(m),
            syn::Expr::Call(c) => self.eval_call(c),
            syn::Expr::Assign(a) => {
                let v = self.eval(&a.right);
                self.assign_to(&a.left, v);
                Value::Unit
            }
            syn::Expr::ForLoop(f) => {
                self.eval_for(f);
                Value::Unit
            }
            syn::Expr::If(i) => self.eval_if(i),
            syn::Expr::Match(m) => self.eval_match(m),
            other => {
                self.unsupported(other);
                Value::Poison
            }
        }
    }

    fn eval_path(&mut self, p: &syn::ExprPath) -> Value {
        let Some(ident) = p.path.get_ident().filter(|_| p.qself.is_none()) else {
            let last = p
                .path
                .segments
                .last()
                .map(|s| s.ident.to_string())
                .unwrap_or_default();
            self.diags.error_at(
                p,
                format!(
                    "this path refers to an item outside the model, which the compiler cannot see; use a local name \
                     or a `const` declared in the module (e.g. `const {}: f64 = ...;`)",
                    last.to_uppercase()
                ),
            );
            return Value::Poison;
        };
        let name = ident.to_string();
        if let Some(v) = self.lookup(&name) {
            return v;
        }
        if let Some(c) = self
            .instance_generics()
            .get(&name)
            .or_else(|| self.src.consts.get(&name))
        {
            return Value::Const(c.clone());
        }
        if self.src.rejected.contains(&name) {
            return Value::Poison; // reported where the item is declared
        }
        let locals: Vec<String> = self
            .scopes
            .last()
            .map(|s| s.vars.iter().map(|(n, _)| n.clone()).collect())
            .unwrap_or_default();
        let generics = self.instance_generics();
        let candidates = locals
            .iter()
            .map(String::as_str)
            .chain(self.src.consts.keys().map(String::as_str))
            .chain(generics.keys().map(String::as_str));
        let hint = match closest(&name, candidates) {
            Some(c) => format!("; did you mean `{c}`?"),
            None if name.starts_with(|c: char| c.is_ascii_uppercase()) => {
                "; statics and constants outside the model cannot be used: declare a `const` in the module".to_string()
            }
            None => String::new(),
        };
        self.diags
            .error_at(ident, format!("cannot find `{name}` in this model{hint}"));
        Value::Poison
    }

    fn eval_field(&mut self, f: &syn::ExprField) -> Value {
        let base = self.eval(&f.base);
        match (base, &f.member) {
            (Value::Poison, _) => Value::Poison,
            (Value::Model(inst), syn::Member::Named(name)) => {
                let def = &self.src.structs[inst.def];
                if def.dropped_fields.contains(&name.to_string()) {
                    return Value::Poison; // reported where the field is declared
                }
                let Some(field) = def.fields.iter().find(|fd| fd.name == *name) else {
                    let names = def
                        .fields
                        .iter()
                        .map(|fd| fd.name.to_string())
                        .collect::<Vec<_>>();
                    let hint = closest(&name.to_string(), names.iter().map(String::as_str))
                        .map(|c| format!("; did you mean `{c}`?"))
                        .unwrap_or_default();
                    self.diags.error_at(
                        name,
                        format!("model `{}` has no field `{name}`{hint}", def.name),
                    );
                    return Value::Poison;
                };
                match &field.kind {
                    crate::front::model::FieldKind::Tensor { state, .. } => {
                        let path = super::join(&inst.path, &field.checkpoint_name);
                        if *state {
                            self.state(&path, name.span())
                        } else {
                            self.param(&path, name.span())
                        }
                    }
                    crate::front::model::FieldKind::Model { .. } => {
                        match self
                            .children(&inst, &name.to_string())
                            .and_then(|c| c.get(0))
                        {
                            Some(child) => Value::Model(child),
                            None => Value::Poison,
                        }
                    }
                    crate::front::model::FieldKind::Models { .. } => {
                        match self.children(&inst, &name.to_string()) {
                            Some(children) => Value::Models(children),
                            None => Value::Poison,
                        }
                    }
                }
            }
            (Value::Tuple(vs), syn::Member::Unnamed(index)) => match vs.get(index.index as usize) {
                Some(v) => v.clone(),
                None => {
                    self.diags.error_at(
                        index,
                        format!(
                            "this tuple has {} elements; there is no `.{}`",
                            vs.len(),
                            index.index
                        ),
                    );
                    Value::Poison
                }
            },
            (Value::Tensor(_), member) => {
                self.diags.error_at(
                    member,
                    "tensors have no fields; `x.dim(axis)` gives the size of an axis",
                );
                Value::Poison
            }
            (other, member) => {
                let what = self.describe(&other);
                self.diags.error_at(
                    member,
                    format!("field access works on models (`self.weight`) and tuples (`t.0`), not on {what}"),
                );
                Value::Poison
            }
        }
    }

    fn eval_index(&mut self, i: &syn::ExprIndex) -> Value {
        let base = self.eval(&i.expr);
        let index = self.eval(&i.index);
        match (base, index) {
            (Value::Models(ms), Value::Const(ConstVal::Int(k))) => {
                match usize::try_from(k).ok().and_then(|k| ms.get(k)) {
                    Some(m) => Value::Model(m),
                    None => {
                        self.diags.error_at(
                            &i.index,
                            format!(
                                "index {k} is out of range for an array of {} sub-models",
                                ms.len
                            ),
                        );
                        Value::Poison
                    }
                }
            }
            (_, Value::Poison) | (Value::Poison, _) => Value::Poison,
            (Value::Models(_), other) => {
                let what = self.describe(&other);
                self.diags.error_at(
                    &i.index,
                    format!(
                        "a sub-model array is indexed with an integer constant (e.g. the variable of `for i in 0..N`), \
                         not {what}"
                    ),
                );
                Value::Poison
            }
            (Value::Tensor(_), _) => {
                self.diags.error_at(
                    i,
                    "tensors cannot be indexed; take a range of an axis with `x.slice(axis, start, end)`",
                );
                Value::Poison
            }
            (other, _) => {
                let what = self.describe(&other);
                self.diags.error_at(
                    i,
                    format!("indexing works on arrays of sub-models only, not on {what}"),
                );
                Value::Poison
            }
        }
    }

    fn assign_to(&mut self, left: &syn::Expr, v: Value) {
        match left {
            syn::Expr::Path(p) if p.path.get_ident().is_some() && p.qself.is_none() => {
                let name = p.path.get_ident().map(|i| i.to_string()).unwrap_or_default();
                if !self.assign(&name, v) {
                    self.diags.error_at(
                        p,
                        format!("`{name}` is not declared; write `let {name} = ...`"),
                    );
                }
            }
            syn::Expr::Field(f) if is_self(&f.base) => self.diags.error_at(
                left,
                "`forward` cannot mutate `self`: the model's weights are fixed while it runs; bind a new name \
                 with `let`",
            ),
            syn::Expr::Paren(p) => self.assign_to(&p.expr, v),
            other => self.diags.error_at(
                other,
                "only a local name can be assigned (`x = ...`); values in a model are immutable otherwise",
            ),
        }
    }

    fn eval_binary(&mut self, b: &syn::ExprBinary) -> Value {
        use syn::BinOp as B;
        let compound = match b.op {
            B::AddAssign(t) => Some(B::Add(syn::Token![+](t.spans[0]))),
            B::SubAssign(t) => Some(B::Sub(syn::Token![-](t.spans[0]))),
            B::MulAssign(t) => Some(B::Mul(syn::Token![*](t.spans[0]))),
            B::DivAssign(t) => Some(B::Div(syn::Token![/](t.spans[0]))),
            _ => None,
        };
        if let Some(op) = compound {
            // `x += y` is `x = x + y`, which unrolls as well as any other assignment.
            if is_field_of_self(&b.left) {
                self.assign_to(&b.left, Value::Poison);
                return Value::Unit;
            }
            let l = self.eval(&b.left);
            let r = self.eval(&b.right);
            let v = self.binary_values(&op, b, l, r);
            self.assign_to(&b.left, v);
            return Value::Unit;
        }
        let l = self.eval(&b.left);
        let r = self.eval(&b.right);
        self.binary_values(&b.op, b, l, r)
    }

    fn binary_values(&mut self, op: &syn::BinOp, b: &syn::ExprBinary, l: Value, r: Value) -> Value {
        use syn::BinOp as B;
        let is_dim = |v: &Value| matches!(v, Value::Dim(_) | Value::Const(ConstVal::Int(_)));
        match (&l, &r) {
            (Value::Poison, _) | (_, Value::Poison) => Value::Poison,
            (Value::Const(x), Value::Const(y)) => match apply_binary(op, x.clone(), y.clone()) {
                Ok(c) => Value::Const(c),
                Err(msg) => {
                    self.diags.error_at(b, msg);
                    Value::Poison
                }
            },
            (Value::Dim(_), _) | (_, Value::Dim(_)) if is_dim(&l) && is_dim(&r) => {
                self.dim_arith(op, b, &l, &r)
            }
            _ => {
                let tensor_op = match op {
                    B::Add(_) => BinaryOp::Add,
                    B::Sub(_) => BinaryOp::Sub,
                    B::Mul(_) => BinaryOp::Mul,
                    B::Div(_) => BinaryOp::Div,
                    other => {
                        self.diags.error_at(other, operator_hint(other));
                        return Value::Poison;
                    }
                };
                let (Some(x), Some(y)) = (
                    self.operand(&l, At::of(&b.left)),
                    self.operand(&r, At::of(&b.right)),
                ) else {
                    return Value::Poison;
                };
                self.add(Op::Binary(tensor_op, x, y), At::of(b))
            }
        }
    }

    /// Arithmetic on shape dims where one side is dynamic: products (`batch * seq`), sums (`past + seq`, a
    /// derived symbol, see [`crate::ir::DerivedDim`]) and differences that leave a sum less a constant
    /// (`seq - 1`, the start of the last position) stay a dim.
    fn dim_arith(&mut self, op: &syn::BinOp, b: &syn::ExprBinary, l: &Value, r: &Value) -> Value {
        let dims = (super::dim_of(l), super::dim_of(r));
        // A term of a sum may be 0 (`past + seq` with a constant `past` of 0): the sum drops it.
        let term = |v: &Value| match v {
            Value::Const(ConstVal::Int(0)) => Some(Dim::fixed(0)),
            other => super::dim_of(other),
        };
        let sum = match (op, (term(l), term(r))) {
            (syn::BinOp::Add(_), (Some(x), Some(y))) => Some((self.g.sum(&[&x, &y]), "sum")),
            (syn::BinOp::Sub(_), (Some(x), Some(y))) => {
                Some((self.g.difference(&x, &y), "difference"))
            }
            _ => None,
        };
        if let Some((sum, what)) = sum {
            let message = match sum {
                Some(d) if d.coeff <= crate::infer::MAX_ELEMENTS => return dim_value(&d),
                Some(_) => format!("this dim {what} is too large for any tensor"),
                None => format!(
                    "this dim {what} ({} and {}) is not a sum of dims less a constant, which is all a dim can be: \
                     `seq - 1` and `past + seq - past` are, `seq - past` is not (it could be negative for some \
                     inputs)",
                    self.describe(l),
                    self.describe(r)
                ),
            };
            self.diags.error_at(b, message);
            return Value::Poison;
        }
        if let (syn::BinOp::Mul(_), (Some(x), Some(y))) = (op, &dims) {
            return match crate::infer::mul_dims(x, y) {
                Some(d) => dim_value(&d),
                None => {
                    self.diags
                        .error_at(b, "this dim product is too large for any tensor");
                    Value::Poison
                }
            };
        }
        let dynamic = [l, r]
            .into_iter()
            .find_map(|v| match v {
                Value::Dim(d) => Some(self.g.fmt_dim(d)),
                _ => None,
            })
            .unwrap_or_default();
        let message = match op {
            syn::BinOp::Eq(_)
            | syn::BinOp::Ne(_)
            | syn::BinOp::Lt(_)
            | syn::BinOp::Le(_)
            | syn::BinOp::Gt(_)
            | syn::BinOp::Ge(_) => format!(
                "comparing the dynamic dim `{dynamic}` depends on the input's shape at run time, and the graph must \
                 be the same for every input size; compare module consts instead"
            ),
            _ => format!(
                "`{dynamic}` is a dynamic dim: a shape dim can only be a product or a sum of dynamic dims and \
                 constants, less a constant (`batch * seq`, `2 * seq`, `past + seq`, `seq - 1`); other arithmetic on \
                 it is not known until run time"
            ),
        };
        self.diags.error_at(b, message);
        Value::Poison
    }

    fn eval_unary(&mut self, u: &syn::ExprUnary) -> Value {
        let v = self.eval(&u.expr);
        match (&u.op, v) {
            (_, Value::Poison) => Value::Poison,
            (syn::UnOp::Deref(_), v) => v,
            (syn::UnOp::Neg(_), Value::Tensor(id)) => {
                self.add(Op::Unary(UnaryOp::Neg, id), At::of(u))
            }
            (op, Value::Const(c)) => match apply_unary(op, c) {
                Ok(c) => Value::Const(c),
                Err(msg) => {
                    self.diags.error_at(u, msg);
                    Value::Poison
                }
            },
            (syn::UnOp::Not(_), Value::Tensor(_)) => {
                self.diags.error_at(
                    &u.op,
                    "`!` does not apply to tensors; to invert a mask, swap the branches of `where_(mask, a, b)`",
                );
                Value::Poison
            }
            (_, other) => {
                let what = self.describe(&other);
                self.diags
                    .error_at(&u.op, format!("this operator does not apply to {what}"));
                Value::Poison
            }
        }
    }

    fn eval_cast(&mut self, c: &syn::ExprCast) -> Value {
        match self.eval(&c.expr) {
            Value::Const(v) => match apply_cast(&c.ty, v) {
                Ok(v) => Value::Const(v),
                Err(msg) => {
                    self.diags.error_at(c, msg);
                    Value::Poison
                }
            },
            Value::Poison => Value::Poison,
            Value::Tensor(_) => {
                self.diags.error(
                    At::range(&c.as_token, &c.ty),
                    "`as` casts work on constants only; convert a tensor of ids or a mask with `.to_f32()`",
                );
                Value::Poison
            }
            other => {
                let what = self.describe(&other);
                self.diags.error(
                    At::range(&c.as_token, &c.ty),
                    format!("`as` casts work on constants only, and this is {what}, known only at run time"),
                );
                Value::Poison
            }
        }
    }
}

fn is_field_of_self(e: &syn::Expr) -> bool {
    matches!(e, syn::Expr::Field(f) if is_self(&f.base))
}
