//! Raw statements of one `.entry` → decoded instructions over register-file slots.
//!
//! Slot layout of a thread's register file: the special registers ([`SPECIAL_REGISTERS`]), then every declared
//! register, then the constants (immediates and symbol addresses). Constants are preloaded once per launch and
//! never written (no instruction has a constant destination).

use super::ops::*;
use super::parse::{Literal, Operand, RawEntry, RawInstr, RawModule, StateSpace, Stmt, VarDecl};
use crate::error::{SimError, SimResult};
use std::collections::HashMap;

/// Base of the generic-address window onto the block's shared memory (below every device allocation).
pub(crate) const SHARED_WINDOW: u64 = 0x5000_0000_0000;
/// Base of the generic-address window onto the thread's local memory.
pub(crate) const LOCAL_WINDOW: u64 = 0x6000_0000_0000;
/// Size of each window.
pub(crate) const WINDOW_BYTES: u64 = 0x1000_0000_0000;
/// Alignment of the dynamic (`extern .shared`) part after the static shared variables.
const DYNAMIC_SHARED_ALIGN: u32 = 16;

#[derive(Debug)]
pub(crate) struct DecodedBody {
    pub code: Vec<Instr>,
    /// Registers (slots `SPECIAL_REGISTERS.len()..` + this count).
    pub register_count: u32,
    /// Values of the constant slots, which follow the registers.
    pub constants: Vec<u64>,
    pub local_bytes: u32,
    pub static_shared_bytes: u32,
    /// Offset of `extern .shared` arrays in the block's shared memory.
    pub dynamic_shared_offset: u32,
}

#[derive(Clone, Copy)]
enum Symbol {
    Register(Slot),
    /// An address in `space` (shared offset, local offset, parameter offset).
    Address(u64),
}

struct Decoder<'a> {
    symbols: HashMap<String, Symbol>,
    constants: Vec<u64>,
    constant_slots: HashMap<u64, Slot>,
    first_constant: Slot,
    next_register: Slot,
    labels: HashMap<String, u32>,
    unsupported_symbols: &'a [String],
    sink: Slot,
}

fn align_up(value: u32, align: u32) -> u32 {
    value.div_ceil(align.max(1)) * align.max(1)
}

/// Lays out the shared and local variables of `entry` (module-scope `.shared` first) and decodes its body.
pub(crate) fn decode_entry(
    module: &RawModule,
    entry: &RawEntry,
    param_offsets: &[(String, u32)],
) -> SimResult<DecodedBody> {
    let mut symbols = HashMap::new();
    for (i, name) in SPECIAL_REGISTERS.iter().enumerate() {
        symbols.insert(name.to_string(), Symbol::Register(i as Slot));
    }
    for (name, offset) in param_offsets {
        symbols.insert(name.clone(), Symbol::Address(u64::from(*offset)));
    }

    // Pass 1: count registers, lay out variables, find labels.
    let mut register_count = 1u32; // slot for the sink `_`
    let mut labels = HashMap::new();
    let mut instructions = 0u32;
    let mut shared_end = 0u32;
    let mut local_end = 0u32;
    let mut dynamic: Vec<String> = Vec::new();
    let mut dynamic_align = DYNAMIC_SHARED_ALIGN;
    let mut place = |decl: &VarDecl, symbols: &mut HashMap<String, Symbol>| -> SimResult<()> {
        match decl.space {
            StateSpace::Shared if decl.count.is_none() => {
                dynamic_align = dynamic_align.max(decl.align);
                dynamic.push(decl.name.clone());
            }
            StateSpace::Shared => {
                shared_end = align_up(shared_end, decl.align);
                symbols.insert(decl.name.clone(), Symbol::Address(u64::from(shared_end)));
                shared_end += decl.bytes();
            }
            StateSpace::Local => {
                local_end = align_up(local_end, decl.align);
                symbols.insert(decl.name.clone(), Symbol::Address(u64::from(local_end)));
                local_end += decl.bytes();
            }
            _ => {
                return Err(SimError::UnsupportedInstruction {
                    line: decl.line,
                    instruction: format!("declaration of `{}` in this state space", decl.name),
                })
            }
        }
        Ok(())
    };
    for decl in &module.shared {
        place(decl, &mut symbols)?;
    }
    for stmt in &entry.body {
        match stmt {
            Stmt::Reg { names, .. } => {
                for (_, count) in names {
                    register_count += count.unwrap_or(1);
                }
            }
            Stmt::Var(decl) => place(decl, &mut symbols)?,
            Stmt::Label(name) => {
                labels.insert(name.clone(), instructions);
            }
            Stmt::Instr(_) => instructions += 1,
        }
    }
    let dynamic_shared_offset = align_up(shared_end, dynamic_align);
    for name in dynamic {
        symbols.insert(name, Symbol::Address(u64::from(dynamic_shared_offset)));
    }

    let first_register = SPECIAL_REGISTERS.len() as Slot;
    let mut decoder = Decoder {
        symbols,
        constants: Vec::new(),
        constant_slots: HashMap::new(),
        first_constant: first_register + register_count,
        next_register: first_register + 1,
        labels,
        unsupported_symbols: &module.unsupported_symbols,
        sink: first_register,
    };

    // Pass 2: declare registers in order and decode instructions.
    let mut code = Vec::with_capacity(instructions as usize);
    for stmt in &entry.body {
        match stmt {
            Stmt::Reg { ty, names, line } => {
                if Ty::parse(ty.trim_start_matches('.')).is_none() {
                    return Err(SimError::Parse {
                        line: *line,
                        message: format!("unknown register type `{ty}`"),
                    });
                }
                for (name, count) in names {
                    match count {
                        Some(n) => {
                            for i in 0..*n {
                                decoder.declare(format!("{name}{i}"));
                            }
                        }
                        None => decoder.declare(name.clone()),
                    }
                }
            }
            Stmt::Instr(raw) => code.push(decoder.instruction(raw)?),
            Stmt::Var(_) | Stmt::Label(_) => {}
        }
    }
    Ok(DecodedBody {
        code,
        register_count,
        constants: decoder.constants,
        local_bytes: local_end,
        static_shared_bytes: shared_end,
        dynamic_shared_offset,
    })
}

