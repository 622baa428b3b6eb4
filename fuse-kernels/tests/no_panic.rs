//! The macro never panics, whatever it is given: a panic inside `#[fused_model]` is an internal compiler error
//! with no span, the worst message a user can get. This feeds the whole compile-time pipeline (`front::capture`,
//! then `plan` and the CPU writer on every model that captured) three kinds of input, each under `catch_unwind`:
//!
//! - mutants of real models (the examples and the ui suite), with the libraries they use: tokens of the model or
//!   of one library deleted, duplicated, swapped or inserted, literals, method names and identifiers changed,
//!   ranges wrapped in brackets; only mutants that still parse as a module are kept, since syn rejects the rest
//!   before the compiler sees them;
//! - models from a small random grammar of the model language, which reach deeper than mutants (loops, branches,
//!   sub-model arrays, every op);
//! - random token soup inside a model skeleton.
//!
//! `FUSE_FUZZ_CASES` sets the number of cases (default 2,000, a few seconds), `FUSE_FUZZ_SEED` the seed, and
//! `FUSE_FUZZ_TRACE=path` writes each case to `path` before running it, so an abort that `catch_unwind` cannot
//! catch (a stack overflow) leaves its input behind.

use std::cell::RefCell;
use std::panic::{self, AssertUnwindSafe};
use std::time::{Duration, Instant};

#[path = "no_panic/grammar.rs"]
mod grammar;

use fuse_kernels::front::{find_libraries, fused_modules, Role};
use proc_macro2::{Delimiter, Spacing, TokenStream, TokenTree};
use quote::ToTokens;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

