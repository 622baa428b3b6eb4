//! Compile-time constants: module `const`s, const generics, literals and arithmetic on them. They size shapes,
//! pick branches of `if`/`match`, bound `for` ranges and become scalar constants in the graph.
//!
//! The operators work on values (`apply_*`), so the lowering can fold `let k = HEADS * 2; k + 1` the same way
//! [`eval_const`] folds a `const` item. Integer arithmetic is checked: a constant that overflows is a compile
//! error, never a panic inside the macro.
//!
//! A `const` whose expression fails is reported once, where it is declared; every later use of it evaluates to
//! [`ConstError::UsesRejected`], which callers drop silently, so one mistake gives one error.

use std::collections::{BTreeMap, BTreeSet};

/// Why a constant expression has no value.
#[derive(Debug)]
pub enum ConstError {
    /// A new error, on the user's tokens.
    Invalid(syn::Error),
    /// The expression uses a constant whose declaration failed: that error is already reported.
    UsesRejected,
}

impl ConstError {
    /// Adds the error to `diags` unless it was reported already.
    pub fn report(self, diags: &mut super::Diagnostics) {
        if let ConstError::Invalid(e) = self {
            diags.push(e);
        }
    }
}

impl From<syn::Error> for ConstError {
    fn from(e: syn::Error) -> Self {
        ConstError::Invalid(e)
    }
}

/// The integer operators constants support, for messages.
const INT_OPERATORS: &str = "`+ - * / % << >> & | ^`";

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

    pub fn kind(&self) -> &'static str {
        match self {
            ConstVal::Int(_) => "an integer",
            ConstVal::Float(_) => "a float",
            ConstVal::Bool(_) => "a bool",
        }
    }
}

impl std::fmt::Display for ConstVal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConstVal::Int(i) => write!(f, "{i}"),
            ConstVal::Float(x) => write!(f, "{x:?}"),
            ConstVal::Bool(b) => write!(f, "{b}"),
        }
    }
}

fn err<T>(tokens: impl quote::ToTokens, msg: impl std::fmt::Display) -> Result<T, ConstError> {
    Err(ConstError::Invalid(syn::Error::new_spanned(tokens, msg)))
}

/// The module's constants: those that evaluated, and the names of those whose declaration failed.
#[derive(Clone, Copy)]
pub struct ModuleConsts<'a> {
    pub values: &'a BTreeMap<String, ConstVal>,
    pub rejected: &'a BTreeSet<String>,
}

/// Evaluates a constant expression. `generics` shadow module constants.
pub fn eval_const(
    expr: &syn::Expr,
    consts: ModuleConsts<'_>,
    generics: &BTreeMap<String, ConstVal>,
) -> Result<ConstVal, ConstError> {
    let rec = |e: &syn::Expr| eval_const(e, consts, generics);
    match expr {
        syn::Expr::Lit(lit) => Ok(lit_value(&lit.lit)?),
        syn::Expr::Path(p) => {
            let Some(ident) = p.path.get_ident() else {
                return err(p, "expected a constant name");
            };
            let name = ident.to_string();
            match generics.get(&name).or_else(|| consts.values.get(&name)) {
                Some(v) => Ok(v.clone()),
                None if consts.rejected.contains(&name) => Err(ConstError::UsesRejected),
                None => err(
                    p,
                    format!(
                        "`{name}` is not a constant of this module; shapes, ranges and conditions must be known at \
                         compile time (declare `const {name}: usize = ...;` in the module)"
                    ),
                ),
            }
        }
        syn::Expr::Paren(p) => rec(&p.expr),
        syn::Expr::Group(g) => rec(&g.expr),
        syn::Expr::Block(b) if b.block.stmts.len() == 1 => match &b.block.stmts[0] {
            syn::Stmt::Expr(e, None) => rec(e),
            _ => err(b, "expected a constant expression"),
        },
        syn::Expr::Unary(u) => apply_unary(&u.op, rec(&u.expr)?).or_else(|m| err(u, m)),
        syn::Expr::Binary(b) => {
            apply_binary(&b.op, rec(&b.left)?, rec(&b.right)?).or_else(|m| err(b, m))
        }
        syn::Expr::Cast(c) => apply_cast(&c.ty, rec(&c.expr)?).or_else(|m| err(c, m)),
        syn::Expr::MethodCall(m) => {
            let receiver = rec(&m.receiver)?;
            let args = m.args.iter().map(rec).collect::<Result<Vec<_>, _>>()?;
            apply_method(&m.method.to_string(), receiver, &args).or_else(|msg| err(&m.method, msg))
        }
        other => err(
            other,
            "expected a constant expression (literals, consts, arithmetic)",
        ),
    }
}

