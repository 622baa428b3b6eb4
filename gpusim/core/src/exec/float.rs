//! Floating-point operations and conversions.
//!
//! - f32/f64 `add`/`sub`/`mul`/`div`/`fma`/`sqrt`/`rcp` are exact IEEE with the instruction's rounding mode
//!   (`fma.rn` is `f32::mul_add`; the directed modes `.rz`/`.rm`/`.rp` round the exact result, which is computed
//!   as an f64 plus its error term). f32 division, square root and reciprocal computed in f64 and rounded once
//!   are correctly rounded (53 ≥ 2·24 + 2), so `div.full`/`div.approx`/`sqrt.approx`/`rcp.approx` are *more*
//!   accurate here than on the GPU.
//! - `.ftz` flushes subnormal inputs and results to a zero of the same sign; `.sat` clamps to [0, 1] (NaN → 0).
//! - The approximations are computed in f64 and rounded to f32, so they differ from the GPU by at most the GPU's
//!   documented error (PTX ISA 9.0): `ex2.approx` ≤ 2 ulp, `lg2.approx` ≤ 2^-22.6 absolute near 1 / 4 ulp,
//!   `rsqrt.approx` ≤ 2^-22.9 relative, `rcp.approx`/`sqrt.approx` ≤ 1 ulp, `sin`/`cos.approx` ≤ 2^-20.5
//!   absolute in [-π, π], `tanh.approx` ≤ 2^-11 relative. A comparison with a GPU must allow that much.
//! - f16/bf16 conversions use the `half` crate (round to nearest even, exact).

use super::int::int_value;
use crate::ptx::ops::{Cmp, FloatMods, FloatOp, FloatUnOp, Rounding, TestKind, Ty};

fn flush32(x: f32) -> f32 {
    if x.is_subnormal() {
        0.0f32.copysign(x)
    } else {
        x
    }
}

fn flush64(x: f64) -> f64 {
    if x.is_subnormal() {
        0.0f64.copysign(x)
    } else {
        x
    }
}

fn two_sum(a: f64, b: f64) -> (f64, f64) {
    let s = a + b;
    let bb = s - a;
    let e = (a - (s - bb)) + (b - bb);
    (s, e)
}

/// Rounds the exact value `s + err` (err tiny next to s, or only its sign meaningful) to f32 with `rnd`.
pub(crate) fn round_f32(s: f64, err: f64, rnd: Rounding) -> f32 {
    let r = s as f32;
    if !s.is_finite() {
        return r;
    }
    if r.is_infinite() {
        // Overflow: directed modes stop at the largest finite value on the side they do not round toward.
        let toward_inf = match rnd {
            Rounding::Rn | Rounding::Default => true,
            Rounding::Rz => false,
            Rounding::Rm => r < 0.0,
            Rounding::Rp => r > 0.0,
        };
        return if toward_inf { r } else { f32::MAX.copysign(r) };
    }
    let diff = (s - f64::from(r)) + err;
    match rnd {
        Rounding::Rn | Rounding::Default => r,
        Rounding::Rm if diff < 0.0 => r.next_down(),
        Rounding::Rp if diff > 0.0 => r.next_up(),
        Rounding::Rz if r > 0.0 && diff < 0.0 => r.next_down(),
        Rounding::Rz if r < 0.0 && diff > 0.0 => r.next_up(),
        _ => r,
    }
}

fn saturate32(x: f32) -> f32 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(0.0, 1.0)
    }
}

fn saturate64(x: f64) -> f64 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(0.0, 1.0)
    }
}

/// PTX `min`/`max`: a NaN operand yields the other one; -0 is below +0.
fn min_max<T: PartialOrd + Copy>(
    a: T,
    b: T,
    a_nan: bool,
    b_nan: bool,
    a_neg: bool,
    b_neg: bool,
    max: bool,
) -> T {
    if a_nan {
        return b;
    }
    if b_nan {
        return a;
    }
    let a_below = a < b || (a == b && a_neg && !b_neg);
    if a_below != max {
        a
    } else {
        b
    }
}

