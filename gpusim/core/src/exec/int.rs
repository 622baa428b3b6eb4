//! Integer and bit operations on register values. Registers hold values in their low bits; every result is
//! masked to its type's width, and signed operands are sign-extended from that width when read.

use crate::ptx::ops::{IntOp, IntUnOp, Ty};

pub(crate) fn sext(value: u64, bits: u32) -> i64 {
    if bits >= 64 {
        value as i64
    } else {
        let shift = 64 - bits;
        ((value << shift) as i64) >> shift
    }
}

/// The value of a register read as `ty`, exactly, as an i128.
pub(crate) fn int_value(value: u64, ty: Ty) -> i128 {
    if ty.is_signed() {
        i128::from(sext(value, ty.bits()))
    } else {
        i128::from(value & ty.mask())
    }
}

pub(crate) fn int_binary(op: IntOp, ty: Ty, a: u64, b: u64) -> u64 {
    let bits = ty.bits();
    let mask = ty.mask();
    let signed = ty.is_signed();
    let (ua, ub) = (a & mask, b & mask);
    let (sa, sb) = (sext(a, bits), sext(b, bits));
    match op {
        IntOp::Add => a.wrapping_add(b) & mask,
        IntOp::Sub => a.wrapping_sub(b) & mask,
        IntOp::MulLo => a.wrapping_mul(b) & mask,
        IntOp::MulHi => {
            let product = if signed {
                (i128::from(sa) * i128::from(sb)) as u128
            } else {
                u128::from(ua) * u128::from(ub)
            };
            (product >> bits) as u64 & mask
        }
        IntOp::MulWide => {
            let wide_mask = if bits >= 32 {
                u64::MAX
            } else {
                (1u64 << (2 * bits)) - 1
            };
            if signed {
                sa.wrapping_mul(sb) as u64 & wide_mask
            } else {
                ua.wrapping_mul(ub) & wide_mask
            }
        }
        // Division by zero is undefined in PTX; the GPU returns all ones for the quotient, so do we.
        IntOp::Div if ub == 0 => mask,
        IntOp::Div if signed => sa.wrapping_div(sb) as u64 & mask,
        IntOp::Div => ua / ub,
        IntOp::Rem if ub == 0 => ua,
        IntOp::Rem if signed => sa.wrapping_rem(sb) as u64 & mask,
        IntOp::Rem => ua % ub,
        IntOp::Min if signed => sa.min(sb) as u64 & mask,
        IntOp::Min => ua.min(ub),
        IntOp::Max if signed => sa.max(sb) as u64 & mask,
        IntOp::Max => ua.max(ub),
        IntOp::And => ua & ub,
        IntOp::Or => ua | ub,
        IntOp::Xor => ua ^ ub,
        // Shift amounts are unsigned 32-bit and clamp at the width.
        IntOp::Shl => {
            let s = b & 0xffff_ffff;
            if s >= u64::from(bits) {
                0
            } else {
                (ua << s) & mask
            }
        }
        IntOp::Shr => {
            let s = (b & 0xffff_ffff).min(u64::from(bits));
            if signed {
                (sa >> s.min(63)) as u64 & mask
            } else if s >= u64::from(bits) {
                0
            } else {
                ua >> s
            }
        }
    }
}

pub(crate) fn int_unary(op: IntUnOp, ty: Ty, a: u64) -> u64 {
    let bits = ty.bits();
    let mask = ty.mask();
    let ua = a & mask;
    match op {
        IntUnOp::Not => !a & mask,
        IntUnOp::Neg => a.wrapping_neg() & mask,
        IntUnOp::Abs => sext(a, bits).wrapping_abs() as u64 & mask,
        IntUnOp::Popc => u64::from(ua.count_ones()),
        IntUnOp::Clz => u64::from(ua.leading_zeros() - (64 - bits)),
        IntUnOp::Brev => ua.reverse_bits() >> (64 - bits),
        IntUnOp::Cnot => u64::from(ua == 0),
    }
}

/// `prmt.b32` in its default mode: each selector nibble of `c` picks one of the eight bytes of `{b, a}`, its top
/// bit replicating that byte's sign.
pub(crate) fn prmt(a: u64, b: u64, c: u64) -> u64 {
    let bytes = ((b & 0xffff_ffff) << 32) | (a & 0xffff_ffff);
    let mut result = 0u64;
    for i in 0..4 {
        let selector = (c >> (4 * i)) & 0xf;
        let mut byte = (bytes >> (8 * (selector & 7))) & 0xff;
        if selector & 8 != 0 {
            byte = if byte & 0x80 != 0 { 0xff } else { 0 };
        }
        result |= byte << (8 * i);
    }
    result
}

pub(crate) fn lop3(a: u64, b: u64, c: u64, lut: u8) -> u64 {
    let mut result = 0u64;
    for i in 0..8 {
        if (lut >> i) & 1 != 0 {
            let ta = if i & 4 != 0 { a } else { !a };
            let tb = if i & 2 != 0 { b } else { !b };
            let tc = if i & 1 != 0 { c } else { !c };
            result |= ta & tb & tc;
        }
    }
    result & 0xffff_ffff
}

/// `bfi`: `b` with its `len` bits at `pos` replaced by the low bits of `a` (bits past the type's width dropped).
pub(crate) fn bfi(ty: Ty, a: u64, b: u64, pos: u64, len: u64) -> u64 {
    let bits = u64::from(ty.bits());
    let (pos, len) = (pos & 0xff, len & 0xff);
    let mut d = b;
    for i in 0..len {
        if pos + i >= bits {
            break;
        }
        let bit = 1u64 << (pos + i);
        if (a >> i) & 1 != 0 {
            d |= bit;
        } else {
            d &= !bit;
        }
    }
    d & ty.mask()
}

/// `bfe`: extracts `len` bits at `pos`, sign-extending for signed types.
pub(crate) fn bfe(ty: Ty, a: u64, b: u64, c: u64) -> u64 {
    let bits = u64::from(ty.bits());
    let mask = ty.mask();
    let pos = b & 0xff;
    let len = c & 0xff;
    let msb = bits - 1;
    let sign = if !ty.is_signed() || len == 0 {
        false
    } else {
        let bit = (pos + len - 1).min(msb);
        (a >> bit) & 1 != 0
    };
    let mut d = 0u64;
    for i in 0..bits {
        let bit = if i < len && pos + i <= msb {
            (a >> (pos + i)) & 1 != 0
        } else {
            sign
        };
        if bit {
            d |= 1 << i;
        }
    }
    d & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bfi_replaces_the_field_and_keeps_the_rest() {
        // nvcc's `(hi << 6) | (lo & 63)` as `bfi.b64 d, hi, lo, 6, 58`.
        assert_eq!(bfi(Ty::B64, 0x5, 0x3f, 6, 58), (0x5 << 6) | 0x3f);
        assert_eq!(bfi(Ty::B32, 0b101, 0xffff_ffff, 4, 3), 0xffff_ffdf);
        // Bits past the type's width are dropped; a zero length leaves `b`.
        assert_eq!(bfi(Ty::B32, 0xff, 0, 28, 8), 0xf000_0000);
        assert_eq!(bfi(Ty::B64, 0xff, 0x1234, 3, 0), 0x1234);
        // Only the low 8 bits of pos and len count.
        assert_eq!(bfi(Ty::B32, 1, 0, 0x100 + 2, 1), 4);
    }
}
