//! The arguments of the view ops that the compiler reads as syntax: a `permute` list, a `reshape` shape (with
//! dynamic dims, products and one `-1`), and array literals in general.

use super::{dim_of, Lowerer, Value};
use crate::front::consts::ConstVal;
use crate::front::diag::At;
use crate::ir::{Dim, NodeId, Op, Shape};

impl Lowerer<'_> {
    pub(super) fn permute(&mut self, x: NodeId, arg: &syn::Expr, at: At) -> Value {
        let Some(elems) = self.array_elems(arg) else {
            return Value::Poison;
        };
        let shape = self.g.ty(x).shape.clone();
        let rank = shape.rank() as i64;
        let mut perm = Vec::new();
        for el in &elems {
            let v = self.eval(el);
            let Some(p) = self.const_int(&v, At::of(el), "each entry of a permutation") else {
                return Value::Poison;
            };
            perm.push(if p < 0 { p.saturating_add(rank) } else { p });
        }
        let mut seen = vec![false; shape.rank()];
        let valid = perm.len() == shape.rank()
            && perm.iter().all(|&p| {
                usize::try_from(p)
                    .ok()
                    .and_then(|p| seen.get_mut(p))
                    .is_some_and(|s| !std::mem::replace(s, true))
            });
        if !valid {
            let text = self.g.fmt_shape(&shape);
            self.diags.error_at(
                arg,
                format!(
                    "a permutation of {text} lists each of its {rank} axes once (e.g. `{:?}`)",
                    (0..rank).rev().collect::<Vec<_>>()
                ),
            );
            return Value::Poison;
        }
        let perm = perm.into_iter().map(|p| p as usize).collect();
        self.add(Op::Permute { input: x, perm }, at)
    }

    /// The dims of a `reshape`: positive constants, dynamic dims or products of them, and at most one `-1`,
    /// which takes whatever size keeps the element count.
    pub(super) fn dim_list(&mut self, e: &syn::Expr, x: NodeId) -> Option<Shape> {
        let elems = self.array_elems(e)?;
        let mut dims: Vec<Option<Dim>> = Vec::new();
        let mut ok = true;
        for el in &elems {
            let v = self.eval(el);
            match (&v, dim_of(&v)) {
                (Value::Const(ConstVal::Int(-1)), _) => dims.push(None),
                (_, Some(d)) => dims.push(Some(d)),
                (Value::Poison, _) => ok = false,
                _ => {
                    let what = self.describe(&v);
                    self.diags.error_at(
                        el,
                        format!(
                            "a reshape dim is a positive integer constant, a dynamic dim (`x.dim(0)`), a product of \
                             them, or -1; this is {what}"
                        ),
                    );
                    ok = false;
                }
            }
        }
        if !ok {
            return None;
        }
        let known = dims
            .iter()
            .flatten()
            .try_fold(Dim::fixed(1), |acc, d| crate::infer::mul_dims(&acc, d));
        let Some(known) = known else {
            self.diags
                .error_at(e, "this shape has more elements than any tensor can hold");
            return None;
        };
        let holes = dims.iter().filter(|d| d.is_none()).count();
        if holes > 1 {
            self.diags
                .error_at(e, "only one dim of a reshape can be -1");
            return None;
        }
        if holes == 1 {
            let input = self.g.ty(x).shape.clone();
            let filled = crate::infer::numel(&input).and_then(|n| n.divide(&known));
            let Some(filled) = filled else {
                let text = self.g.fmt_shape(&input);
                let count =
                    crate::infer::numel(&input).map_or_else(String::new, |n| self.g.fmt_dim(&n));
                let part = self.g.fmt_dim(&known);
                self.diags.error_at(
                    e,
                    format!("cannot fill in the -1: {text} has {count} elements, which is not {part} times a \
                             whole dim"),
                );
                return None;
            };
            return Some(Shape(
                dims.into_iter()
                    .map(|d| d.unwrap_or_else(|| filled.clone()))
                    .collect(),
            ));
        }
        Some(Shape(dims.into_iter().flatten().collect()))
    }

    pub(super) fn array_elems(&mut self, e: &syn::Expr) -> Option<Vec<syn::Expr>> {
        match e {
            syn::Expr::Array(a) => Some(a.elems.iter().cloned().collect()),
            syn::Expr::Reference(r) => self.array_elems(&r.expr),
            syn::Expr::Paren(p) => self.array_elems(&p.expr),
            other => {
                self.diags.error_at(
                    other,
                    "write the list out as an array literal, like `[0, 2, 1, 3]`: the compiler reads it at \
                     compile time",
                );
                None
            }
        }
    }
}
