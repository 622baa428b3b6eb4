//! The range of ids a model computes itself. `embedding(&table, &ids)` takes i64 ids from an input (validated
//! before launch) or an `arange` (its bound checked when the dims are bound); an f32 value made in the model is
//! accepted as ids when this analysis bounds it, as RoBERTa's positions are, `tokens.cumsum(1) * tokens + 1.0`
//! with `tokens` a padding mask: from 1 to `seq + 1`. Its building blocks are masks (comparisons, in 0..=1),
//! non-negative integer constants, `arange` positions, and `+`, `*`, `-` of a constant, `max`, `min` (so `clamp`),
//! `cumsum`, the largest or least along an axis (so `argmax` and `argmin`), concats and views of them, so a bounded
//! value is a whole number: the bound is proved, not assumed, and a value fuse cannot bound is refused at the
//! user's line. (A `clamp` of a value that is not bounded stays refused: an activation may be NaN, which no clamp
//! removes.) The upper bound is a constant plus one monomial of the dims (`seq + 1`), which the runtime checks
//! against the table's rows when it binds the dims, as it checks a slice.

use crate::ir::{BinaryOp, DType, Dim, Graph, NodeId, Op, ReduceOp, UnaryOp};

/// f32 holds every whole number below this exactly (2²⁴): a computed id is one of them.
pub const F32_WHOLE_NUMBERS: usize = 1 << 24;

/// Every value of a node lies in `lo..=c + m` (`m` absent: the bound is the constant `c`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdRange {
    pub lo: i64,
    pub c: i64,
    pub m: Option<Dim>,
}

impl IdRange {
    /// `lo..=c + m`, a monomial without symbols folded into the constant.
    fn new(lo: i64, c: i64, m: Option<Dim>) -> Option<IdRange> {
        Some(match m {
            Some(m) if m.syms.is_empty() || m.coeff == 0 => IdRange {
                lo,
                c: c.checked_add(i64::try_from(m.coeff).ok()?)?,
                m: None,
            },
            m => IdRange { lo, c, m },
        })
    }

    fn constant(v: i64) -> IdRange {
        IdRange {
            lo: v,
            c: v,
            m: None,
        }
    }

    /// The same upper bound from `lo`.
    fn with_lo(self, lo: i64) -> IdRange {
        IdRange { lo, ..self }
    }

    /// The upper bound when it does not depend on the dims.
    pub fn static_hi(&self) -> Option<i64> {
        self.m.is_none().then_some(self.c)
    }

    /// The bound as a slice's `(start, len)`, `start + len` one past the largest id (`c + 1` and `m`), for the
    /// runtime's check `start + len <= rows`. `None` for a static bound, or a constant part below -1.
    pub fn as_rows(&self) -> Option<(Dim, Dim)> {
        let m = self.m.clone()?;
        let start = usize::try_from(self.c.checked_add(1)?).ok()?;
        Some((Dim::fixed(start), m))
    }

    /// `k · self` for a constant `k ≥ 0`.
    fn scaled(&self, k: i64) -> Option<IdRange> {
        let m = match &self.m {
            Some(m) => Some(Dim {
                coeff: m.coeff.checked_mul(usize::try_from(k).ok()?)?,
                syms: m.syms.clone(),
            }),
            None => None,
        };
        IdRange::new(self.lo.checked_mul(k)?, self.c.checked_mul(k)?, m)
    }
}

/// The sum of two upper bounds' monomials, when it is one monomial.
fn add_monomials(a: &Option<Dim>, b: &Option<Dim>) -> Option<Option<Dim>> {
    match (a, b) {
        (None, m) | (m, None) => Some(m.clone()),
        (Some(a), Some(b)) if a.syms == b.syms => Some(Some(Dim {
            coeff: a.coeff.checked_add(b.coeff)?,
            syms: a.syms.clone(),
        })),
        _ => None,
    }
}

/// A range holding the values of both `a` and `b`, when one upper bound holds both (the same monomial or none).
fn either(a: IdRange, b: IdRange) -> Option<IdRange> {
    let m = match (&a.m, &b.m) {
        (None, None) => None,
        (Some(x), Some(y)) if x == y => Some(x.clone()),
        _ => return None,
    };
    Some(IdRange {
        lo: a.lo.min(b.lo),
        c: a.c.max(b.c),
        m,
    })
}

