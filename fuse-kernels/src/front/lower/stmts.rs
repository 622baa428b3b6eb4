//! Bodies, statements, patterns and the static control flow: `for` over constant ranges and model arrays is
//! unrolled, `if`/`match` on constants pick their branch. Control flow that depends on data is an error.

use super::{Lowerer, Value, MAX_STEPS};
use crate::front::consts::{lit_value, ConstVal};
use crate::front::diag::At;

/// The `i`-th value a `for` loop binds.
type ItemAt = Box<dyn Fn(usize) -> Option<Value>>;

/// What a `where_` rewrite looks like, for the messages about data-dependent branches.
const WHERE_HINT: &str =
    "compute both results and pick per element with `where_(mask, a, b)`, e.g. `where_(x.gt(0.0), a, b)`";

impl Lowerer<'_> {
    pub(super) fn eval_fn_body(&mut self, block: &syn::Block) -> Value {
        let n = block.stmts.len();
        let mut last = Value::Unit;
        for (i, stmt) in block.stmts.iter().enumerate() {
            let is_last = i + 1 == n;
            if let syn::Stmt::Expr(syn::Expr::Return(r), _) = stmt {
                if !is_last {
                    self.diags.error_at(
                        r,
                        "code after this `return` would never run; make the `return` the last statement",
                    );
                }
                return match &r.expr {
                    Some(e) => self.eval(e),
                    None => Value::Unit,
                };
            }
            last = self.eval_stmt(stmt, is_last);
        }
        last
    }

    /// A nested block: its `let`s end with it, assignments to outer names stay.
    pub(super) fn eval_block(&mut self, block: &syn::Block) -> Value {
        let mark = self.scopes.last().map_or(0, |s| s.vars.len());
        let n = block.stmts.len();
        let mut last = Value::Unit;
        for (i, stmt) in block.stmts.iter().enumerate() {
            last = self.eval_stmt(stmt, i + 1 == n);
        }
        if let Some(scope) = self.scopes.last_mut() {
            scope.vars.truncate(mark);
        }
        last
    }

    fn eval_stmt(&mut self, stmt: &syn::Stmt, is_last: bool) -> Value {
        match stmt {
            syn::Stmt::Local(local) => {
                let Some(init) = &local.init else {
                    self.diags.error_at(
                        local,
                        "declare and initialise together: `let x = ...;` (a model has no uninitialised values)",
                    );
                    return Value::Unit;
                };
                if let Some((else_token, _)) = &init.diverge {
                    self.diags.error_at(
                        else_token,
                        "`let ... else` tests a run-time value; a static graph cannot branch on data: bind with a \
                         plain `let`",
                    );
                    self.eval(&init.expr);
                    return Value::Unit;
                }
                let v = self.eval(&init.expr);
                self.bind_pat(&local.pat, v);
                Value::Unit
            }
            syn::Stmt::Expr(e, semi) => {
                let v = self.eval(e);
                if semi.is_none() && is_last {
                    v
                } else {
                    Value::Unit
                }
            }
            syn::Stmt::Macro(m) => {
                self.unsupported_macro(&m.mac);
                Value::Unit
            }
            syn::Stmt::Item(item) => {
                self.diags.error_at(
                    item,
                    "items inside a model method are not supported: put helper functions in the model's `impl` \
                     (called as `self.helper(..)`) and constants in the module",
                );
                Value::Unit
            }
        }
    }

    pub(super) fn unsupported_macro(&mut self, mac: &syn::Macro) {
        let name = mac
            .path
            .segments
            .last()
            .map(|s| s.ident.to_string())
            .unwrap_or_default();
        let hint = match name.as_str() {
            "println" | "print" | "eprintln" | "eprint" | "dbg" => {
                " (to look at values, print what `forward_eager` returns at run time)"
            }
            "assert" | "assert_eq" | "assert_ne" | "debug_assert" | "debug_assert_eq" => {
                " (shapes are already checked at compile time, and data cannot be)"
            }
            "vec" => " (shapes and permutations are array literals: `[0, 2, 1, 3]`)",
            "panic" | "unreachable" | "todo" | "unimplemented" => {
                " (a compiled model has no run-time failure path)"
            }
            _ => "",
        };
        self.diags.error(
            At::range(&mac.path, &mac.bang_token),
            format!(
                "`{name}!` cannot be used in a model: `forward` is compiled into a graph, not run as Rust, so a macro \
                 has nothing to act on; remove it{hint}"
            ),
        );
    }

    pub(super) fn bind_pat(&mut self, pat: &syn::Pat, v: Value) {
        match pat {
            syn::Pat::Ident(p) if p.subpat.is_none() => self.bind(p.ident.to_string(), v),
            syn::Pat::Type(t) => self.bind_pat(&t.pat, v),
            syn::Pat::Paren(p) => self.bind_pat(&p.pat, v),
            syn::Pat::Reference(r) => self.bind_pat(&r.pat, v),
            syn::Pat::Wild(_) => {}
            syn::Pat::Tuple(t) => match v {
                Value::Tuple(vs) if vs.len() == t.elems.len() => {
                    for (p, v) in t.elems.iter().zip(vs) {
                        self.bind_pat(p, v);
                    }
                }
                Value::Poison => {
                    for p in &t.elems {
                        self.bind_pat(p, Value::Poison);
                    }
                }
                other => {
                    let what = self.describe(&other);
                    self.diags.error_at(
                        t,
                        format!(
                            "this pattern has {} elements, but the value is {what}",
                            t.elems.len()
                        ),
                    );
                    for p in &t.elems {
                        self.bind_pat(p, Value::Poison);
                    }
                }
            },
            other => self.diags.error_at(
                other,
                "only `let name`, `let (a, b)` and `let _` patterns are supported in a model",
            ),
        }
    }

    pub(super) fn eval_for(&mut self, f: &syn::ExprForLoop) {
        if let Some(label) = &f.label {
            self.diags.error_at(
                label,
                "labelled loops are not supported: loops are unrolled in full, so nothing can break out; remove \
                 the label",
            );
        }
        // Items are made one at a time: a long range must cost work only as far as the work limit lets it run.
        let (len, item): (usize, ItemAt) = match strip_parens(&f.expr) {
            syn::Expr::Range(r) => match self.range_items(r) {
                Some((start, len)) => (
                    len,
                    Box::new(move |i| Some(Value::Const(ConstVal::Int(start + i as i64)))),
                ),
                None => return,
            },
            other => {
                let target = match strip_parens(other) {
                    syn::Expr::MethodCall(m) if m.method == "iter" && m.args.is_empty() => {
                        self.eval(&m.receiver)
                    }
                    e => self.eval(e),
                };
                match target {
                    Value::Models(ms) => (ms.len, Box::new(move |i| ms.get(i).map(Value::Model))),
                    Value::Poison => return,
                    other => {
                        let what = self.describe(&other);
                        self.diags.error_at(
                            &f.expr,
                            format!(
                                "`for` can only loop over a constant range (`0..N`) or an array of sub-models \
                                 (`&self.layers`), so it can be unrolled; this is {what}"
                            ),
                        );
                        return;
                    }
                }
            }
        };
        self.loops.push(At::of(&f.expr));
        for i in 0..len {
            // Each iteration counts as work even when its body is empty, so nested long loops stop too.
            let Some(value) = item(i).filter(|_| self.step(&f.expr)) else {
                break;
            };
            let mark = self.scopes.last().map_or(0, |s| s.vars.len());
            self.bind_pat(&f.pat, value);
            self.eval_block(&f.body);
            if let Some(scope) = self.scopes.last_mut() {
                scope.vars.truncate(mark);
            }
        }
        self.loops.pop();
    }

    /// The start and length of a constant range, or `None` after reporting why the range is not constant.
    fn range_items(&mut self, r: &syn::ExprRange) -> Option<(i64, usize)> {
        let (Some(start), Some(end)) = (&r.start, &r.end) else {
            self.diags.error_at(
                r,
                "a `for` range needs both bounds, `start..end`, with constant values: the loop is unrolled at \
                 compile time",
            );
            return None;
        };
        let start_v = self.eval(start);
        let end_v = self.eval(end);
        let a = self.range_bound(start, start_v);
        let b = self.range_bound(end, end_v);
        let (a, b) = (a?, b?);
        let end = if matches!(r.limits, syn::RangeLimits::Closed(_)) {
            b.saturating_add(1)
        } else {
            b
        };
        let len = end.saturating_sub(a).max(0);
        if len as u64 > MAX_STEPS as u64 {
            self.diags.error_at(
                r,
                format!("this loop would unroll {len} times; the compiler unrolls at most {MAX_STEPS} steps"),
            );
            return None;
        }
        Some((a, len as usize))
    }

    fn range_bound(&mut self, e: &syn::Expr, v: Value) -> Option<i64> {
        let reason = match v {
            Value::Const(ConstVal::Int(i)) => return Some(i),
            Value::Poison => return None,
            Value::Dim(d) => format!(
                "is the dynamic dim `{}`, known only at run time",
                self.g.fmt_dim(&d)
            ),
            other => format!("is {}", self.describe(&other)),
        };
        self.diags.error_at(
            e,
            format!(
                "a `for` loop is unrolled at compile time, so its bounds must be integer constants (module consts, \
                 const generics, literals), but this bound {reason}; work along that axis with tensor ops (`sum`, \
                 `matmul`, `softmax`) instead of a loop"
            ),
        );
        None
    }

    fn const_condition(&mut self, cond: &syn::Expr, what: &str) -> Option<bool> {
        let v = self.eval(cond);
        let message = match v {
            Value::Const(ConstVal::Bool(b)) => return Some(b),
            Value::Poison => return None,
            Value::Tensor(_) => format!(
                "`{what}` on a tensor value depends on run-time data, and a static graph cannot branch on data; \
                 {WHERE_HINT}"
            ),
            Value::Dim(d) => format!(
                "`{what}` on the dynamic dim `{}` depends on the input's shape at run time, and the graph must be the \
                 same for every input size; branch on a module const instead, or {WHERE_HINT}",
                self.g.fmt_dim(&d)
            ),
            other => {
                let found = self.describe(&other);
                format!("the condition of `{what}` must be a constant bool (e.g. `HIDDEN > 256`), found {found}")
            }
        };
        self.diags.error_at(cond, message);
        None
    }

    pub(super) fn eval_if(&mut self, i: &syn::ExprIf) -> Value {
        if let syn::Expr::Let(l) = i.cond.as_ref() {
            self.diags.error(
                At::range(&i.if_token, &l.eq_token),
                "`if let` matches a run-time value, and a static graph cannot branch on data; use `if` on a constant",
            );
            return Value::Poison;
        }
        let Some(cond) = self.const_condition(&i.cond, "if") else {
            return Value::Poison;
        };
        if cond {
            self.eval_block(&i.then_branch)
        } else if let Some((_, els)) = &i.else_branch {
            self.eval(els)
        } else {
            Value::Unit
        }
    }

    pub(super) fn eval_match(&mut self, m: &syn::ExprMatch) -> Value {
        let scrutinee = match self.eval(&m.expr) {
            Value::Const(c) => c,
            Value::Poison => return Value::Poison,
            Value::Dim(d) => {
                let dim = self.g.fmt_dim(&d);
                self.diags.error_at(
                    &m.expr,
                    format!(
                        "`match` on the dynamic dim `{dim}` depends on the input's shape at run time; match on a \
                         module const, or {WHERE_HINT}"
                    ),
                );
                return Value::Poison;
            }
            other => {
                let what = self.describe(&other);
                self.diags.error_at(
                    &m.expr,
                    format!(
                        "`match` on {what} depends on run-time data, and a static graph cannot branch on data; match \
                         on a constant, or {WHERE_HINT}"
                    ),
                );
                return Value::Poison;
            }
        };
        for arm in &m.arms {
            let mark = self.scopes.last().map_or(0, |s| s.vars.len());
            let hit = match self.arm_matches(&arm.pat, &scrutinee) {
                Some(true) => match &arm.guard {
                    Some((_, guard)) => self.const_condition(guard, "a match guard"),
                    None => Some(true),
                },
                decided => decided,
            };
            let out = match hit {
                Some(true) => Some(self.eval(&arm.body)),
                Some(false) => None,
                None => Some(Value::Poison),
            };
            if let Some(scope) = self.scopes.last_mut() {
                scope.vars.truncate(mark);
            }
            if let Some(out) = out {
                return out;
            }
        }
        self.diags.error_at(
            &m.expr,
            format!(
                "no arm of this `match` matches the constant `{scrutinee}`; add a `_ => ...` arm"
            ),
        );
        Value::Poison
    }

    /// Whether `pat` matches the constant; a binding pattern binds it. `None` after an error.
    fn arm_matches(&mut self, pat: &syn::Pat, scrutinee: &ConstVal) -> Option<bool> {
        match pat {
            syn::Pat::Wild(_) => Some(true),
            syn::Pat::Lit(l) => match lit_value(&l.lit) {
                Ok(v) => Some(v == *scrutinee),
                Err(e) => {
                    self.diags.push(e);
                    None
                }
            },
            syn::Pat::Ident(p) if p.subpat.is_none() => {
                let name = p.ident.to_string();
                let known = self
                    .instance_generics()
                    .get(&name)
                    .or_else(|| self.src.consts.get(&name))
                    .cloned();
                match known {
                    Some(c) => Some(c == *scrutinee),
                    None => {
                        self.bind(name, Value::Const(scrutinee.clone()));
                        Some(true)
                    }
                }
            }
            syn::Pat::Or(o) => {
                let mut any = false;
                for case in &o.cases {
                    any |= self.arm_matches(case, scrutinee)?;
                }
                Some(any)
            }
            syn::Pat::Paren(p) => self.arm_matches(&p.pat, scrutinee),
            other => {
                self.diags.error_at(
                    other,
                    "`match` arms on constants use literals, constant names, `a | b`, a binding or `_`",
                );
                None
            }
        }
    }
}

fn strip_parens(e: &syn::Expr) -> &syn::Expr {
    match e {
        syn::Expr::Paren(p) => strip_parens(&p.expr),
        syn::Expr::Group(g) => strip_parens(&g.expr),
        syn::Expr::Reference(r) if r.mutability.is_none() => strip_parens(&r.expr),
        other => other,
    }
}