pub fn lit_value(lit: &syn::Lit) -> syn::Result<ConstVal> {
    let err = |tokens: &syn::Lit, msg: &str| Err(syn::Error::new_spanned(tokens, msg));
    match lit {
        syn::Lit::Int(i) => i.base10_parse::<i64>().map(ConstVal::Int),
        syn::Lit::Float(f) => f.base10_parse::<f64>().map(ConstVal::Float),
        syn::Lit::Bool(b) => Ok(ConstVal::Bool(b.value)),
        other => err(other, "expected a number or a bool"),
    }
}

pub fn apply_unary(op: &syn::UnOp, v: ConstVal) -> Result<ConstVal, String> {
    match (op, v) {
        (syn::UnOp::Neg(_), ConstVal::Int(i)) => i
            .checked_neg()
            .map(ConstVal::Int)
            .ok_or_else(|| "integer overflow in a constant".to_string()),
        (syn::UnOp::Neg(_), ConstVal::Float(f)) => Ok(ConstVal::Float(-f)),
        (syn::UnOp::Not(_), ConstVal::Bool(b)) => Ok(ConstVal::Bool(!b)),
        (syn::UnOp::Deref(_), v) => Ok(v),
        (_, v) => Err(format!("this operator does not apply to {}", v.kind())),
    }
}

/// `as f32`, `as usize`, ... on a constant.
pub fn apply_cast(ty: &syn::Type, v: ConstVal) -> Result<ConstVal, String> {
    let target = match ty {
        syn::Type::Path(p) => p.path.get_ident().map(|i| i.to_string()),
        _ => None,
    };
    match (target.as_deref(), v) {
        (Some("f32" | "f64"), ConstVal::Bool(_)) => Err("cannot cast a bool to a float".into()),
        (Some("f32" | "f64"), v) => Ok(ConstVal::Float(v.as_f64().unwrap_or(0.0))),
        (Some("usize" | "i64" | "i32" | "u32" | "isize" | "u64"), ConstVal::Int(i)) => {
            Ok(ConstVal::Int(i))
        }
        // `as` truncates toward zero and saturates, as Rust's float-to-int casts do.
        (Some("usize" | "i64" | "i32" | "u32" | "isize" | "u64"), ConstVal::Float(f)) => {
            Ok(ConstVal::Int(f as i64))
        }
        _ => Err(
            "unsupported cast of a constant: cast numbers to `f32`, `f64`, `usize` or `i64`".into(),
        ),
    }
}

/// `x.sqrt()`, `x.powi(2)`, ... on a constant.
pub fn apply_method(method: &str, v: ConstVal, args: &[ConstVal]) -> Result<ConstVal, String> {
    if let (ConstVal::Int(x), "pow", [ConstVal::Int(e)]) = (&v, method, args) {
        let e = u32::try_from(*e)
            .map_err(|_| format!("`pow` of a constant by {e}: the exponent must be >= 0"))?;
        return x
            .checked_pow(e)
            .map(ConstVal::Int)
            .ok_or_else(|| "integer overflow in a constant".to_string());
    }
    let Some(x) = v.as_f64() else {
        return Err(format!("`{method}` needs a number, got {}", v.kind()));
    };
    let f = match (method, args) {
        ("sqrt", []) => x.sqrt(),
        ("recip", []) => 1.0 / x,
        ("ln", []) => x.ln(),
        ("exp", []) => x.exp(),
        ("abs", []) => x.abs(),
        ("powi", [ConstVal::Int(e)]) => x.powi((*e).clamp(i32::MIN as i64, i32::MAX as i64) as i32),
        ("powf", [e]) if e.as_f64().is_some() => x.powf(e.as_f64().unwrap_or(0.0)),
        ("sqrt" | "recip" | "ln" | "exp" | "abs", _) => {
            return Err(format!("`{method}` on a constant takes no arguments"))
        }
        ("powi", _) => return Err("`powi` on a constant takes one integer exponent".into()),
        ("powf", _) => return Err("`powf` on a constant takes one number".into()),
        _ => {
            return Err(format!(
                "unsupported method `{method}` on a constant; constants support `sqrt`, `recip`, `ln`, `exp`, \
                 `abs`, `powi`, `powf` and, on integers, `pow`"
            ))
        }
    };
    Ok(ConstVal::Float(f))
}