fn unsupported(raw: &RawInstr) -> SimError {
    SimError::UnsupportedInstruction {
        line: raw.line,
        instruction: raw.opcode.clone(),
    }
}

fn parse_err(raw: &RawInstr, message: impl Into<String>) -> SimError {
    SimError::Parse {
        line: raw.line,
        message: format!("`{}`: {}", raw.opcode, message.into()),
    }
}

fn rounding(mods: &[&str]) -> Rounding {
    for m in mods {
        match *m {
            "rn" | "rni" => return Rounding::Rn,
            "rz" | "rzi" => return Rounding::Rz,
            "rm" | "rmi" => return Rounding::Rm,
            "rp" | "rpi" => return Rounding::Rp,
            _ => {}
        }
    }
    Rounding::Default
}

fn directed(rnd: Rounding) -> bool {
    matches!(rnd, Rounding::Rz | Rounding::Rm | Rounding::Rp)
}

fn float_mods(mods: &[&str]) -> FloatMods {
    FloatMods {
        rnd: rounding(mods),
        ftz: mods.contains(&"ftz"),
        sat: mods.contains(&"sat"),
    }
}

fn literal_bits(literal: &Literal, ty: Ty) -> u64 {
    match (literal, ty) {
        (Literal::F32(bits), Ty::F64) => f64::from(f32::from_bits(*bits)).to_bits(),
        (Literal::F32(bits), _) => u64::from(*bits),
        (Literal::F64(bits), Ty::F32) => u64::from((f64::from_bits(*bits) as f32).to_bits()),
        (Literal::F64(bits), _) => *bits,
        (Literal::Float(v), Ty::F64) => v.to_bits(),
        (Literal::Float(v), _) => u64::from((*v as f32).to_bits()),
        (Literal::Int(v), Ty::F32) => u64::from((*v as i64 as f32).to_bits()),
        (Literal::Int(v), Ty::F64) => (*v as i64 as f64).to_bits(),
        (Literal::Int(v), _) => *v,
    }
}