thread_local! {
    /// The message and location of the last panic on this thread, written by the hook.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Runs the pipeline on one module and the libraries it uses; `Err` carries the panic.
fn compile(module: &syn::ItemMod, libraries: &[syn::ItemMod]) -> Result<Outcome, String> {
    let run = || {
        let cap = fuse_kernels::front::capture_with(module, libraries);
        if cap.errors.is_none() {
            for m in &cap.models {
                assert!(
                    !m.graph.outputs.is_empty(),
                    "a captured graph has no outputs"
                );
                for mode in [
                    fuse_kernels::plan::Mode::Fused,
                    fuse_kernels::plan::Mode::Eager,
                ] {
                    let plan = fuse_kernels::plan::plan(&m.graph, mode);
                    let _ = fuse_kernels::back::cpu::write_program(&plan, &m.name.to_string());
                }
            }
            Outcome::Compiled
        } else {
            Outcome::Refused
        }
    };
    panic::catch_unwind(AssertUnwindSafe(run)).map_err(|payload| {
        LAST_PANIC
            .with(|p| p.borrow_mut().take())
            .unwrap_or_else(|| match payload.downcast_ref::<&str>() {
                Some(s) => s.to_string(),
                None => "a panic with a non-string payload".to_string(),
            })
    })
}

enum Outcome {
    Compiled,
    Refused,
}

struct Failure {
    kind: &'static str,
    source: String,
    panic: String,
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn run_fuzz() {
    let cases = env_number("FUSE_FUZZ_CASES", 2_000);
    let seed = env_number("FUSE_FUZZ_SEED", 0x5eed_f00d);
    let trace = std::env::var("FUSE_FUZZ_TRACE").ok();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let seeds = Seed::load_all();
    assert!(!seeds.is_empty(), "no seed models found");

    let previous_hook = panic::take_hook();
    panic::set_hook(Box::new(|info| {
        LAST_PANIC.with(|p| *p.borrow_mut() = Some(info.to_string()));
    }));

    let start = Instant::now();
    let (mut done, mut tries, mut compiled, mut refused) = (0u64, 0u64, 0u64, 0u64);
    let mut slowest = (Duration::ZERO, String::new());
    let mut failures: Vec<Failure> = Vec::new();
    while done < cases && failures.len() < 5 {
        tries += 1;
        let roll = rng.gen_range(0..100);
        // (kind, the text a failure prints, the model module's text, its libraries)
        let (kind, source, model, libraries) = if roll < 70 {
            let seed_model = &seeds[rng.gen_range(0..seeds.len())];
            let mut libraries = seed_model.libraries.clone();
            // Mostly the model; sometimes one of its libraries, whose mistakes reach the model through `uses`.
            let target = match libraries.len() {
                0 => None,
                n => rng.gen_bool(0.25).then(|| rng.gen_range(0..n)),
            };
            let mut toks = tokens_of(target.map_or(&seed_model.module, |i| &libraries[i]));
            let n = if rng.gen_bool(0.6) {
                1
            } else {
                rng.gen_range(2..=4)
            };
            for _ in 0..n {
                mutate(&mut rng, &mut toks, &seed_model.idents);
            }
            let mutant = render(&toks);
            match target {
                None => ("mutant", mutant.clone(), mutant, libraries),
                Some(i) => {
                    let Ok(library) = syn::parse_str::<syn::ItemMod>(&mutant) else {
                        continue;
                    };
                    libraries[i] = library;
                    let model = render(&tokens_of(&seed_model.module));
                    let all = quote::quote!(#(#libraries)*).to_string();
                    (
                        "library mutant",
                        format!("{model}\n{all}"),
                        model,
                        libraries,
                    )
                }
            }
        } else if roll < 90 {
            let m = grammar::random_model(&mut rng);
            ("grammar", m.clone(), m, Vec::new())
        } else {
            let m = grammar::random_soup(&mut rng);
            ("soup", m.clone(), m, Vec::new())
        };
        let Ok(module) = syn::parse_str::<syn::ItemMod>(&model) else {
            continue;
        };
        done += 1;
        if let Some(path) = &trace {
            let _ = std::fs::write(path, &source);
        }
        let t = Instant::now();
        match compile(&module, &libraries) {
            Ok(Outcome::Compiled) => compiled += 1,
            Ok(Outcome::Refused) => refused += 1,
            Err(panic) => failures.push(Failure {
                kind,
                source: source.clone(),
                panic,
            }),
        }
        let took = t.elapsed();
        if took > slowest.0 {
            slowest = (took, source);
        }
    }
    panic::set_hook(previous_hook);

    eprintln!(
        "no_panic: {done} cases ({tries} generated, seed {seed:#x}) in {:.1?}: {compiled} compiled, {refused} \
         refused with errors; slowest case {:.1?}",
        start.elapsed(),
        slowest.0
    );
    if slowest.0 > Duration::from_secs(2) {
        eprintln!("slowest case:\n{}", slowest.1);
    }
    if !failures.is_empty() {
        for f in &failures {
            eprintln!(
                "\n--- panic on a {} case: {}\n{}\n",
                f.kind, f.panic, f.source
            );
        }
        panic!(
            "the compiler panicked on {} input(s); see above",
            failures.len()
        );
    }
}

#[test]
fn compiler_never_panics() {
    // rustc runs proc macros on a thread with an 8 MiB stack; fuzz on one of the same size, so a recursion that
    // would overflow in a real build overflows here too.
    let fuzzer = std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(run_fuzz)
        .expect("spawn the fuzz thread");
    if let Err(e) = fuzzer.join() {
        panic::resume_unwind(e);
    }
}

// ---- seeds and mutations ----

/// A model to mutate: its module, the libraries it uses, and the identifiers of both (replacements that keep
/// mutants plausible).
struct Seed {
    module: syn::ItemMod,
    libraries: Vec<syn::ItemMod>,
    idents: Vec<String>,
}

impl Seed {
    /// Every `#[fused_model]` module of the example models and the ui suite.
    fn load_all() -> Vec<Seed> {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let mut files = Vec::new();
        for dir in [
            "examples/src/models",
            "tests/ui/pass",
            "tests/ui/control_flow",
            "tests/ui/unsupported",
            "tests/ui/shapes",
            "tests/ui/dtypes",
            "tests/ui/signatures",
            "tests/ui/libraries",
        ] {
            if let Ok(entries) = std::fs::read_dir(format!("{root}/{dir}")) {
                files.extend(entries.flatten().map(|e| e.path()));
            }
        }
        files.sort();
        // Every `#[fused_model]` module with its role; libraries are found by name, as `fuse-build` does.
        let mut modules = Vec::new();
        for path in files
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        {
            let Ok(text) = std::fs::read_to_string(path) else {
                continue;
            };
            if let Ok(file) = syn::parse_file(&text) {
                modules.extend(fused_modules(&file.items));
            }
        }
        let mut seeds = Vec::new();
        for (module, role) in &modules {
            let libraries = match role {
                Role::Model { uses, .. } => find_libraries(uses, &modules).unwrap_or_default(),
                Role::Library => Vec::new(),
            };
            let idents = std::iter::once(module)
                .chain(&libraries)
                .flat_map(tokens_of)
                .filter(|t| t.kind == Kind::Ident)
                .map(|t| t.text)
                .collect();
            seeds.push(Seed {
                module: module.clone(),
                libraries,
                idents,
            });
        }
        seeds
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Ident,
    Punct,
    Literal,
    Open,
    Close,
}

/// One token of a flattened token stream; delimiters are their own tokens so mutations can move them.
#[derive(Clone, Debug)]
struct Tok {
    text: String,
    kind: Kind,
    /// A punct glued to the next one (`-` of `->`).
    joint: bool,
}

fn tok(text: &str, kind: Kind) -> Tok {
    Tok {
        text: text.to_string(),
        kind,
        joint: false,
    }
}

fn tokens_of(module: &syn::ItemMod) -> Vec<Tok> {
    let mut out = Vec::new();
    flatten(module.to_token_stream(), &mut out);
    out
}

fn flatten(ts: TokenStream, out: &mut Vec<Tok>) {
    for tt in ts {
        match tt {
            TokenTree::Group(g) => {
                let (open, close) = match g.delimiter() {
                    Delimiter::Parenthesis => ("(", ")"),
                    Delimiter::Brace => ("{", "}"),
                    Delimiter::Bracket => ("[", "]"),
                    Delimiter::None => ("", ""),
                };
                if !open.is_empty() {
                    out.push(tok(open, Kind::Open));
                }
                flatten(g.stream(), out);
                if !close.is_empty() {
                    out.push(tok(close, Kind::Close));
                }
            }
            TokenTree::Ident(i) => out.push(tok(&i.to_string(), Kind::Ident)),
            TokenTree::Punct(p) => out.push(Tok {
                text: p.as_char().to_string(),
                kind: Kind::Punct,
                joint: p.spacing() == Spacing::Joint,
            }),
            TokenTree::Literal(l) => out.push(tok(&l.to_string(), Kind::Literal)),
        }
    }
}

fn render(toks: &[Tok]) -> String {
    let mut s = String::new();
    for t in toks {
        s.push_str(&t.text);
        if !t.joint {
            s.push(' ');
        }
    }
    s
}

const METHOD_NAMES: &[&str] = &[
    "exp",
    "log",
    "relu",
    "gelu",
    "softmax",
    "sum",
    "mean",
    "max",
    "min",
    "matmul",
    "t",
    "transpose",
    "permute",
    "reshape",
    "slice",
    "dim",
    "to_f32",
    "layer_norm",
    "rms_norm",
    "square",
    "gt",
    "lt",
    "eq",
    "add",
    "pow",
    "clone",
    "forward",
    "heads",
    "iter",
    "len",
    "sqrt",
    "powi",
    "view",
    "foo",
];
const INTS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "4",
    "8",
    "12",
    "384",
    "5000",
    "65536",
    "4294967296",
    "9223372036854775807",
    "99999999999999999999",
    "1_000_000",
];
const FLOATS: &[&str] = &["0.0", "1.0", "0.5", "1e-12", "1e308", "-0.0"];
const INSERTS: &[&str] = &[
    "if", "for", "in", "while", "loop", "return", "break", "continue", "match", "let", "mut", "&",
    "*", "+", "-", "/", "%", "..", ";", "?", "!", ",", ".", "=", "==", "<", ">", "as", "f64",
    "usize", "0", "1", "-1", "true", "unsafe", "async", "move", "|", "_", "self", "x", "N", "::",
];

fn pick<'a>(rng: &mut ChaCha8Rng, xs: &[&'a str]) -> &'a str {
    xs[rng.gen_range(0..xs.len())]
}

