//! PTX text → tokens, each with its 1-based source line. Comments are dropped here; directives and instructions
//! are told apart by the parser.

use crate::error::{SimError, SimResult};

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    /// Identifiers, opcodes with their modifiers (`ld.global.nc.v4.f32`), directives (`.reg`), registers
    /// (`%r1`, `%tid.x`) and labels (`$L__BB0_2`).
    Word(String),
    /// Numbers in any PTX spelling (`16`, `0xff`, `0f3F800000`, `9.0`), without a sign.
    Number(String),
    Str(String),
    Punct(char),
}

#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub tok: Tok,
    pub line: u32,
}

fn is_word_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || matches!(c, b'_' | b'$' | b'%' | b'.')
}

fn is_word_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'.')
}

pub(crate) fn tokenize(text: &str) -> SimResult<Vec<Token>> {
    let bytes = text.as_bytes();
    let mut tokens = Vec::new();
    let mut line = 1u32;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'\n' {
            line += 1;
            i += 1;
        } else if c.is_ascii_whitespace() {
            i += 1;
        } else if bytes[i..].starts_with(b"//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if bytes[i..].starts_with(b"/*") {
            let start_line = line;
            i += 2;
            loop {
                if i + 1 >= bytes.len() {
                    return Err(SimError::Parse {
                        line: start_line,
                        message: "unterminated comment".into(),
                    });
                }
                if bytes[i] == b'*' && bytes[i + 1] == b'/' {
                    i += 2;
                    break;
                }
                if bytes[i] == b'\n' {
                    line += 1;
                }
                i += 1;
            }
        } else if c == b'"' {
            let start = i + 1;
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' && bytes[i] != b'\n' {
                i += 1;
            }
            if i >= bytes.len() || bytes[i] != b'"' {
                return Err(SimError::Parse {
                    line,
                    message: "unterminated string".into(),
                });
            }
            tokens.push(Token {
                tok: Tok::Str(text[start..i].to_string()),
                line,
            });
            i += 1;
        } else if is_word_start(c) {
            let start = i;
            i += 1;
            while i < bytes.len() && is_word_char(bytes[i]) {
                i += 1;
            }
            tokens.push(Token {
                tok: Tok::Word(text[start..i].to_string()),
                line,
            });
        } else if c.is_ascii_digit() {
            let start = i;
            i += 1;
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.' || bytes[i] == b'_')
            {
                i += 1;
            }
            tokens.push(Token {
                tok: Tok::Number(text[start..i].to_string()),
                line,
            });
        } else if b",;{}[]()+-<>@!|:=".contains(&c) {
            tokens.push(Token {
                tok: Tok::Punct(c as char),
                line,
            });
            i += 1;
        } else {
            return Err(SimError::Parse {
                line,
                message: format!("unexpected character `{}`", c as char),
            });
        }
    }
    Ok(tokens)
}