pub(crate) fn float_binary(op: FloatOp, ty: Ty, mods: FloatMods, a: u64, b: u64) -> u64 {
    if ty == Ty::F64 {
        let (a, b) = (f64::from_bits(a), f64::from_bits(b));
        let (a, b) = if mods.ftz {
            (flush64(a), flush64(b))
        } else {
            (a, b)
        };
        let mut r = match op {
            FloatOp::Add => a + b,
            FloatOp::Sub => a - b,
            FloatOp::Mul => a * b,
            FloatOp::Div => a / b,
            FloatOp::Min => min_max(
                a,
                b,
                a.is_nan(),
                b.is_nan(),
                a.is_sign_negative(),
                b.is_sign_negative(),
                false,
            ),
            FloatOp::Max => min_max(
                a,
                b,
                a.is_nan(),
                b.is_nan(),
                a.is_sign_negative(),
                b.is_sign_negative(),
                true,
            ),
            FloatOp::CopySign => b.copysign(a),
        };
        if mods.sat {
            r = saturate64(r);
        }
        return r.to_bits();
    }
    let (a, b) = (f32::from_bits(a as u32), f32::from_bits(b as u32));
    let (a, b) = if mods.ftz {
        (flush32(a), flush32(b))
    } else {
        (a, b)
    };
    let directed = matches!(mods.rnd, Rounding::Rz | Rounding::Rm | Rounding::Rp);
    let mut r = match op {
        FloatOp::Add if directed => {
            let (s, e) = two_sum(f64::from(a), f64::from(b));
            round_f32(s, e, mods.rnd)
        }
        FloatOp::Add => a + b,
        FloatOp::Sub if directed => {
            let (s, e) = two_sum(f64::from(a), -f64::from(b));
            round_f32(s, e, mods.rnd)
        }
        FloatOp::Sub => a - b,
        FloatOp::Mul if directed => round_f32(f64::from(a) * f64::from(b), 0.0, mods.rnd),
        FloatOp::Mul => a * b,
        FloatOp::Div => {
            let (a, b) = (f64::from(a), f64::from(b));
            let q = a / b;
            // The sign of the exact remainder a - q·b tells which side of q the exact quotient lies.
            let residual = (-q).mul_add(b, a);
            let err = if q.is_finite() && b != 0.0 {
                residual / b
            } else {
                0.0
            };
            round_f32(q, err, mods.rnd)
        }
        FloatOp::Min => min_max(
            a,
            b,
            a.is_nan(),
            b.is_nan(),
            a.is_sign_negative(),
            b.is_sign_negative(),
            false,
        ),
        FloatOp::Max => min_max(
            a,
            b,
            a.is_nan(),
            b.is_nan(),
            a.is_sign_negative(),
            b.is_sign_negative(),
            true,
        ),
        FloatOp::CopySign => b.copysign(a),
    };
    if mods.sat {
        r = saturate32(r);
    }
    if mods.ftz {
        r = flush32(r);
    }
    u64::from(r.to_bits())
}

pub(crate) fn fma(ty: Ty, mods: FloatMods, a: u64, b: u64, c: u64) -> u64 {
    if ty == Ty::F64 {
        let r = f64::from_bits(a).mul_add(f64::from_bits(b), f64::from_bits(c));
        return if mods.sat { saturate64(r) } else { r }.to_bits();
    }
    let (mut a, mut b, mut c) = (
        f32::from_bits(a as u32),
        f32::from_bits(b as u32),
        f32::from_bits(c as u32),
    );
    if mods.ftz {
        (a, b, c) = (flush32(a), flush32(b), flush32(c));
    }
    let mut r = match mods.rnd {
        Rounding::Rn | Rounding::Default => a.mul_add(b, c),
        rnd => {
            // a·b is exact in f64; the sum's error term is exact too.
            let (s, e) = two_sum(f64::from(a) * f64::from(b), f64::from(c));
            round_f32(s, e, rnd)
        }
    };
    if mods.sat {
        r = saturate32(r);
    }
    if mods.ftz {
        r = flush32(r);
    }
    u64::from(r.to_bits())
}

