//! The constructs a static graph cannot express, each with a message that says what to write instead:
//! data-dependent control flow, closures, `unsafe`, `async`, `?`, and operators that have no tensor meaning.

use super::Lowerer;
use crate::front::diag::At;

impl Lowerer<'_> {
    /// Constructs that cannot become a static graph.
    pub(super) fn unsupported(&mut self, e: &syn::Expr) {
        let loop_hint = "use `for i in 0..N` with a constant `N` (it is unrolled), or `for layer in &self.layers`";
        match e {
            syn::Expr::While(w) => self.diags.error(
                At::range(&w.while_token, &w.cond),
                format!(
                    "`while` loops until a run-time condition changes, so it cannot be compiled into a static graph; \
                     {loop_hint}"
                ),
            ),
            syn::Expr::Loop(l) => self.diags.error_at(
                &l.loop_token,
                format!("`loop` runs until a run-time `break`, so it cannot be compiled into a static graph; \
                         {loop_hint}"),
            ),
            syn::Expr::Break(b) => self.diags.error_at(
                b,
                "`break` cannot be compiled: loops are unrolled in full, so every iteration runs; loop over a smaller \
                 constant range instead, or pick results per element with `where_(mask, a, b)`",
            ),
            syn::Expr::Continue(c) => self.diags.error_at(
                c,
                "`continue` cannot be compiled: loops are unrolled in full, so every iteration runs its whole body; \
                 use `if` on a constant (e.g. the loop variable) to skip work statically",
            ),
            syn::Expr::Return(r) => self.diags.error_at(
                &r.return_token,
                "an early `return` inside a branch or loop cannot be compiled: every call runs to the end of its \
                 body; compute both results and pick with `where_(mask, a, b)`, and return from the last line",
            ),
            syn::Expr::Closure(c) => {
                let start: &dyn quote::ToTokens = match &c.capture {
                    Some(m) => m,
                    None => &c.or1_token,
                };
                self.diags.error(
                    At::range(start, &c.or2_token),
                    "closures are not supported in a model: write a method in the model's `impl` \
                     (`fn helper(&self, x: Tensor) -> Tensor`) and call it as `self.helper(&x)`",
                )
            }
            syn::Expr::Macro(m) => self.unsupported_macro(&m.mac),
            syn::Expr::Unsafe(u) => self.diags.error_at(
                &u.unsafe_token,
                "`unsafe` is not supported in a model: there is no raw memory to touch; remove the `unsafe` block",
            ),
            syn::Expr::Async(a) => self.diags.error_at(
                &a.async_token,
                "`async` is not supported in a model: `forward` is one synchronous static graph; remove it",
            ),
            syn::Expr::Await(a) => self.diags.error(
                At::range(&a.dot_token, &a.await_token),
                "`.await` is not supported in a model: `forward` is one synchronous static graph; remove it",
            ),
            syn::Expr::Try(t) => self.diags.error_at(
                &t.question_token,
                "`?` returns early on a run-time error, and a compiled model has no run-time error path; remove it",
            ),
            syn::Expr::Let(l) => self.diags.error(
                At::range(&l.let_token, &l.eq_token),
                "`let` patterns in conditions match run-time values; a static graph cannot branch on data",
            ),
            syn::Expr::Array(_) | syn::Expr::Repeat(_) => self.diags.error_at(
                e,
                "an array literal is only allowed as an argument of `permute`, `reshape` or `concat`",
            ),
            syn::Expr::Range(_) => self.diags.error_at(
                e,
                "a range is only allowed as what a `for` loop iterates over; slice tensors with `x.slice(axis, \
                 start, end)`",
            ),
            syn::Expr::Struct(s) => self.diags.error_at(
                &s.path,
                "building structs is not supported inside a model; models are declared as fields and called",
            ),
            other => self
                .diags
                .error_at(other, "this expression is not supported in a model"),
        }
    }
}

/// Why an operator does not apply to tensors, and what to write instead.
pub(super) fn operator_hint(op: &syn::BinOp) -> String {
    use syn::BinOp as B;
    let method = match op {
        B::Lt(_) => Some("lt"),
        B::Le(_) => Some("le"),
        B::Gt(_) => Some("gt"),
        B::Ge(_) => Some("ge"),
        B::Eq(_) => Some("eq"),
        B::Ne(_) => Some("ne"),
        _ => None,
    };
    if let Some(m) = method {
        return format!(
            "comparison operators do not apply to tensors (they would give one bool); compare elementwise with \
             `a.{m}(&b)`, which gives a mask for `where_(mask, a, b)`"
        );
    }
    match op {
        B::And(_) | B::Or(_) | B::BitAnd(_) | B::BitOr(_) | B::BitXor(_) => {
            "logic operators do not apply to tensors; to combine masks, multiply them as floats \
             (`a.to_f32() * b.to_f32()`) and compare the result"
                .to_string()
        }
        B::Rem(_) => "there is no remainder op on tensors".to_string(),
        _ => "this operator does not apply to tensors; the tensor operators are `+ - * /`"
            .to_string(),
    }
}
