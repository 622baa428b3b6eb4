//! Compile-time constants: module `const`s, const generics, literals and arithmetic on them. They size shapes,
//! pick branches of `if`/`match`, bound `for` ranges and become scalar constants in the graph.

use std::collections::BTreeMap;

use syn::spanned::Spanned;

#[derive(Clone, Debug, PartialEq)]
pub enum ConstVal {
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl ConstVal {
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            ConstVal::Int(i) => Some(*i as f64),
            ConstVal::Float(f) => Some(*f),
            ConstVal::Bool(_) => None,
        }
    }

    pub fn as_int(&self) -> Option<i64> {
        match self {
            ConstVal::Int(i) => Some(*i),
            _ => None,
        }
    }
}

fn err<T>(span: impl Spanned, msg: impl std::fmt::Display) -> syn::Result<T> {
    Err(syn::Error::new(span.span(), msg))
}

/// Evaluates a constant expression. `generics` shadow module constants.
pub fn eval_const(
    expr: &syn::Expr,
    consts: &BTreeMap<String, ConstVal>,
    generics: &BTreeMap<String, ConstVal>,
) -> syn::Result<ConstVal> {
    let rec = |e: &syn::Expr| eval_const(e, consts, generics);
    match expr {
        syn::Expr::Lit(lit) => lit_value(&lit.lit),
        syn::Expr::Path(p) => {
            let Some(ident) = p.path.get_ident() else {
                return err(p, "expected a constant name");
            };
            let name = ident.to_string();
            generics
                .get(&name)
                .or_else(|| consts.get(&name))
                .cloned()
                .map_or_else(
                    || {
                        err(
                            p,
                            format!(
                                "`{name}` is not a constant of this module; shapes, ranges and conditions must be known at compile time"
                            ),
                        )
                    },
                    Ok,
                )
        }
        syn::Expr::Paren(p) => rec(&p.expr),
        syn::Expr::Group(g) => rec(&g.expr),
        syn::Expr::Block(b) if b.block.stmts.len() == 1 => match &b.block.stmts[0] {
            syn::Stmt::Expr(e, None) => rec(e),
            _ => err(b, "expected a constant expression"),
        },
        syn::Expr::Unary(u) => {
            let v = rec(&u.expr)?;
            match (&u.op, v) {
                (syn::UnOp::Neg(_), ConstVal::Int(i)) => Ok(ConstVal::Int(-i)),
                (syn::UnOp::Neg(_), ConstVal::Float(f)) => Ok(ConstVal::Float(-f)),
                (syn::UnOp::Not(_), ConstVal::Bool(b)) => Ok(ConstVal::Bool(!b)),
                _ => err(u, "unsupported operator on a constant"),
            }
        }
        syn::Expr::Binary(b) => binary(b, rec(&b.left)?, rec(&b.right)?),
        syn::Expr::Cast(c) => {
            let v = rec(&c.expr)?;
            let target = match c.ty.as_ref() {
                syn::Type::Path(p) => p.path.get_ident().map(|i| i.to_string()),
                _ => None,
            };
            match (target.as_deref(), v) {
                (Some("f32" | "f64"), v) => v
                    .as_f64()
                    .map(ConstVal::Float)
                    .map_or_else(|| err(c, "cannot cast a bool to a float"), Ok),
                (Some("usize" | "i64" | "i32" | "u32" | "isize"), ConstVal::Int(i)) => {
                    Ok(ConstVal::Int(i))
                }
                (Some("usize" | "i64" | "i32" | "u32" | "isize"), ConstVal::Float(f)) => {
                    Ok(ConstVal::Int(f as i64))
                }
                _ => err(c, "unsupported cast of a constant"),
            }
        }
        syn::Expr::MethodCall(m) if m.args.is_empty() => {
            let v = rec(&m.receiver)?
                .as_f64()
                .map_or_else(|| err(&m.receiver, "expected a number"), Ok)?;
            let f = match m.method.to_string().as_str() {
                "sqrt" => v.sqrt(),
                "recip" => 1.0 / v,
                "ln" => v.ln(),
                "exp" => v.exp(),
                _ => return err(&m.method, "unsupported method on a constant"),
            };
            Ok(ConstVal::Float(f))
        }
        syn::Expr::MethodCall(m) if m.method == "powi" && m.args.len() == 1 => {
            let v = rec(&m.receiver)?
                .as_f64()
                .map_or_else(|| err(&m.receiver, "expected a number"), Ok)?;
            let e = rec(&m.args[0])?
                .as_int()
                .map_or_else(|| err(&m.args[0], "expected an integer exponent"), Ok)?;
            Ok(ConstVal::Float(v.powi(e as i32)))
        }
        other => err(
            other,
            "expected a constant expression (literals, consts, arithmetic)",
        ),
    }
}

pub fn lit_value(lit: &syn::Lit) -> syn::Result<ConstVal> {
    match lit {
        syn::Lit::Int(i) => i.base10_parse::<i64>().map(ConstVal::Int),
        syn::Lit::Float(f) => f.base10_parse::<f64>().map(ConstVal::Float),
        syn::Lit::Bool(b) => Ok(ConstVal::Bool(b.value)),
        other => err(other, "expected a number or a bool"),
    }
}

fn binary(b: &syn::ExprBinary, l: ConstVal, r: ConstVal) -> syn::Result<ConstVal> {
    use syn::BinOp::*;
    use ConstVal::*;
    let v = match (&b.op, l, r) {
        (Add(_), Int(x), Int(y)) => Int(x + y),
        (Sub(_), Int(x), Int(y)) => Int(x - y),
        (Mul(_), Int(x), Int(y)) => Int(x * y),
        (Div(_), Int(_), Int(0)) | (Rem(_), Int(_), Int(0)) => {
            return err(b, "division by zero in a constant")
        }
        (Div(_), Int(x), Int(y)) => Int(x / y),
        (Rem(_), Int(x), Int(y)) => Int(x % y),
        (Eq(_), x, y) => Bool(x == y),
        (Ne(_), x, y) => Bool(x != y),
        (And(_), Bool(x), Bool(y)) => Bool(x && y),
        (Or(_), Bool(x), Bool(y)) => Bool(x || y),
        (op, x, y) => {
            let (Some(x), Some(y)) = (x.as_f64(), y.as_f64()) else {
                return err(b, "unsupported operator on constants");
            };
            match op {
                Add(_) => Float(x + y),
                Sub(_) => Float(x - y),
                Mul(_) => Float(x * y),
                Div(_) => Float(x / y),
                Lt(_) => Bool(x < y),
                Le(_) => Bool(x <= y),
                Gt(_) => Bool(x > y),
                Ge(_) => Bool(x >= y),
                _ => return err(b, "unsupported operator on constants"),
            }
        }
    };
    Ok(v)
}