pub(crate) fn float_unary(op: FloatUnOp, ty: Ty, mods: FloatMods, a: u64) -> u64 {
    if ty == Ty::F64 {
        let a = f64::from_bits(a);
        let a = if mods.ftz { flush64(a) } else { a };
        let r = match op {
            FloatUnOp::Neg => -a,
            FloatUnOp::Abs => a.abs(),
            FloatUnOp::Sqrt => a.sqrt(),
            FloatUnOp::Rsqrt => 1.0 / a.sqrt(),
            FloatUnOp::Rcp => 1.0 / a,
            FloatUnOp::Ex2 => a.exp2(),
            FloatUnOp::Lg2 => a.log2(),
            FloatUnOp::Sin => a.sin(),
            FloatUnOp::Cos => a.cos(),
            FloatUnOp::Tanh => a.tanh(),
        };
        return if mods.sat { saturate64(r) } else { r }.to_bits();
    }
    let a = f32::from_bits(a as u32);
    let a = if mods.ftz { flush32(a) } else { a };
    let x = f64::from(a);
    let mut r = match op {
        FloatUnOp::Neg => -a,
        FloatUnOp::Abs => a.abs(),
        FloatUnOp::Sqrt => x.sqrt() as f32,
        FloatUnOp::Rsqrt => (1.0 / x.sqrt()) as f32,
        FloatUnOp::Rcp => (1.0 / x) as f32,
        FloatUnOp::Ex2 => x.exp2() as f32,
        FloatUnOp::Lg2 => x.log2() as f32,
        FloatUnOp::Sin => x.sin() as f32,
        FloatUnOp::Cos => x.cos() as f32,
        FloatUnOp::Tanh => x.tanh() as f32,
    };
    if mods.sat {
        r = saturate32(r);
    }
    if mods.ftz {
        r = flush32(r);
    }
    u64::from(r.to_bits())
}

/// A float register value of type `ty` as an exact f64.
pub(crate) fn float_value(bits: u64, ty: Ty) -> f64 {
    match ty {
        Ty::F16 => half::f16::from_bits(bits as u16).to_f64(),
        Ty::Bf16 => half::bf16::from_bits(bits as u16).to_f64(),
        Ty::F32 => f64::from(f32::from_bits(bits as u32)),
        _ => f64::from_bits(bits),
    }
}

pub(crate) fn compare(cmp: Cmp, ty: Ty, ftz: bool, a: u64, b: u64) -> bool {
    if ty.is_float() {
        let (mut x, mut y) = (float_value(a, ty), float_value(b, ty));
        if ftz && ty == Ty::F32 {
            x = f64::from(flush32(x as f32));
            y = f64::from(flush32(y as f32));
        }
        let unordered = x.is_nan() || y.is_nan();
        return match cmp {
            Cmp::Eq => !unordered && x == y,
            Cmp::Ne => !unordered && x != y,
            Cmp::Lt => !unordered && x < y,
            Cmp::Le => !unordered && x <= y,
            Cmp::Gt => !unordered && x > y,
            Cmp::Ge => !unordered && x >= y,
            Cmp::Equ => unordered || x == y,
            Cmp::Neu => unordered || x != y,
            Cmp::Ltu => unordered || x < y,
            Cmp::Leu => unordered || x <= y,
            Cmp::Gtu => unordered || x > y,
            Cmp::Geu => unordered || x >= y,
            Cmp::Num => !unordered,
            Cmp::Nan => unordered,
        };
    }
    let (x, y) = (int_value(a, ty), int_value(b, ty));
    match cmp {
        Cmp::Eq | Cmp::Equ => x == y,
        Cmp::Ne | Cmp::Neu => x != y,
        Cmp::Lt | Cmp::Ltu => x < y,
        Cmp::Le | Cmp::Leu => x <= y,
        Cmp::Gt | Cmp::Gtu => x > y,
        Cmp::Ge | Cmp::Geu => x >= y,
        Cmp::Num => true,
        Cmp::Nan => false,
    }
}

