//! One thread's interpreter loop: runs from its pc until it exits or reaches a `bar.sync` or `shfl.sync`, which
//! the block scheduler ([`super::block`]) resolves with the other threads.

use super::access::Access;
use super::float::{compare, cvt, float_binary, float_unary, fma, testp};
use super::int::{bfe, bfi, int_binary, int_unary, lop3, prmt};
use crate::error::{SimError, SimResult};
use crate::ptx::ops::{AtomOp, BoolOp, Instr, IntOp, Op, Ty, NONE};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Ready,
    /// Waiting at the `bar.sync` at its pc.
    AtBarrier,
    /// Waiting at the `shfl.sync` at its pc.
    AtShuffle,
    Exited,
}

fn element(bytes: &[u8; 32], i: usize, size: usize, ty: Ty) -> u64 {
    let at = i * size;
    let raw = match size {
        4 => u64::from(u32::from_le_bytes([
            bytes[at],
            bytes[at + 1],
            bytes[at + 2],
            bytes[at + 3],
        ])),
        8 => u64::from_le_bytes([
            bytes[at],
            bytes[at + 1],
            bytes[at + 2],
            bytes[at + 3],
            bytes[at + 4],
            bytes[at + 5],
            bytes[at + 6],
            bytes[at + 7],
        ]),
        2 => u64::from(u16::from_le_bytes([bytes[at], bytes[at + 1]])),
        _ => u64::from(bytes[at]),
    };
    // Signed loads sign-extend into the register.
    if ty.is_signed() {
        super::int::sext(raw, ty.bits()) as u64
    } else {
        raw
    }
}

/// Runs thread `regs`/`mem.thread` from `*pc`; returns why it stopped (pc left at the barrier or shuffle).
pub(crate) fn run(
    code: &[Instr],
    regs: &mut [u64],
    pc: &mut u32,
    mem: &mut Access<'_>,
    executed: &mut u64,
    limit: u64,
) -> SimResult<Status> {
    let mut i = *pc as usize;
    let mut count = 0u64;
    let status = loop {
        let Some(ins) = code.get(i) else {
            break Status::Exited;
        };
        count += 1;
        if ins.guard != NONE && (regs[ins.guard as usize] != 0) == ins.guard_negated {
            i += 1;
            continue;
        }
        let r = |s: u32| regs[s as usize];
        match ins.op {
            Op::Mov { d, a, mask } => regs[d as usize] = r(a) & mask,
            Op::Int { op, ty, d, a, b } => regs[d as usize] = int_binary(op, ty, r(a), r(b)),
            Op::IntUnary { op, ty, d, a } => regs[d as usize] = int_unary(op, ty, r(a)),
            Op::Mad { op, ty, d, a, b, c } => {
                let product = int_binary(op, ty, r(a), r(b));
                let sum_ty = if op == IntOp::MulWide {
                    crate::ptx::decode::wide(ty)
                } else {
                    ty
                };
                regs[d as usize] = int_binary(IntOp::Add, sum_ty, product, r(c));
            }
            Op::Float {
                op,
                ty,
                mods,
                d,
                a,
                b,
            } => regs[d as usize] = float_binary(op, ty, mods, r(a), r(b)),
            Op::FloatUnary { op, ty, mods, d, a } => {
                regs[d as usize] = float_unary(op, ty, mods, r(a))
            }
            Op::Fma {
                ty,
                mods,
                d,
                a,
                b,
                c,
            } => regs[d as usize] = fma(ty, mods, r(a), r(b), r(c)),
            Op::Setp {
                cmp,
                ty,
                ftz,
                d,
                d_not,
                a,
                b,
                combine,
            } => {
                let t = compare(cmp, ty, ftz, r(a), r(b));
                let (p, q) = match combine {
                    None => (t, !t),
                    Some((op, c, negated)) => {
                        let c = (r(c) != 0) != negated;
                        let f = |x: bool| match op {
                            BoolOp::And => x && c,
                            BoolOp::Or => x || c,
                            BoolOp::Xor => x != c,
                        };
                        (f(t), f(!t))
                    }
                };
                regs[d as usize] = u64::from(p);
                if d_not != NONE {
                    regs[d_not as usize] = u64::from(q);
                }
            }
            Op::Selp { d, a, b, p, mask } => {
                regs[d as usize] = if r(p) != 0 { r(a) } else { r(b) } & mask
            }
            Op::Cvt {
                dst,
                src,
                rnd,
                int_rounding,
                sat,
                ftz,
                d,
                a,
            } => {
                regs[d as usize] = cvt(dst, src, rnd, int_rounding, sat, ftz, r(a));
            }
            Op::Ld {
                space,
                ty,
                d,
                n,
                addr,
            } => {
                let size = ty.bytes() as usize;
                let n = usize::from(n);
                let mut buf = [0u8; 32];
                let address = r(addr.base).wrapping_add(addr.offset as u64);
                mem.load(space, address, &mut buf[..size * n], ins.line)?;
                for (k, &slot) in d[..n].iter().enumerate() {
                    regs[slot as usize] = element(&buf, k, size, ty);
                }
            }
            Op::St {
                space,
                ty,
                s,
                n,
                addr,
            } => {
                let size = ty.bytes() as usize;
                let n = usize::from(n);
                let mut buf = [0u8; 32];
                for (k, &slot) in s[..n].iter().enumerate() {
                    let value = r(slot).to_le_bytes();
                    for b in 0..size {
                        buf[k * size + b] = value[b];
                    }
                }
                let address = r(addr.base).wrapping_add(addr.offset as u64);
                mem.store(space, address, &buf[..size * n], ins.line)?;
            }
            Op::Cvta {
                space,
                to_generic,
                d,
                a,
                mask,
            } => {
                use crate::ptx::decode::{LOCAL_WINDOW, SHARED_WINDOW};
                use crate::ptx::ops::Space;
                let window = match space {
                    Space::Shared => SHARED_WINDOW,
                    Space::Local => LOCAL_WINDOW,
                    _ => 0,
                };
                let v = r(a);
                regs[d as usize] = if to_generic {
                    v.wrapping_add(window)
                } else {
                    v.wrapping_sub(window)
                } & mask;
            }
            Op::Bra { target } => {
                if count > limit {
                    return Err(SimError::Runaway {
                        executed: count,
                        site: mem.at.site(mem.thread, ins.line),
                    });
                }
                i = target as usize;
                continue;
            }
            Op::Exit => break Status::Exited,
            Op::Bar { .. } => break Status::AtBarrier,
            Op::Shfl { .. } => break Status::AtShuffle,
            Op::Nop => {}
            Op::Pack {
                d,
                parts,
                n,
                part_bits,
            } => {
                let mut v = 0u64;
                let part_mask = if part_bits >= 64 {
                    u64::MAX
                } else {
                    (1u64 << part_bits) - 1
                };
                for (k, &slot) in parts[..usize::from(n)].iter().enumerate() {
                    v |= (r(slot) & part_mask) << (k as u32 * u32::from(part_bits));
                }
                regs[d as usize] = v;
            }
            Op::Unpack { d, n, part_bits, a } => {
                let v = r(a);
                let part_mask = if part_bits >= 64 {
                    u64::MAX
                } else {
                    (1u64 << part_bits) - 1
                };
                for (k, &slot) in d[..usize::from(n)].iter().enumerate() {
                    regs[slot as usize] = (v >> (k as u32 * u32::from(part_bits))) & part_mask;
                }
            }
            Op::Prmt { d, a, b, c } => regs[d as usize] = prmt(r(a), r(b), r(c)),
            Op::Lop3 { d, a, b, c, lut } => regs[d as usize] = lop3(r(a), r(b), r(c), lut),
            Op::Bfe { ty, d, a, b, c } => regs[d as usize] = bfe(ty, r(a), r(b), r(c)),
            Op::Bfi {
                ty,
                d,
                a,
                b,
                pos,
                len,
            } => regs[d as usize] = bfi(ty, r(a), r(b), r(pos), r(len)),
            Op::FmaF32 { d, a, b, c } => {
                let (a, b, c) = (f32_of(r(a)), f32_of(r(b)), f32_of(r(c)));
                regs[d as usize] = u64::from(a.mul_add(b, c).to_bits());
            }
            Op::AddF32 { d, a, b } => {
                regs[d as usize] = u64::from((f32_of(r(a)) + f32_of(r(b))).to_bits())
            }
            Op::MulF32 { d, a, b } => {
                regs[d as usize] = u64::from((f32_of(r(a)) * f32_of(r(b))).to_bits())
            }
            Op::LdShared32 { d, addr } => {
                let address = r(addr.base).wrapping_add(addr.offset as u64);
                regs[d as usize] = u64::from(mem.load_shared32(address, ins.line)?);
            }
            Op::Testp { kind, ty, d, a } => regs[d as usize] = u64::from(testp(kind, ty, r(a))),
            Op::Atom {
                space,
                op,
                ty,
                d,
                addr,
                b,
                c,
            } => {
                let address = r(addr.base).wrapping_add(addr.offset as u64);
                let (b, c) = (r(b), if c == NONE { 0 } else { r(c) });
                let old = mem.atomic(space, address, ty.bytes() as usize, ins.line, |old| {
                    atomic_update(op, ty, old, b, c)
                })?;
                regs[d as usize] = old;
            }
        }
        i += 1;
    };
    *pc = i as u32;
    *executed += count;
    Ok(status)
}