/// The range of `node`'s values, when the rules above bound it.
pub fn of(g: &Graph, node: NodeId) -> Option<IdRange> {
    let r = |n: NodeId| of(g, n);
    match &g.node(node).op {
        Op::Scalar(v) => (v.fract() == 0.0 && *v >= 0.0 && *v < F32_WHOLE_NUMBERS as f64)
            .then(|| IdRange::constant(*v as i64)),
        // A mask (a comparison's result, or one made into f32) holds 0 or 1.
        _ if g.ty(node).dtype == DType::Bool => Some(IdRange {
            lo: 0,
            c: 1,
            m: None,
        }),
        Op::Cast(a, _) => r(*a),
        Op::Arange { start, len } => {
            let start = i64::try_from(start.as_static()?).ok()?;
            IdRange::new(start, start - 1, Some(len.clone()))
        }
        Op::Permute { input, .. } | Op::Reshape { input, .. } | Op::Slice { input, .. } => {
            r(*input)
        }
        // The largest of values in a range lies in it (a reduction over an empty axis makes no values), and so
        // does the least, made as `min(axis, ..)` is: the negated largest of the negated.
        Op::Reduce {
            op: ReduceOp::Max,
            input,
            ..
        } => r(*input),
        Op::Unary(UnaryOp::Neg, a) => match &g.node(*a).op {
            Op::Reduce {
                op: ReduceOp::Max,
                input,
                ..
            } => match g.node(*input).op {
                Op::Unary(UnaryOp::Neg, values) => r(values),
                _ => None,
            },
            _ => None,
        },
        // Whole numbers stay what they are.
        Op::Unary(
            UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc | UnaryOp::Relu,
            a,
        ) => r(*a),
        Op::Binary(BinaryOp::Add, a, b) => {
            let (a, b) = (r(*a)?, r(*b)?);
            IdRange::new(
                a.lo.checked_add(b.lo)?,
                a.c.checked_add(b.c)?,
                add_monomials(&a.m, &b.m)?,
            )
        }
        Op::Binary(BinaryOp::Sub, a, b) => {
            let (a, b) = (r(*a)?, r(*b)?);
            // Only a constant comes off: then both ends move by it.
            let k = b.static_hi().filter(|&k| k == b.lo)?;
            Some(IdRange {
                lo: a.lo.checked_sub(k)?,
                c: a.c.checked_sub(k)?,
                m: a.m,
            })
        }
        Op::Binary(BinaryOp::Mul, a, b) => {
            let (a, b) = (r(*a)?, r(*b)?);
            if a.lo < 0 || b.lo < 0 {
                return None;
            }
            // One side bounded by a constant k (a mask: 1) scales the other's bound by k.
            let (k, other, k_lo) = match (a.static_hi(), b.static_hi()) {
                (Some(k), _) => (k, &b, a.lo),
                (_, Some(k)) => (k, &a, b.lo),
                _ => return None,
            };
            let mut scaled = other.scaled(k)?;
            scaled.lo = other.lo.checked_mul(k_lo)?;
            Some(scaled)
        }
        // `m ≥ 0`, so `max(c1 + m, c2) ≤ max(c1, c2) + m`.
        Op::Binary(BinaryOp::Max, a, b) => {
            let (a, b) = (r(*a)?, r(*b)?);
            let m = match (&a.m, &b.m) {
                (Some(x), Some(y)) if x != y => return None,
                (Some(x), _) | (_, Some(x)) => Some(x.clone()),
                (None, None) => None,
            };
            Some(IdRange {
                lo: a.lo.max(b.lo),
                c: a.c.max(b.c),
                m,
            })
        }
        // At most either bound: a constant one where there is one (`positions.min(511.0)` needs no check per call).
        Op::Binary(BinaryOp::Min, a, b) => {
            let (a, b) = (r(*a)?, r(*b)?);
            let lo = a.lo.min(b.lo);
            Some(match (a.static_hi(), b.static_hi()) {
                (Some(x), Some(y)) => IdRange::constant(x.min(y)).with_lo(lo),
                (Some(x), None) | (None, Some(x)) => IdRange::constant(x).with_lo(lo),
                (None, None) if a.m == b.m => IdRange {
                    lo,
                    c: a.c.min(b.c),
                    m: a.m,
                },
                (None, None) => a.with_lo(lo),
            })
        }
        Op::Where(_, a, b) => either(r(*a)?, r(*b)?),
        Op::Concat { inputs, .. } => {
            let (first, rest) = inputs.split_first()?;
            rest.iter()
                .try_fold(r(*first)?, |all, &i| either(all, r(i)?))
        }
        // Running sums of values in lo..=hi along an axis of L: at most hi · L, at least lo (the first one).
        Op::Cumsum { input, axis } => {
            let a = r(*input)?;
            if a.lo < 0 {
                return None;
            }
            let len = g.ty(*input).shape.0.get(*axis)?.clone();
            let m = match (&a.m, a.c) {
                (None, c) => Dim {
                    coeff: len.coeff.checked_mul(usize::try_from(c).ok()?)?,
                    syms: len.syms.clone(),
                },
                (Some(m), 0) => m.mul(&len),
                _ => return None,
            };
            IdRange::new(a.lo, 0, Some(m))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
