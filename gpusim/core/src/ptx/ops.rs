//! The decoded instruction set: what the interpreter executes. Every operand is a register-file slot (immediates
//! and special registers are preloaded slots), so execution does no string work and no operand decoding.

/// Index into a thread's register file.
pub(crate) type Slot = u32;
/// "No operand" (e.g. `setp` without its second destination).
pub(crate) const NONE: Slot = u32::MAX;

/// Slots preloaded per thread, in this order, before the constants and the registers.
pub(crate) const SPECIAL_REGISTERS: [&str; 16] = [
    "%tid.x",
    "%tid.y",
    "%tid.z",
    "%ntid.x",
    "%ntid.y",
    "%ntid.z",
    "%ctaid.x",
    "%ctaid.y",
    "%ctaid.z",
    "%nctaid.x",
    "%nctaid.y",
    "%nctaid.z",
    "%laneid",
    "%warpid",
    "%nwarpid",
    "%warpsize",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    U8,
    U16,
    U32,
    U64,
    S8,
    S16,
    S32,
    S64,
    B8,
    B16,
    B32,
    B64,
    F16,
    Bf16,
    F32,
    F64,
    Pred,
}

impl Ty {
    pub fn parse(name: &str) -> Option<Ty> {
        Some(match name {
            "u8" => Ty::U8,
            "u16" => Ty::U16,
            "u32" => Ty::U32,
            "u64" => Ty::U64,
            "s8" => Ty::S8,
            "s16" => Ty::S16,
            "s32" => Ty::S32,
            "s64" => Ty::S64,
            "b8" => Ty::B8,
            "b16" => Ty::B16,
            "b32" => Ty::B32,
            "b64" => Ty::B64,
            "f16" => Ty::F16,
            "bf16" => Ty::Bf16,
            "f32" => Ty::F32,
            "f64" => Ty::F64,
            "pred" => Ty::Pred,
            _ => return None,
        })
    }

    pub fn bytes(self) -> u32 {
        match self {
            Ty::U8 | Ty::S8 | Ty::B8 | Ty::Pred => 1,
            Ty::U16 | Ty::S16 | Ty::B16 | Ty::F16 | Ty::Bf16 => 2,
            Ty::U32 | Ty::S32 | Ty::B32 | Ty::F32 => 4,
            Ty::U64 | Ty::S64 | Ty::B64 | Ty::F64 => 8,
        }
    }

    pub fn bits(self) -> u32 {
        if self == Ty::Pred {
            1
        } else {
            self.bytes() * 8
        }
    }

    pub fn is_signed(self) -> bool {
        matches!(self, Ty::S8 | Ty::S16 | Ty::S32 | Ty::S64)
    }

    pub fn is_float(self) -> bool {
        matches!(self, Ty::F16 | Ty::Bf16 | Ty::F32 | Ty::F64)
    }