pub fn apply_binary(op: &syn::BinOp, l: ConstVal, r: ConstVal) -> Result<ConstVal, String> {
    use syn::BinOp::*;
    use ConstVal::*;
    let overflow = || "integer overflow in a constant".to_string();
    let v = match (op, l, r) {
        (Div(_) | Rem(_), Int(_), Int(0)) => return Err("division by zero in a constant".into()),
        (Add(_), Int(x), Int(y)) => Int(x.checked_add(y).ok_or_else(overflow)?),
        (Sub(_), Int(x), Int(y)) => Int(x.checked_sub(y).ok_or_else(overflow)?),
        (Mul(_), Int(x), Int(y)) => Int(x.checked_mul(y).ok_or_else(overflow)?),
        (Div(_), Int(x), Int(y)) => Int(x.checked_div(y).ok_or_else(overflow)?),
        (Rem(_), Int(x), Int(y)) => Int(x.checked_rem(y).ok_or_else(overflow)?),
        (Shl(_), Int(x), Int(y)) => Int(shift_left(x, y)?),
        (Shr(_), Int(x), Int(y)) => Int(x.checked_shr(shift_amount(y)?).ok_or_else(overflow)?),
        (BitAnd(_), Int(x), Int(y)) => Int(x & y),
        (BitOr(_), Int(x), Int(y)) => Int(x | y),
        (BitXor(_), Int(x), Int(y)) => Int(x ^ y),
        (BitAnd(_), Bool(x), Bool(y)) => Bool(x & y),
        (BitOr(_), Bool(x), Bool(y)) => Bool(x | y),
        (BitXor(_), Bool(x), Bool(y)) => Bool(x ^ y),
        (Eq(_), x, y) => Bool(x == y),
        (Ne(_), x, y) => Bool(x != y),
        (And(_), Bool(x), Bool(y)) => Bool(x && y),
        (Or(_), Bool(x), Bool(y)) => Bool(x || y),
        (op, x, y) => {
            let (Some(a), Some(b)) = (x.as_f64(), y.as_f64()) else {
                return Err(format!(
                    "this operator does not apply to {} and {}",
                    x.kind(),
                    y.kind()
                ));
            };
            match op {
                Add(_) => Float(a + b),
                Sub(_) => Float(a - b),
                Mul(_) => Float(a * b),
                Div(_) => Float(a / b),
                Rem(_) => Float(a % b),
                Lt(_) => Bool(a < b),
                Le(_) => Bool(a <= b),
                Gt(_) => Bool(a > b),
                Ge(_) => Bool(a >= b),
                Shl(_) | Shr(_) | BitAnd(_) | BitOr(_) | BitXor(_) => {
                    return Err(format!(
                        "this operator needs integers, got {} and {}; integer constants support {INT_OPERATORS}",
                        x.kind(),
                        y.kind()
                    ))
                }
                _ => {
                    return Err(format!(
                        "unsupported operator on constants; constants support {INT_OPERATORS} on integers, \
                         `+ - * / %` on floats, comparisons, and `&& || !` on bools"
                    ))
                }
            }
        }
    };
    Ok(v)
}

/// A shift amount: `0..64`, as Rust's shifts of 64-bit integers require.
fn shift_amount(y: i64) -> Result<u32, String> {
    u32::try_from(y)
        .ok()
        .filter(|&s| s < 64)
        .ok_or_else(|| format!("shift by {y} in a constant: the amount must be in 0..64"))
}

/// `x << y`, refused when a bit (or the sign) would be shifted out: `1 << 70` is an overflow, not 0.
fn shift_left(x: i64, y: i64) -> Result<i64, String> {
    let s = shift_amount(y)?;
    let shifted = x << s;
    if shifted >> s == x {
        Ok(shifted)
    } else {
        Err(format!(
            "integer overflow in a constant: `{x} << {y}` does not fit in 64 bits"
        ))
    }
}

/// Checks that an integer constant fits the type it is declared with (`const N: usize = 3 - 5;` is refused, as
/// Rust refuses it); other types are left to rustc.
pub fn check_declared_type(ty: &syn::Type, v: &ConstVal) -> Result<(), String> {
    let ConstVal::Int(i) = *v else {
        return Ok(());
    };
    let Some(name) = (match ty {
        syn::Type::Path(p) => p.path.get_ident().map(|i| i.to_string()),
        _ => None,
    }) else {
        return Ok(());
    };
    let (lo, hi): (i128, i128) = match name.as_str() {
        "usize" | "u64" => (0, u64::MAX as i128),
        "u32" => (0, u32::MAX as i128),
        "u16" => (0, u16::MAX as i128),
        "u8" => (0, u8::MAX as i128),
        "i32" => (i32::MIN as i128, i32::MAX as i128),
        "i16" => (i16::MIN as i128, i16::MAX as i128),
        "i8" => (i8::MIN as i128, i8::MAX as i128),
        _ => return Ok(()),
    };
    if (lo..=hi).contains(&(i as i128)) {
        Ok(())
    } else {
        Err(format!(
            "this constant is {i}, which does not fit in `{name}`"
        ))
    }
}
