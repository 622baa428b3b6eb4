//! Tokens → the raw statements of each `.entry` (names still as text). Debug directives (`.loc`, `.file`,
//! `.section`), `.pragma` and performance directives (`.maxntid`, `.reqntid`, ...) are read and dropped; every
//! instruction keeps its source line for the errors of a launch.

use super::lex::{Tok, Token};
use crate::error::{SimError, SimResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StateSpace {
    Shared,
    Local,
    Global,
    Const,
    Param,
}

/// A variable declaration (`.shared .align 4 .b8 name[4160];`).
#[derive(Debug, Clone)]
pub(crate) struct VarDecl {
    pub space: StateSpace,
    pub name: String,
    pub align: u32,
    /// Size of one element (`.b8` → 1, `.f32` → 4).
    pub element_bytes: u32,
    /// Number of elements; `None` for `name[]` (the dynamic `extern .shared` array).
    pub count: Option<u32>,
    pub line: u32,
}

impl VarDecl {
    pub fn bytes(&self) -> u32 {
        self.element_bytes * self.count.unwrap_or(0)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Literal {
    /// An integer, sign already applied (two's complement).
    Int(u64),
    /// `0fXXXXXXXX`: the bits of an f32.
    F32(u32),
    /// `0dXXXXXXXXXXXXXXXX`: the bits of an f64.
    F64(u64),
    /// A decimal float such as `1.5`.
    Float(f64),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Operand {
    /// A register, special register, label or symbol.
    Name(String),
    /// `!%p1`.
    Not(String),
    /// `%r1|%p1`: the two destinations of `setp` and `shfl`.
    Pair(String, String),
    Imm(Literal),
    /// `{%f1, %f2}`.
    Vector(Vec<Operand>),
    /// `[base+offset]`; a base is a register or a symbol.
    Address {
        base: Option<String>,
        offset: i64,
    },
}

#[derive(Debug, Clone)]
pub(crate) struct RawInstr {
    /// `@%p1` → (`%p1`, false); `@!%p1` → (`%p1`, true).
    pub guard: Option<(String, bool)>,
    pub opcode: String,
    pub operands: Vec<Operand>,
    pub line: u32,
}

#[derive(Debug, Clone)]
pub(crate) enum Stmt {
    /// `.reg .f32 %f<12>;` → (".f32", [("%f", Some(12))]); `.reg .b64 %SP;` → [("%SP", None)].
    Reg {
        ty: String,
        names: Vec<(String, Option<u32>)>,
        line: u32,
    },
    Var(VarDecl),
    Label(String),
    Instr(RawInstr),
}

#[derive(Debug, Clone)]
pub(crate) struct RawParam {
    pub name: String,
    pub element_bytes: u32,
    pub align: u32,
    pub count: Option<u32>,
}

#[derive(Debug, Clone)]
pub(crate) struct RawEntry {
    pub name: String,
    pub params: Vec<RawParam>,
    pub body: Vec<Stmt>,
}

#[derive(Debug, Default)]
pub(crate) struct RawModule {
    pub entries: Vec<RawEntry>,
    /// Module-scope `.shared` variables: every kernel gets its own copy per block.
    pub shared: Vec<VarDecl>,
    /// Module-scope `.global`/`.const` variables: not simulated; a kernel that names one is an error.
    pub unsupported_symbols: Vec<String>,
}

struct Parser<'a> {
    tokens: &'a [Token],
    pos: usize,
}

pub(crate) fn parse(tokens: &[Token]) -> SimResult<RawModule> {
    let mut p = Parser { tokens, pos: 0 };
    let mut module = RawModule::default();
    while !p.at_end() {
        p.module_statement(&mut module)?;
    }
    Ok(module)
}

/// Bytes of a PTX fundamental type name such as `.f32` or `.b8`.
pub(crate) fn type_bytes(ty: &str) -> Option<u32> {
    Some(match ty {
        ".b8" | ".u8" | ".s8" | ".pred" => 1,
        ".b16" | ".u16" | ".s16" | ".f16" | ".bf16" => 2,
        ".b32" | ".u32" | ".s32" | ".f32" | ".f16x2" | ".bf16x2" => 4,
        ".b64" | ".u64" | ".s64" | ".f64" => 8,
        ".b128" => 16,
        _ => return None,
    })
}

impl Parser<'_> {
    fn at_end(&self) -> bool {
        self.pos >= self.tokens.len()
    }

    fn line(&self) -> u32 {
        self.tokens
            .get(self.pos)
            .or(self.tokens.last())
            .map_or(0, |t| t.line)
    }

    fn err<T>(&self, message: impl Into<String>) -> SimResult<T> {
        Err(SimError::Parse {
            line: self.line(),
            message: message.into(),
        })
    }

    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos).map(|t| &t.tok)
    }

    fn peek_at(&self, ahead: usize) -> Option<&Tok> {
        self.tokens.get(self.pos + ahead).map(|t| &t.tok)
    }

    fn next(&mut self) -> SimResult<Tok> {
        match self.tokens.get(self.pos) {
            Some(t) => {
                self.pos += 1;
                Ok(t.tok.clone())
            }
            None => self.err("unexpected end of the PTX text"),
        }
    }

    fn is_punct(&self, c: char) -> bool {
        self.peek() == Some(&Tok::Punct(c))
    }

    fn eat_punct(&mut self, c: char) -> bool {
        let found = self.is_punct(c);
        if found {
            self.pos += 1;
        }
        found
    }

    fn expect_punct(&mut self, c: char) -> SimResult<()> {
        if self.eat_punct(c) {
            Ok(())
        } else {
            self.err(format!("expected `{c}`, found {:?}", self.peek()))
        }
    }

    fn word(&mut self) -> SimResult<String> {
        match self.next()? {
            Tok::Word(w) => Ok(w),
            other => self.err(format!("expected a name, found {other:?}")),
        }
    }

    fn number(&mut self) -> SimResult<u64> {
        match self.next()? {
            Tok::Number(n) => parse_int(&n)
                .ok_or(())
                .or_else(|_| self.err(format!("bad number `{n}`"))),
            other => self.err(format!("expected a number, found {other:?}")),
        }
    }

    /// Skips the rest of the current source line (directives such as `.version 9.0` end at the line's end).
    fn skip_line(&mut self, line: u32) {
        while self.tokens.get(self.pos).is_some_and(|t| t.line == line) {
            self.pos += 1;
        }
    }

    fn skip_past(&mut self, c: char) -> SimResult<()> {
        while !self.eat_punct(c) {
            self.next()?;
        }
        Ok(())
    }

    /// Skips a `{ ... }` group, nested groups included.
    fn skip_braces(&mut self) -> SimResult<()> {
        self.expect_punct('{')?;
        let mut depth = 1;
        while depth > 0 {
            match self.next()? {
                Tok::Punct('{') => depth += 1,
                Tok::Punct('}') => depth -= 1,
                _ => {}
            }
        }
        Ok(())
    }

    fn module_statement(&mut self, module: &mut RawModule) -> SimResult<()> {
        let line = self.line();
        let word = self.word()?;
        match word.as_str() {
            ".version" | ".target" | ".address_size" | ".file" | ".loc" => self.skip_line(line),
            ".pragma" => self.skip_past(';')?,
            ".section" => {
                self.word()?;
                self.skip_braces()?;
            }
            ".visible" | ".weak" | ".extern" | ".common" if matches!(self.peek(), Some(Tok::Word(w)) if w == ".entry" || w == ".func") =>
                {}
            ".entry" => {
                let entry = self.entry()?;
                module.entries.push(entry);
            }
            ".func" => {
                // Device functions are only reached by `call`, which the decoder reports as unsupported.
                while !self.is_punct('{') && !self.is_punct(';') {
                    self.next()?;
                }
                if self.is_punct('{') {
                    self.skip_braces()?;
                } else {
                    self.pos += 1;
                }
            }
            ".visible" | ".weak" | ".extern" | ".common" | ".shared" | ".global" | ".const"
            | ".local" => {
                self.pos -= 1;
                let decl = self.var_decl()?;
                match decl.space {
                    StateSpace::Shared => module.shared.push(decl),
                    _ => module.unsupported_symbols.push(decl.name),
                }
            }
            _ => {
                return Err(SimError::Parse {
                    line,
                    message: format!("unexpected `{word}` at module scope"),
                })
            }
        }
        Ok(())
    }

    fn entry(&mut self) -> SimResult<RawEntry> {
        let name = self.word()?;
        let mut params = Vec::new();
        if self.eat_punct('(') {
            while !self.eat_punct(')') {
                if !params.is_empty() {
                    self.expect_punct(',')?;
                }
                params.push(self.param()?);
            }
        }
        // Performance directives up to the body.
        while !self.is_punct('{') {
            self.next()?;
        }
        self.expect_punct('{')?;
        let body = self.body()?;
        Ok(RawEntry { name, params, body })
    }

    fn param(&mut self) -> SimResult<RawParam> {
        let space = self.word()?;
        if space != ".param" {
            return self.err(format!("expected `.param`, found `{space}`"));
        }
        let mut align = None;
        let mut element_bytes = None;
        loop {
            let w = self.word()?;
            match w.as_str() {
                ".align" => align = Some(self.number()? as u32),
                ".ptr" | ".global" | ".shared" | ".const" | ".local" => {}
                _ if w.starts_with('.') => {
                    element_bytes = Some(
                        type_bytes(&w)
                            .ok_or(())
                            .or_else(|_| self.err(format!("unknown type `{w}`")))?,
                    )
                }
                _ => {
                    let element_bytes = element_bytes
                        .ok_or(())
                        .or_else(|_| self.err("a .param without a type"))?;
                    let count = self.array_suffix()?;
                    let align = align.unwrap_or(element_bytes);
                    return Ok(RawParam {
                        name: w,
                        element_bytes,
                        align,
                        count: count.flatten(),
                    });
                }
            }
        }
    }

    /// `[N]` → Some(Some(N)); `[]` → Some(None); nothing → None.
    fn array_suffix(&mut self) -> SimResult<Option<Option<u32>>> {
        if !self.eat_punct('[') {
            return Ok(None);
        }
        if self.eat_punct(']') {
            return Ok(Some(None));
        }
        let n = self.number()? as u32;
        self.expect_punct(']')?;
        Ok(Some(Some(n)))
    }

    fn var_decl(&mut self) -> SimResult<VarDecl> {
        let line = self.line();
        let mut space = None;
        let mut align = None;
        let mut element_bytes = None;
        loop {
            let w = self.word()?;
            match w.as_str() {
                ".extern" | ".visible" | ".weak" | ".common" => {}
                ".shared" => space = Some(StateSpace::Shared),
                ".local" => space = Some(StateSpace::Local),
                ".global" => space = Some(StateSpace::Global),
                ".const" => space = Some(StateSpace::Const),
                ".param" => space = Some(StateSpace::Param),
                ".align" => align = Some(self.number()? as u32),
                ".v2" | ".v4" => return self.err("vector variables are not supported"),
                _ if w.starts_with('.') => {
                    element_bytes = Some(
                        type_bytes(&w)
                            .ok_or(())
                            .or_else(|_| self.err(format!("unknown type `{w}`")))?,
                    )
                }
                _ => {
                    let (Some(space), Some(element_bytes)) = (space, element_bytes) else {
                        return self.err(format!(
                            "declaration of `{w}` without a state space or type"
                        ));
                    };
                    let count = match self.array_suffix()? {
                        None => Some(1),
                        Some(n) => n,
                    };
                    // Initializers (`= {...}`) only occur on module-scope .global/.const, which are not simulated.
                    self.skip_past(';')?;
                    let align = align.unwrap_or(element_bytes);
                    return Ok(VarDecl {
                        space,
                        name: w,
                        align,
                        element_bytes,
                        count,
                        line,
                    });
                }
            }
        }
    }

    fn body(&mut self) -> SimResult<Vec<Stmt>> {
        let mut body = Vec::new();
        // Nested `{ }` scopes (inline asm) are flattened.
        let mut depth = 1;
        loop {
            let line = self.line();
            match self.peek().cloned() {
                None => return self.err("unterminated kernel body"),
                Some(Tok::Punct('{')) => {
                    self.pos += 1;
                    depth += 1;
                }
                Some(Tok::Punct('}')) => {
                    self.pos += 1;
                    depth -= 1;
                    if depth == 0 {
                        return Ok(body);
                    }
                }
                Some(Tok::Punct('@')) => {
                    self.pos += 1;
                    let negate = self.eat_punct('!');
                    let pred = self.word()?;
                    let mut instr = self.instruction()?;
                    instr.guard = Some((pred, negate));
                    body.push(Stmt::Instr(instr));
                }
                Some(Tok::Word(w)) => match w.as_str() {
                    ".loc" | ".file" => {
                        self.pos += 1;
                        self.skip_line(line);
                    }
                    ".pragma" | ".maxntid" | ".reqntid" | ".minnctapersm" | ".maxnreg" => {
                        self.skip_past(';')?;
                    }
                    ".reg" => {
                        self.pos += 1;
                        body.push(self.reg_decl(line)?);
                    }
                    ".shared" | ".local" | ".param" | ".extern" | ".global" | ".const" => {
                        body.push(Stmt::Var(self.var_decl()?));
                    }
                    _ if self.peek_at(1) == Some(&Tok::Punct(':')) => {
                        self.pos += 2;
                        body.push(Stmt::Label(w));
                    }
                    _ => body.push(Stmt::Instr(self.instruction()?)),
                },
                Some(other) => return self.err(format!("unexpected {other:?} in a kernel body")),
            }
        }
    }

    fn reg_decl(&mut self, line: u32) -> SimResult<Stmt> {
        let mut ty = self.word()?;
        if ty == ".v2" || ty == ".v4" {
            return self.err("vector registers are not supported");
        }
        if ty == ".align" {
            self.number()?;
            ty = self.word()?;
        }
        let mut names = Vec::new();
        loop {
            let name = self.word()?;
            let count = if self.eat_punct('<') {
                let n = self.number()? as u32;
                self.expect_punct('>')?;
                Some(n)
            } else {
                None
            };
            names.push((name, count));
            if self.eat_punct(';') {
                return Ok(Stmt::Reg { ty, names, line });
            }
            self.expect_punct(',')?;
        }
    }

    fn instruction(&mut self) -> SimResult<RawInstr> {
        let line = self.line();
        let opcode = self.word()?;
        let mut operands = Vec::new();
        if !self.eat_punct(';') {
            loop {
                operands.push(self.operand()?);
                if self.eat_punct(';') {
                    break;
                }
                self.expect_punct(',')?;
            }
        }
        Ok(RawInstr {
            guard: None,
            opcode,
            operands,
            line,
        })
    }

    fn operand(&mut self) -> SimResult<Operand> {
        match self.next()? {
            Tok::Punct('{') => self.vector('}'),
            Tok::Punct('(') => self.vector(')'),
            Tok::Punct('[') => {
                let mut base = None;
                let mut offset: i64 = 0;
                loop {
                    match self.next()? {
                        Tok::Word(w) if base.is_none() => base = Some(w),
                        Tok::Number(n) => offset = offset.wrapping_add(self.int(&n)? as i64),
                        Tok::Punct('+') => {}
                        Tok::Punct('-') => match self.next()? {
                            Tok::Number(n) => offset = offset.wrapping_sub(self.int(&n)? as i64),
                            other => return self.err(format!("bad address at {other:?}")),
                        },
                        Tok::Punct(']') => return Ok(Operand::Address { base, offset }),
                        other => return self.err(format!("bad address at {other:?}")),
                    }
                }
            }
            Tok::Punct('!') => Ok(Operand::Not(self.word()?)),
            Tok::Punct('-') => match self.next()? {
                Tok::Number(n) => Ok(Operand::Imm(negate(self.literal(&n)?))),
                other => self.err(format!("expected a number after `-`, found {other:?}")),
            },
            Tok::Number(n) => Ok(Operand::Imm(self.literal(&n)?)),
            Tok::Word(w) => {
                if self.eat_punct('|') {
                    Ok(Operand::Pair(w, self.word()?))
                } else {
                    Ok(Operand::Name(w))
                }
            }
            other => self.err(format!("unexpected operand {other:?}")),
        }
    }

    fn vector(&mut self, close: char) -> SimResult<Operand> {
        let mut items = Vec::new();
        while !self.eat_punct(close) {
            if !items.is_empty() {
                self.expect_punct(',')?;
            }
            items.push(self.operand()?);
        }
        Ok(Operand::Vector(items))
    }

    fn int(&self, n: &str) -> SimResult<u64> {
        parse_int(n)
            .ok_or(())
            .or_else(|_| self.err(format!("bad integer `{n}`")))
    }

    fn literal(&self, n: &str) -> SimResult<Literal> {
        parse_literal(n)
            .ok_or(())
            .or_else(|_| self.err(format!("bad number `{n}`")))
    }
}