fn f32_of(bits: u64) -> f32 {
    f32::from_bits(bits as u32)
}

fn atomic_update(op: AtomOp, ty: Ty, old: u64, b: u64, c: u64) -> u64 {
    let mask = ty.mask();
    match op {
        AtomOp::Add if ty == Ty::F32 => {
            u64::from((f32::from_bits(old as u32) + f32::from_bits(b as u32)).to_bits())
        }
        AtomOp::Add if ty == Ty::F64 => (f64::from_bits(old) + f64::from_bits(b)).to_bits(),
        AtomOp::Add => int_binary(IntOp::Add, ty, old, b),
        AtomOp::Min if ty.is_float() => {
            float_binary(crate::ptx::ops::FloatOp::Min, ty, no_mods(), old, b)
        }
        AtomOp::Max if ty.is_float() => {
            float_binary(crate::ptx::ops::FloatOp::Max, ty, no_mods(), old, b)
        }
        AtomOp::Min => int_binary(IntOp::Min, ty, old, b),
        AtomOp::Max => int_binary(IntOp::Max, ty, old, b),
        AtomOp::Exch => b & mask,
        AtomOp::Cas => {
            if old & mask == b & mask {
                c & mask
            } else {
                old
            }
        }
        AtomOp::And => old & b & mask,
        AtomOp::Or => (old | b) & mask,
        AtomOp::Xor => (old ^ b) & mask,
        AtomOp::Inc => {
            if old & mask >= b & mask {
                0
            } else {
                (old + 1) & mask
            }
        }
        AtomOp::Dec => {
            if old & mask == 0 || old & mask > b & mask {
                b & mask
            } else {
                (old - 1) & mask
            }
        }
    }
}

fn no_mods() -> crate::ptx::ops::FloatMods {
    crate::ptx::ops::FloatMods {
        rnd: crate::ptx::ops::Rounding::Default,
        ftz: false,
        sat: false,
    }
}