impl Decoder<'_> {
    fn declare(&mut self, name: String) {
        self.symbols
            .insert(name, Symbol::Register(self.next_register));
        self.next_register += 1;
    }

    fn constant(&mut self, value: u64) -> Slot {
        if let Some(&slot) = self.constant_slots.get(&value) {
            return slot;
        }
        let slot = self.first_constant + self.constants.len() as Slot;
        self.constants.push(value);
        self.constant_slots.insert(value, slot);
        slot
    }

    fn symbol(&self, raw: &RawInstr, name: &str) -> SimResult<Symbol> {
        if let Some(symbol) = self.symbols.get(name) {
            return Ok(*symbol);
        }
        if self.unsupported_symbols.iter().any(|s| s == name) {
            return Err(SimError::UnsupportedInstruction {
                line: raw.line,
                instruction: format!(
                    "{} (module-scope .global/.const variable `{name}`)",
                    raw.opcode
                ),
            });
        }
        if name.starts_with('%') {
            return Err(SimError::UnsupportedInstruction {
                line: raw.line,
                instruction: format!(
                    "{} (register `{name}` undeclared or an unsupported special register)",
                    raw.opcode
                ),
            });
        }
        Err(parse_err(raw, format!("unknown name `{name}`")))
    }

    /// A source operand of type `ty`.
    fn src(&mut self, raw: &RawInstr, operand: &Operand, ty: Ty) -> SimResult<Slot> {
        match operand {
            Operand::Name(name) => match self.symbol(raw, name)? {
                Symbol::Register(slot) => Ok(slot),
                // A symbol used as a value (`mov.u64 %rd, smem`) is its address in its own state space.
                Symbol::Address(value) => Ok(self.constant(value)),
            },
            Operand::Imm(literal) => Ok(self.constant(literal_bits(literal, ty))),
            other => Err(parse_err(
                raw,
                format!("expected a register or an immediate, found {other:?}"),
            )),
        }
    }

    /// A destination register (`_` is a sink).
    fn dst(&mut self, raw: &RawInstr, operand: &Operand) -> SimResult<Slot> {
        match operand {
            Operand::Name(name) if name == "_" => Ok(self.sink),
            Operand::Name(name) => match self.symbol(raw, name)? {
                Symbol::Register(slot) if slot >= SPECIAL_REGISTERS.len() as Slot => Ok(slot),
                _ => Err(parse_err(raw, format!("`{name}` cannot be written"))),
            },
            other => Err(parse_err(
                raw,
                format!("expected a destination register, found {other:?}"),
            )),
        }
    }

    fn addr(&mut self, raw: &RawInstr, operand: &Operand) -> SimResult<Addr> {
        let Operand::Address { base, offset } = operand else {
            return Err(parse_err(
                raw,
                format!("expected an address, found {operand:?}"),
            ));
        };
        let base = match base {
            None => self.constant(0),
            Some(name) => match self.symbol(raw, name)? {
                Symbol::Register(slot) => slot,
                Symbol::Address(value) => self.constant(value),
            },
        };
        Ok(Addr {
            base,
            offset: *offset,
        })
    }

    fn operands<'r>(&self, raw: &'r RawInstr, n: usize) -> SimResult<&'r [Operand]> {
        if raw.operands.len() == n {
            Ok(&raw.operands)
        } else {
            Err(parse_err(
                raw,
                format!("expected {n} operands, found {}", raw.operands.len()),
            ))
        }
    }

    fn instruction(&mut self, raw: &RawInstr) -> SimResult<Instr> {
        let (guard, guard_negated) = match &raw.guard {
            None => (NONE, false),
            Some((name, negated)) => match self.symbol(raw, name)? {
                Symbol::Register(slot) => (slot, *negated),
                Symbol::Address(..) => {
                    return Err(parse_err(raw, format!("guard `{name}` is not a predicate")))
                }
            },
        };
        let op = specialize(self.op(raw)?);
        Ok(Instr {
            op,
            guard,
            guard_negated,
            line: raw.line,
        })
    }

    fn op(&mut self, raw: &RawInstr) -> SimResult<Op> {
        let parts: Vec<&str> = raw.opcode.split('.').collect();
        let (base, mods) = (parts[0], &parts[1..]);
        let ty = mods.iter().rev().find_map(|m| Ty::parse(m));
        let need_ty = || ty.ok_or_else(|| unsupported(raw));
        let o = &raw.operands;
        Ok(match base {
            "mov" => {
                let ty = need_ty()?;
                let [d, a] = self.operands(raw, 2)? else {
                    unreachable!()
                };
                match (d, a) {
                    (Operand::Vector(ds), _) => {
                        let a = self.src(raw, a, ty)?;
                        let (d, n) = self.slots4(raw, ds, true, ty)?;
                        Op::Unpack {
                            d,
                            n,
                            part_bits: (ty.bits() / u32::from(n)) as u8,
                            a,
                        }
                    }
                    (_, Operand::Vector(parts)) => {
                        let d = self.dst(raw, d)?;
                        let (parts, n) = self.slots4(raw, parts, false, ty)?;
                        Op::Pack {
                            d,
                            parts,
                            n,
                            part_bits: (ty.bits() / u32::from(n)) as u8,
                        }
                    }
                    _ => Op::Mov {
                        d: self.dst(raw, d)?,
                        a: self.src(raw, a, ty)?,
                        mask: ty.mask(),
                    },
                }
            }
            "add" | "sub" | "mul" | "div" | "rem" | "min" | "max" | "and" | "or" | "xor"
            | "shl" | "shr" | "copysign" => {
                let ty = need_ty()?;
                let [d, a, b] = self.operands(raw, 3)? else {
                    unreachable!()
                };
                if ty.is_float() {
                    if !matches!(ty, Ty::F32 | Ty::F64) || mods.contains(&"f16x2") {
                        return Err(unsupported(raw));
                    }
                    let op = match base {
                        "add" => FloatOp::Add,
                        "sub" => FloatOp::Sub,
                        "mul" => FloatOp::Mul,
                        "div" => FloatOp::Div,
                        "min" => FloatOp::Min,
                        "max" => FloatOp::Max,
                        "copysign" => FloatOp::CopySign,
                        _ => return Err(unsupported(raw)),
                    };
                    if mods.contains(&"NaN") || mods.contains(&"xorsign") || mods.contains(&"abs") {
                        return Err(unsupported(raw));
                    }
                    let mods = float_mods(mods);
                    if ty == Ty::F64 && directed(mods.rnd) {
                        return Err(unsupported(raw));
                    }
                    let (d, a, b) = (
                        self.dst(raw, d)?,
                        self.src(raw, a, ty)?,
                        self.src(raw, b, ty)?,
                    );
                    Op::Float {
                        op,
                        ty,
                        mods,
                        d,
                        a,
                        b,
                    }
                } else {
                    if mods.contains(&"sat") || mods.contains(&"cc") {
                        return Err(unsupported(raw));
                    }
                    let op = match base {
                        "add" => IntOp::Add,
                        "sub" => IntOp::Sub,
                        "mul" if mods.contains(&"hi") => IntOp::MulHi,
                        "mul" if mods.contains(&"wide") => IntOp::MulWide,
                        "mul" => IntOp::MulLo,
                        "div" => IntOp::Div,
                        "rem" => IntOp::Rem,
                        "min" => IntOp::Min,
                        "max" => IntOp::Max,
                        "and" => IntOp::And,
                        "or" => IntOp::Or,
                        "xor" => IntOp::Xor,
                        "shl" => IntOp::Shl,
                        "shr" => IntOp::Shr,
                        _ => return Err(unsupported(raw)),
                    };
                    let b_ty = if matches!(op, IntOp::Shl | IntOp::Shr) {
                        Ty::U32
                    } else {
                        ty
                    };
                    let (d, a, b) = (
                        self.dst(raw, d)?,
                        self.src(raw, a, ty)?,
                        self.src(raw, b, b_ty)?,
                    );
                    Op::Int { op, ty, d, a, b }
                }
            }
            "mad" | "fma" => {
                let ty = need_ty()?;
                let [d, a, b, c] = self.operands(raw, 4)? else {
                    unreachable!()
                };
                if ty.is_float() {
                    if !matches!(ty, Ty::F32 | Ty::F64) {
                        return Err(unsupported(raw));
                    }
                    let mods = float_mods(mods);
                    if ty == Ty::F64 && directed(mods.rnd) {
                        return Err(unsupported(raw));
                    }
                    let (d, a, b, c) = (
                        self.dst(raw, d)?,
                        self.src(raw, a, ty)?,
                        self.src(raw, b, ty)?,
                        self.src(raw, c, ty)?,
                    );
                    Op::Fma {
                        ty,
                        mods,
                        d,
                        a,
                        b,
                        c,
                    }
                } else {
                    if base == "fma" || mods.contains(&"sat") || mods.contains(&"cc") {
                        return Err(unsupported(raw));
                    }
                    let op = if mods.contains(&"hi") {
                        IntOp::MulHi
                    } else if mods.contains(&"wide") {
                        IntOp::MulWide
                    } else {
                        IntOp::MulLo
                    };
                    let c_ty = if op == IntOp::MulWide { wide(ty) } else { ty };
                    let (d, a, b, c) = (
                        self.dst(raw, d)?,
                        self.src(raw, a, ty)?,
                        self.src(raw, b, ty)?,
                        self.src(raw, c, c_ty)?,
                    );
                    Op::Mad { op, ty, d, a, b, c }
                }
            }
            "neg" | "abs" | "not" | "popc" | "clz" | "brev" | "cnot" => {
                let ty = need_ty()?;
                let [d, a] = self.operands(raw, 2)? else {
                    unreachable!()
                };
                let (d, a) = (self.dst(raw, d)?, self.src(raw, a, ty)?);
                if ty.is_float() {
                    let op = match base {
                        "neg" => FloatUnOp::Neg,
                        "abs" => FloatUnOp::Abs,
                        _ => return Err(unsupported(raw)),
                    };
                    if !matches!(ty, Ty::F32 | Ty::F64) {
                        return Err(unsupported(raw));
                    }
                    Op::FloatUnary {
                        op,
                        ty,
                        mods: float_mods(mods),
                        d,
                        a,
                    }
                } else {
                    let op = match base {
                        "neg" => IntUnOp::Neg,
                        "abs" => IntUnOp::Abs,
                        "not" => IntUnOp::Not,
                        "popc" => IntUnOp::Popc,
                        "clz" => IntUnOp::Clz,
                        "brev" => IntUnOp::Brev,
                        _ => IntUnOp::Cnot,
                    };
                    Op::IntUnary { op, ty, d, a }
                }
            }
            "sqrt" | "rsqrt" | "rcp" | "ex2" | "lg2" | "sin" | "cos" | "tanh" => {
                let ty = need_ty()?;
                if !matches!(ty, Ty::F32 | Ty::F64) || mods.iter().any(|m| m.ends_with("x2")) {
                    return Err(unsupported(raw));
                }
                let op = match base {
                    "sqrt" => FloatUnOp::Sqrt,
                    "rsqrt" => FloatUnOp::Rsqrt,
                    "rcp" => FloatUnOp::Rcp,
                    "ex2" => FloatUnOp::Ex2,
                    "lg2" => FloatUnOp::Lg2,
                    "sin" => FloatUnOp::Sin,
                    "cos" => FloatUnOp::Cos,
                    _ => FloatUnOp::Tanh,
                };
                let mods = float_mods(mods);
                if directed(mods.rnd) {
                    return Err(unsupported(raw));
                }
                let [d, a] = self.operands(raw, 2)? else {
                    unreachable!()
                };
                let (d, a) = (self.dst(raw, d)?, self.src(raw, a, ty)?);
                Op::FloatUnary { op, ty, mods, d, a }
            }
            "setp" => self.setp(raw, mods, need_ty()?)?,
            "selp" => {
                let ty = need_ty()?;
                let [d, a, b, p] = self.operands(raw, 4)? else {
                    unreachable!()
                };
                let (d, a, b, p) = (
                    self.dst(raw, d)?,
                    self.src(raw, a, ty)?,
                    self.src(raw, b, ty)?,
                    self.src(raw, p, Ty::Pred)?,
                );
                Op::Selp {
                    d,
                    a,
                    b,
                    p,
                    mask: ty.mask(),
                }
            }
            "cvt" => {
                let types: Vec<Ty> = mods.iter().filter_map(|m| Ty::parse(m)).collect();
                let [dst_ty, src_ty] = types[..] else {
                    return Err(unsupported(raw));
                };
                if mods
                    .iter()
                    .any(|m| m.ends_with("x2") || *m == "relu" || *m == "satfinite")
                {
                    return Err(unsupported(raw));
                }
                let [d, a] = self.operands(raw, 2)? else {
                    unreachable!()
                };
                let (d, a) = (self.dst(raw, d)?, self.src(raw, a, src_ty)?);
                let int_rounding = mods
                    .iter()
                    .any(|m| matches!(*m, "rni" | "rzi" | "rmi" | "rpi"));
                // Directed rounding into a half type or from a 64-bit integer is not simulated exactly.
                let rnd = rounding(mods);
                let wide_int = matches!(src_ty, Ty::U64 | Ty::S64) && dst_ty.is_float();
                if !int_rounding
                    && directed(rnd)
                    && (matches!(dst_ty, Ty::F16 | Ty::Bf16) || wide_int && dst_ty == Ty::F64)
                {
                    return Err(unsupported(raw));
                }
                Op::Cvt {
                    dst: dst_ty,
                    src: src_ty,
                    rnd: rounding(mods),
                    int_rounding,
                    sat: mods.contains(&"sat"),
                    ftz: mods.contains(&"ftz"),
                    d,
                    a,
                }
            }
            "ld" | "ldu" | "st" => self.load_store(raw, base == "st", mods, need_ty()?)?,
            "cvta" => {
                let ty = need_ty()?;
                let space = match space_of(mods) {
                    Some(s @ (Space::Global | Space::Shared | Space::Local | Space::Param)) => s,
                    _ => return Err(unsupported(raw)),
                };
                let [d, a] = self.operands(raw, 2)? else {
                    unreachable!()
                };
                let (d, a) = (self.dst(raw, d)?, self.src(raw, a, ty)?);
                Op::Cvta {
                    space,
                    to_generic: !mods.contains(&"to"),
                    d,
                    a,
                    mask: ty.mask(),
                }
            }
            "bra" => {
                let [Operand::Name(label)] = self.operands(raw, 1)? else {
                    return Err(parse_err(raw, "expected a label"));
                };
                let target = *self
                    .labels
                    .get(label)
                    .ok_or_else(|| parse_err(raw, format!("unknown label `{label}`")))?;
                Op::Bra { target }
            }
            "ret" | "exit" => Op::Exit,
            "bar" | "barrier" if mods.contains(&"warp") => Op::Nop,
            "bar" | "barrier"
                if mods
                    .first()
                    .is_none_or(|m| *m == "sync" || *m == "cta" || *m == "aligned") =>
            {
                if mods.iter().any(|m| matches!(*m, "arrive" | "red")) {
                    return Err(unsupported(raw));
                }
                let id = match o.first() {
                    Some(op) => self.src(raw, op, Ty::U32)?,
                    None => self.constant(0),
                };
                let count = match o.get(1) {
                    Some(op) => self.src(raw, op, Ty::U32)?,
                    None => NONE,
                };
                Op::Bar { id, count }
            }
            "membar" | "fence" => Op::Nop,
            "shfl" => {
                let mode = match mods {
                    ["sync", "up", "b32"] => ShuffleMode::Up,
                    ["sync", "down", "b32"] => ShuffleMode::Down,
                    ["sync", "bfly", "b32"] => ShuffleMode::Bfly,
                    ["sync", "idx", "b32"] => ShuffleMode::Idx,
                    _ => return Err(unsupported(raw)),
                };
                let [d, a, b, c, mask] = self.operands(raw, 5)? else {
                    unreachable!()
                };
                let (d, p) = match d {
                    Operand::Pair(d, p) => (
                        self.dst(raw, &Operand::Name(d.clone()))?,
                        self.dst(raw, &Operand::Name(p.clone()))?,
                    ),
                    d => (self.dst(raw, d)?, NONE),
                };
                let (a, b, c, mask) = (
                    self.src(raw, a, Ty::B32)?,
                    self.src(raw, b, Ty::B32)?,
                    self.src(raw, c, Ty::B32)?,
                    self.src(raw, mask, Ty::B32)?,
                );
                Op::Shfl {
                    mode,
                    d,
                    p,
                    a,
                    b,
                    c,
                    mask,
                }
            }
            "prmt" => {
                if mods != ["b32"] {
                    return Err(unsupported(raw));
                }
                let [d, a, b, c] = self.operands(raw, 4)? else {
                    unreachable!()
                };
                let (d, a, b, c) = (
                    self.dst(raw, d)?,
                    self.src(raw, a, Ty::B32)?,
                    self.src(raw, b, Ty::B32)?,
                    self.src(raw, c, Ty::B32)?,
                );
                Op::Prmt { d, a, b, c }
            }
            "lop3" => {
                let [d, a, b, c, Operand::Imm(Literal::Int(lut))] = self.operands(raw, 5)? else {
                    return Err(parse_err(raw, "expected `d, a, b, c, lut`"));
                };
                let lut = *lut as u8;
                let (d, a, b, c) = (
                    self.dst(raw, d)?,
                    self.src(raw, a, Ty::B32)?,
                    self.src(raw, b, Ty::B32)?,
                    self.src(raw, c, Ty::B32)?,
                );
                Op::Lop3 { d, a, b, c, lut }
            }
            "bfe" => {
                let ty = need_ty()?;
                let [d, a, b, c] = self.operands(raw, 4)? else {
                    unreachable!()
                };
                let (d, a, b, c) = (
                    self.dst(raw, d)?,
                    self.src(raw, a, ty)?,
                    self.src(raw, b, Ty::U32)?,
                    self.src(raw, c, Ty::U32)?,
                );
                Op::Bfe { ty, d, a, b, c }
            }
            "bfi" => {
                let ty = need_ty()?;
                let [d, a, b, pos, len] = self.operands(raw, 5)? else {
                    unreachable!()
                };
                let (d, a, b, pos, len) = (
                    self.dst(raw, d)?,
                    self.src(raw, a, ty)?,
                    self.src(raw, b, ty)?,
                    self.src(raw, pos, Ty::U32)?,
                    self.src(raw, len, Ty::U32)?,
                );
                Op::Bfi {
                    ty,
                    d,
                    a,
                    b,
                    pos,
                    len,
                }
            }
            "atom" | "red" => self.atom(raw, base == "red", mods, need_ty()?)?,
            "testp" => {
                let ty = need_ty()?;
                let kind = match mods.first().copied() {
                    Some("finite") => TestKind::Finite,
                    Some("infinite") => TestKind::Infinite,
                    Some("number") => TestKind::Number,
                    Some("notanumber") => TestKind::NotANumber,
                    Some("normal") => TestKind::Normal,
                    Some("subnormal") => TestKind::Subnormal,
                    _ => return Err(unsupported(raw)),
                };
                let [d, a] = self.operands(raw, 2)? else {
                    unreachable!()
                };
                let (d, a) = (self.dst(raw, d)?, self.src(raw, a, ty)?);
                Op::Testp { kind, ty, d, a }
            }
            _ => return Err(unsupported(raw)),
        })
    }

    /// Up to four register slots of a vector operand (`{%f1, %f2}`); `_` elements write to the sink.
    fn slots4(
        &mut self,
        raw: &RawInstr,
        items: &[Operand],
        dst: bool,
        ty: Ty,
    ) -> SimResult<([Slot; 4], u8)> {
        if items.is_empty() || items.len() > 4 {
            return Err(parse_err(raw, "a vector operand has 1 to 4 elements"));
        }
        let mut slots = [NONE; 4];
        for (slot, item) in slots.iter_mut().zip(items) {
            *slot = if dst {
                self.dst(raw, item)?
            } else {
                self.src(raw, item, ty)?
            };
        }
        Ok((slots, items.len() as u8))
    }

    fn setp(&mut self, raw: &RawInstr, mods: &[&str], ty: Ty) -> SimResult<Op> {
        let cmp = match mods.first().copied() {
            Some("eq") => Cmp::Eq,
            Some("ne") => Cmp::Ne,
            Some("lt" | "lo") => Cmp::Lt,
            Some("le" | "ls") => Cmp::Le,
            Some("gt" | "hi") => Cmp::Gt,
            Some("ge" | "hs") => Cmp::Ge,
            Some("equ") => Cmp::Equ,
            Some("neu") => Cmp::Neu,
            Some("ltu") => Cmp::Ltu,
            Some("leu") => Cmp::Leu,
            Some("gtu") => Cmp::Gtu,
            Some("geu") => Cmp::Geu,
            Some("num") => Cmp::Num,
            Some("nan") => Cmp::Nan,
            _ => return Err(unsupported(raw)),
        };
        let bool_op = match mods.get(1).copied() {
            Some("and") => Some(BoolOp::And),
            Some("or") => Some(BoolOp::Or),
            Some("xor") => Some(BoolOp::Xor),
            _ => None,
        };
        if matches!(ty, Ty::F16 | Ty::Bf16) || mods.iter().any(|m| m.ends_with("x2")) {
            return Err(unsupported(raw));
        }
        let n = if bool_op.is_some() { 4 } else { 3 };
        let operands = self.operands(raw, n)?;
        let (d, d_not) = match &operands[0] {
            Operand::Pair(d, q) => (
                self.dst(raw, &Operand::Name(d.clone()))?,
                self.dst(raw, &Operand::Name(q.clone()))?,
            ),
            d => (self.dst(raw, d)?, NONE),
        };
        let (a, b) = (
            self.src(raw, &operands[1], ty)?,
            self.src(raw, &operands[2], ty)?,
        );
        let combine = match bool_op {
            None => None,
            Some(op) => Some(match &operands[3] {
                Operand::Not(name) => (
                    op,
                    self.src(raw, &Operand::Name(name.clone()), Ty::Pred)?,
                    true,
                ),
                c => (op, self.src(raw, c, Ty::Pred)?, false),
            }),
        };
        Ok(Op::Setp {
            cmp,
            ty,
            ftz: mods.contains(&"ftz"),
            d,
            d_not,
            a,
            b,
            combine,
        })
    }

    fn load_store(&mut self, raw: &RawInstr, store: bool, mods: &[&str], ty: Ty) -> SimResult<Op> {
        for m in mods {
            let known = matches!(
                *m,
                "global"
                    | "shared"
                    | "local"
                    | "param"
                    | "nc"
                    | "ca"
                    | "cg"
                    | "cs"
                    | "lu"
                    | "cv"
                    | "wb"
                    | "wt"
                    | "v2"
                    | "v4"
                    | "volatile"
                    | "relaxed"
                    | "weak"
                    | "cta"
                    | "gpu"
                    | "sys"
            ) || m.starts_with("L1::")
                || m.starts_with("L2::")
                || Ty::parse(m).is_some();
            if !known {
                return Err(unsupported(raw));
            }
        }
        let space = space_of(mods).unwrap_or(Space::Generic);
        if store && space == Space::Param {
            return Err(unsupported(raw));
        }
        let n: u8 = if mods.contains(&"v4") {
            4
        } else if mods.contains(&"v2") {
            2
        } else {
            1
        };
        let [first, second] = self.operands(raw, 2)? else {
            unreachable!()
        };
        let (value, address) = if store {
            (second, first)
        } else {
            (first, second)
        };
        let addr = self.addr(raw, address)?;
        let slots = match value {
            Operand::Vector(items) if items.len() == usize::from(n) => {
                self.slots4(raw, items, !store, ty)?.0
            }
            Operand::Vector(_) => return Err(parse_err(raw, "vector operand of the wrong length")),
            v if n == 1 => {
                let slot = if store {
                    self.src(raw, v, ty)?
                } else {
                    self.dst(raw, v)?
                };
                [slot, NONE, NONE, NONE]
            }
            _ => return Err(parse_err(raw, "a vector access needs a vector operand")),
        };
        Ok(if store {
            Op::St {
                space,
                ty,
                s: slots,
                n,
                addr,
            }
        } else {
            Op::Ld {
                space,
                ty,
                d: slots,
                n,
                addr,
            }
        })
    }

    fn atom(&mut self, raw: &RawInstr, reduction: bool, mods: &[&str], ty: Ty) -> SimResult<Op> {
        let space = space_of(mods).unwrap_or(Space::Generic);
        let op = mods
            .iter()
            .find_map(|m| {
                Some(match *m {
                    "add" => AtomOp::Add,
                    "min" => AtomOp::Min,
                    "max" => AtomOp::Max,
                    "exch" => AtomOp::Exch,
                    "cas" => AtomOp::Cas,
                    "and" => AtomOp::And,
                    "or" => AtomOp::Or,
                    "xor" => AtomOp::Xor,
                    "inc" => AtomOp::Inc,
                    "dec" => AtomOp::Dec,
                    _ => return None,
                })
            })
            .ok_or_else(|| unsupported(raw))?;
        if matches!(ty, Ty::F16 | Ty::Bf16)
            || mods.iter().any(|m| m.starts_with('v') && m.len() == 2)
        {
            return Err(unsupported(raw));
        }
        let o = &raw.operands;
        let (d, rest) = if reduction {
            (self.sink, &o[..])
        } else {
            let Some(d) = o.first() else {
                return Err(parse_err(raw, "missing operands"));
            };
            (self.dst(raw, d)?, &o[1..])
        };
        let expected = if op == AtomOp::Cas { 3 } else { 2 };
        if rest.len() != expected {
            return Err(parse_err(
                raw,
                format!("expected {} operands", expected + usize::from(!reduction)),
            ));
        }
        let addr = self.addr(raw, &rest[0])?;
        let b = self.src(raw, &rest[1], ty)?;
        let c = if op == AtomOp::Cas {
            self.src(raw, &rest[2], ty)?
        } else {
            NONE
        };
        Ok(Op::Atom {
            space,
            op,
            ty,
            d,
            addr,
            b,
            c,
        })
    }
}

fn space_of(mods: &[&str]) -> Option<Space> {
    mods.iter().find_map(|m| match *m {
        "global" => Some(Space::Global),
        "shared" => Some(Space::Shared),
        "local" => Some(Space::Local),
        "param" => Some(Space::Param),
        _ => None,
    })
}

/// The type twice as wide (for `mul.wide`/`mad.wide`).
pub(crate) fn wide(ty: Ty) -> Ty {
    match ty {
        Ty::U16 => Ty::U32,
        Ty::S16 => Ty::S32,
        Ty::U32 => Ty::U64,
        Ty::S32 => Ty::S64,
        other => other,
    }
}