pub(crate) fn testp(kind: TestKind, ty: Ty, a: u64) -> bool {
    let x = float_value(a, ty);
    let subnormal = match ty {
        Ty::F32 => f32::from_bits(a as u32).is_subnormal(),
        _ => x.is_subnormal(),
    };
    match kind {
        TestKind::Finite => x.is_finite(),
        TestKind::Infinite => x.is_infinite(),
        TestKind::Number => !x.is_nan(),
        TestKind::NotANumber => x.is_nan(),
        TestKind::Normal => x.is_finite() && x != 0.0 && !subnormal,
        TestKind::Subnormal => subnormal,
    }
}

fn round_integral(x: f64, rnd: Rounding) -> f64 {
    match rnd {
        Rounding::Rn => x.round_ties_even(),
        Rounding::Rm => x.floor(),
        Rounding::Rp => x.ceil(),
        Rounding::Rz | Rounding::Default => x.trunc(),
    }
}

/// An exact integer to f32 with `rnd`.
fn int_to_f32(v: i128, rnd: Rounding) -> f32 {
    let r = v as f32;
    if matches!(rnd, Rounding::Rn | Rounding::Default) || !r.is_finite() {
        return r;
    }
    let back = r as i128;
    let below = v < back;
    let above = v > back;
    match rnd {
        Rounding::Rm if below => r.next_down(),
        Rounding::Rp if above => r.next_up(),
        Rounding::Rz if r > 0.0 && below => r.next_down(),
        Rounding::Rz if r < 0.0 && above => r.next_up(),
        _ => r,
    }
}

fn store_float(x: f64, dst: Ty, rnd: Rounding, err: f64) -> u64 {
    match dst {
        Ty::F16 => u64::from(half::f16::from_f64(x).to_bits()),
        Ty::Bf16 => u64::from(half::bf16::from_f64(x).to_bits()),
        Ty::F32 => u64::from(round_f32(x, err, rnd).to_bits()),
        _ => x.to_bits(),
    }
}

/// `cvt` between any two types. Float → integer conversions saturate (NaN → 0), as PTX specifies; integer →
/// integer conversions wrap unless `.sat`.
pub(crate) fn cvt(
    dst: Ty,
    src: Ty,
    rnd: Rounding,
    int_rounding: bool,
    sat: bool,
    ftz: bool,
    a: u64,
) -> u64 {
    match (src.is_float(), dst.is_float()) {
        (false, false) => {
            let v = int_value(a, src);
            let v = if sat { clamp_to(v, dst) } else { v };
            (v as u64) & dst.mask()
        }
        (false, true) => {
            let v = int_value(a, src);
            match dst {
                Ty::F32 => u64::from(int_to_f32(v, rnd).to_bits()),
                Ty::F64 => (v as f64).to_bits(),
                _ => store_float(v as f64, dst, rnd, 0.0),
            }
        }
        (true, false) => {
            let mut x = float_value(a, src);
            if ftz && src == Ty::F32 {
                x = f64::from(flush32(x as f32));
            }
            if x.is_nan() {
                return 0;
            }
            let x = round_integral(x, rnd);
            let v = if x >= 1.7e38 {
                i128::MAX
            } else if x <= -1.7e38 {
                i128::MIN
            } else {
                x as i128
            };
            (clamp_to(v, dst) as u64) & dst.mask()
        }
        (true, true) => {
            let mut x = float_value(a, src);
            if ftz && src == Ty::F32 {
                x = f64::from(flush32(x as f32));
            }
            if int_rounding {
                x = round_integral(x, rnd);
            }
            let rnd = if int_rounding { Rounding::Rn } else { rnd };
            let mut r = store_float(x, dst, rnd, 0.0);
            if sat || ftz {
                let mut y = float_value(r, dst);
                if sat {
                    y = if y.is_nan() { 0.0 } else { y.clamp(0.0, 1.0) };
                }
                if ftz && dst == Ty::F32 {
                    y = f64::from(flush32(y as f32));
                }
                r = store_float(y, dst, Rounding::Rn, 0.0);
            }
            r
        }
    }
}

fn clamp_to(v: i128, ty: Ty) -> i128 {
    let bits = ty.bits();
    let (lo, hi) = if ty.is_signed() {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    };
    v.clamp(lo, hi)
}