    /// Mask of the low `bits()` bits.
    pub fn mask(self) -> u64 {
        match self.bits() {
            64 => u64::MAX,
            b => (1u64 << b) - 1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    Global,
    Shared,
    Local,
    Param,
    /// A generic address: shared and local windows, else global.
    Generic,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Addr {
    pub base: Slot,
    pub offset: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IntOp {
    Add,
    Sub,
    MulLo,
    MulHi,
    MulWide,
    Div,
    Rem,
    Min,
    Max,
    And,
    Or,
    Xor,
    Shl,
    Shr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IntUnOp {
    Not,
    Neg,
    Abs,
    Popc,
    Clz,
    Brev,
    Cnot,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FloatOp {
    Add,
    Sub,
    Mul,
    Div,
    Min,
    Max,
    CopySign,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FloatUnOp {
    Neg,
    Abs,
    Sqrt,
    Rsqrt,
    Rcp,
    Ex2,
    Lg2,
    Sin,
    Cos,
    Tanh,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rounding {
    /// No rounding modifier (`.approx`, or an exact operation).
    Default,
    Rn,
    Rz,
    Rm,
    Rp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    Equ,
    Neu,
    Ltu,
    Leu,
    Gtu,
    Geu,
    Num,
    Nan,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BoolOp {
    And,
    Or,
    Xor,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ShuffleMode {
    Up,
    Down,
    Bfly,
    Idx,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtomOp {
    Add,
    Min,
    Max,
    Exch,
    Cas,
    And,
    Or,
    Xor,
    Inc,
    Dec,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TestKind {
    Finite,
    Infinite,
    Number,
    NotANumber,
    Normal,
    Subnormal,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct FloatMods {
    pub rnd: Rounding,
    pub ftz: bool,
    pub sat: bool,
}

#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// Copies the bits masked to `mask`.
    Mov {
        d: Slot,
        a: Slot,
        mask: u64,
    },
    Int {
        op: IntOp,
        ty: Ty,
        d: Slot,
        a: Slot,
        b: Slot,
    },
    IntUnary {
        op: IntUnOp,
        ty: Ty,
        d: Slot,
        a: Slot,
    },
    /// `mad.lo`/`mad.hi`/`mad.wide`: `mul` with `op` then add `c`.
    Mad {
        op: IntOp,
        ty: Ty,
        d: Slot,
        a: Slot,
        b: Slot,
        c: Slot,
    },
    Float {
        op: FloatOp,
        ty: Ty,
        mods: FloatMods,
        d: Slot,
        a: Slot,
        b: Slot,
    },
    FloatUnary {
        op: FloatUnOp,
        ty: Ty,
        mods: FloatMods,
        d: Slot,
        a: Slot,
    },
    Fma {
        ty: Ty,
        mods: FloatMods,
        d: Slot,
        a: Slot,
        b: Slot,
        c: Slot,
    },
    Setp {
        cmp: Cmp,
        ty: Ty,
        ftz: bool,
        d: Slot,
        d_not: Slot,
        a: Slot,
        b: Slot,
        combine: Option<(BoolOp, Slot, bool)>,
    },
    Selp {
        d: Slot,
        a: Slot,
        b: Slot,
        p: Slot,
        mask: u64,
    },
    Cvt {
        dst: Ty,
        src: Ty,
        rnd: Rounding,
        int_rounding: bool,
        sat: bool,
        ftz: bool,
        d: Slot,
        a: Slot,
    },
    Ld {
        space: Space,
        ty: Ty,
        d: [Slot; 4],
        n: u8,
        addr: Addr,
    },
    St {
        space: Space,
        ty: Ty,
        s: [Slot; 4],
        n: u8,
        addr: Addr,
    },
    /// `cvta.shared` (`to_generic`) or `cvta.to.shared` (`!to_generic`); `.global` is the identity.
    Cvta {
        space: Space,
        to_generic: bool,
        d: Slot,
        a: Slot,
        mask: u64,
    },
    Bra {
        target: u32,
    },
    Exit,
    Bar {
        id: Slot,
        count: Slot,
    },
    /// Ordering-only instructions (`membar`, `fence`, `bar.warp.sync`): a thread runs in program order here.
    Nop,
    Shfl {
        mode: ShuffleMode,
        d: Slot,
        p: Slot,
        a: Slot,
        b: Slot,
        c: Slot,
        mask: Slot,
    },
    /// `mov.b32 %r, {%rs1, %rs2}`: the parts, low first.
    Pack {
        d: Slot,
        parts: [Slot; 4],
        n: u8,
        part_bits: u8,
    },
    Unpack {
        d: [Slot; 4],
        n: u8,
        part_bits: u8,
        a: Slot,
    },
    Prmt {
        d: Slot,
        a: Slot,
        b: Slot,
        c: Slot,
    },
    Lop3 {
        d: Slot,
        a: Slot,
        b: Slot,
        c: Slot,
        lut: u8,
    },
    Bfe {
        ty: Ty,
        d: Slot,
        a: Slot,
        b: Slot,
        c: Slot,
    },
    /// `bfi d, a, b, pos, len`: `b` with `len` bits at `pos` taken from `a`.
    Bfi {
        ty: Ty,
        d: Slot,
        a: Slot,
        b: Slot,
        pos: Slot,
        len: Slot,
    },
    Atom {
        space: Space,
        op: AtomOp,
        ty: Ty,
        d: Slot,
        addr: Addr,
        b: Slot,
        c: Slot,
    },
    /// `fma.rn.f32`, `add.f32`, `mul.f32` without modifiers (see [`specialize`]).
    FmaF32 {
        d: Slot,
        a: Slot,
        b: Slot,
        c: Slot,
    },
    AddF32 {
        d: Slot,
        a: Slot,
        b: Slot,
    },
    MulF32 {
        d: Slot,
        a: Slot,
        b: Slot,
    },
    /// `ld.shared` of one 4-byte value.
    LdShared32 {
        d: Slot,
        addr: Addr,
    },
    Testp {
        kind: TestKind,
        ty: Ty,
        d: Slot,
        a: Slot,
    },
}

impl FloatMods {
    /// Round to nearest, no flushing, no saturation: what plain C float arithmetic compiles to.
    pub fn is_plain(self) -> bool {
        matches!(self.rnd, Rounding::Default | Rounding::Rn) && !self.ftz && !self.sat
    }
}

/// Plain f32 arithmetic and 4-byte shared loads (the bulk of fuse's kernels) get operations of their own, so the
/// interpreter runs them without looking at modifiers.
pub(crate) fn specialize(op: Op) -> Op {
    match op {
        Op::Fma {
            ty: Ty::F32,
            mods,
            d,
            a,
            b,
            c,
        } if mods.is_plain() => Op::FmaF32 { d, a, b, c },
        Op::Float {
            op: FloatOp::Add,
            ty: Ty::F32,
            mods,
            d,
            a,
            b,
        } if mods.is_plain() => Op::AddF32 { d, a, b },
        Op::Float {
            op: FloatOp::Mul,
            ty: Ty::F32,
            mods,
            d,
            a,
            b,
        } if mods.is_plain() => Op::MulF32 { d, a, b },
        Op::Ld {
            space: Space::Shared,
            ty,
            d,
            n: 1,
            addr,
        } if ty.bytes() == 4 => Op::LdShared32 { d: d[0], addr },
        other => other,
    }
}

/// One decoded instruction with its guard predicate and PTX line.
#[derive(Debug, Clone)]
pub(crate) struct Instr {
    pub op: Op,
    /// Guard predicate slot or [`NONE`].
    pub guard: Slot,
    pub guard_negated: bool,
    pub line: u32,
}