/// One random token-level edit.
fn mutate(rng: &mut ChaCha8Rng, toks: &mut Vec<Tok>, idents: &[String]) {
    if toks.is_empty() {
        return;
    }
    let i = rng.gen_range(0..toks.len());
    match rng.gen_range(0..9) {
        0 => {
            toks.remove(i);
        }
        1 => {
            let t = toks[i].clone();
            toks.insert(i, t);
        }
        2 => {
            let j = rng.gen_range(0..toks.len());
            toks.swap(i, j);
        }
        3 | 4 => {
            // A literal, preferring numbers: shapes, axes, loop bounds and array lengths.
            let lits: Vec<usize> = (0..toks.len())
                .filter(|&k| {
                    toks[k].kind == Kind::Literal
                        || matches!(toks[k].text.as_str(), "true" | "false")
                })
                .collect();
            if let Some(&k) = lits.get(rng.gen_range(0..lits.len().max(1))) {
                let new = match toks[k].text.as_str() {
                    "true" => "false",
                    "false" => "true",
                    t if t.contains('.') || t.contains('e') => pick(rng, FLOATS),
                    _ if rng.gen_bool(0.1) => "\"text\"",
                    _ => pick(rng, INTS),
                };
                toks[k].text = new.to_string();
            }
        }
        5 => {
            // A method name: an identifier right after a `.`.
            let methods: Vec<usize> = (1..toks.len())
                .filter(|&k| {
                    toks[k].kind == Kind::Ident && toks[k - 1].text == "." && !toks[k - 1].joint
                })
                .collect();
            if let Some(&k) = methods.get(rng.gen_range(0..methods.len().max(1))) {
                toks[k].text = pick(rng, METHOD_NAMES).to_string();
            }
        }
        6 => {
            if toks[i].kind == Kind::Ident && !idents.is_empty() {
                toks[i].text = idents[rng.gen_range(0..idents.len())].clone();
            }
        }
        7 => {
            let text = pick(rng, INSERTS);
            let kind = if text.chars().all(|c| c.is_alphanumeric() || c == '_') {
                Kind::Ident
            } else {
                Kind::Punct
            };
            let mut t = tok(text, kind);
            t.joint = false;
            toks.insert(i, t);
        }
        _ => {
            // Wrap a short run of tokens in brackets, keeping delimiters balanced.
            let end = (i + rng.gen_range(1..6)).min(toks.len());
            let (open, close) = match rng.gen_range(0..3) {
                0 => ("(", ")"),
                1 => ("[", "]"),
                _ => ("{", "}"),
            };
            toks.insert(end, tok(close, Kind::Close));
            toks.insert(i, tok(open, Kind::Open));
        }
    }
}