fn negate(literal: Literal) -> Literal {
    match literal {
        Literal::Int(v) => Literal::Int(v.wrapping_neg()),
        Literal::F32(bits) => Literal::F32(bits ^ 0x8000_0000),
        Literal::F64(bits) => Literal::F64(bits ^ (1 << 63)),
        Literal::Float(v) => Literal::Float(-v),
    }
}

/// PTX integers: decimal, `0x` hex, `0b` binary, leading-0 octal, optional `U` suffix.
pub(crate) fn parse_int(n: &str) -> Option<u64> {
    let n = n.strip_suffix('U').unwrap_or(n);
    if let Some(hex) = n.strip_prefix("0x").or_else(|| n.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else if let Some(bin) = n.strip_prefix("0b").or_else(|| n.strip_prefix("0B")) {
        u64::from_str_radix(bin, 2).ok()
    } else if n.len() > 1 && n.starts_with('0') {
        u64::from_str_radix(&n[1..], 8).ok()
    } else {
        n.parse().ok()
    }
}

fn parse_literal(n: &str) -> Option<Literal> {
    if let Some(hex) = n.strip_prefix("0f").or_else(|| n.strip_prefix("0F")) {
        return (hex.len() == 8)
            .then(|| u32::from_str_radix(hex, 16).ok())
            .flatten()
            .map(Literal::F32);
    }
    if let Some(hex) = n.strip_prefix("0d").or_else(|| n.strip_prefix("0D")) {
        return (hex.len() == 16)
            .then(|| u64::from_str_radix(hex, 16).ok())
            .flatten()
            .map(Literal::F64);
    }
    if n.contains('.') || n.contains('e') && !n.starts_with("0x") {
        return n.parse().ok().map(Literal::Float);
    }
    parse_int(n).map(Literal::Int)
}
