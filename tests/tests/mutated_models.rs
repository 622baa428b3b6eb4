//! Mutants of the random-view models: in one model's `forward`, one integer changed (an axis, a length, a start,
//! a reshape's size), one value read in place of another, or one method called in place of another. The compiler
//! must take every mutant as a user's mistake or a valid model: an error on a place in the source, never a panic
//! nor an error without a place (the macro would then fail the user's build with no line to look at); or, where
//! the mutant is still a model, its plans and both writers' code made without a panic.

use fuse_kernels::back::cpu::write_program;
use fuse_kernels::back::cuda::write_all;
use fuse_kernels::front::capture_str;
use fuse_kernels::plan::{plan, Mode};
use fuse_tests::random_views::CASES;
use proc_macro2::{Group, Ident, Literal, TokenStream, TokenTree};
use quote::ToTokens;
use rand::{Rng, SeedableRng};

/// How many mutants each model gets.
const MUTANTS: usize = 100;

#[test]
fn mutated_models_fail_on_a_line_or_compile() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(23);
    let (mut refused, mut compiled) = (0, 0);
    let mut failures = Vec::new();
    for case in CASES {
        let spec = (case.spec)();
        let module = model_alone(spec.source, spec.name);
        let Some(at) = module.content.as_ref().and_then(|(_, items)| {
            items
                .iter()
                .position(|item| matches!(item, syn::Item::Impl(_)))
        }) else {
            panic!("{}: no impl in its source", spec.name);
        };
        let body = module.content.as_ref().expect("the module has items").1[at].to_token_stream();
        let names = value_names(&body);
        let sites = count_sites(&body, &names);
        for _ in 0..MUTANTS {
            let site = rng.gen_range(0..sites);
            let mut what = String::new();
            let mutant = mutate(body.clone(), &names, site, &mut rng, &mut what);
            let mut text = module.clone();
            let Ok(item) = syn::parse2::<syn::Item>(mutant) else {
                continue;
            };
            text.content.as_mut().expect("the module has items").1[at] = item;
            let source = text.to_token_stream().to_string();
            let label = format!("{} with {what}", spec.name);
            match std::panic::catch_unwind(|| compile(&source)) {
                Ok(Ok(Outcome::Refused)) => refused += 1,
                Ok(Ok(Outcome::Compiled)) => compiled += 1,
                Ok(Err(why)) => failures.push(format!("{label}: {why}")),
                Err(_) => failures.push(format!("{label}: the compiler panicked\n{source}")),
            }
        }
    }
    eprintln!("{refused} mutants refused with a spanned error, {compiled} compiled");
    assert!(
        refused > 0 && compiled > 0,
        "the mutants are all of one kind"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

enum Outcome {
    Refused,
    Compiled,
}

/// What the macro does with a module, less the tokens it emits: capture, both plans, the CPU program and the CUDA
/// sources in every storage type with their launch table.
fn compile(source: &str) -> Result<Outcome, String> {
    let capture = capture_str(source).map_err(|e| format!("the source does not parse: {e}"))?;
    if let Some(errors) = capture.errors {
        for e in errors {
            // An error on no token (the call site, where an unspanned error lands) covers no text.
            let (start, end) = (e.span().start(), e.span().end());
            if start == end {
                return Err(format!("an error with no place in the source: {e}"));
            }
            if e.to_string().contains("internal") {
                return Err(format!("an internal error: {e}"));
            }
        }
        return Ok(Outcome::Refused);
    }
    for model in &capture.models {
        let name = model.name.to_string();
        for mode in [Mode::Fused, Mode::Eager] {
            let p = plan(&model.graph, mode);
            write_program(&p, &name);
            write_all(&p, &name);
        }
    }
    Ok(Outcome::Compiled)
}

/// The module of `source` with only the struct and impl of `model` (each mutant is compiled alone).
fn model_alone(source: &str, model: &str) -> syn::ItemMod {
    let file = syn::parse_file(source).expect("a model's source parses");
    let mut module = file
        .items
        .into_iter()
        .find_map(|item| match item {
            syn::Item::Mod(m) => Some(m),
            _ => None,
        })
        .expect("a model's source holds its module");
    if let Some((_, items)) = module.content.as_mut() {
        items.retain(|item| match item {
            syn::Item::Struct(s) => s.ident == model,
            syn::Item::Impl(i) => i.self_ty.to_token_stream().to_string() == model,
            _ => true,
        });
    }
    module
}

/// The names of the values and inputs `forward` reads (`v3`, `x0`): one may be read in place of another.
fn value_names(tokens: &TokenStream) -> Vec<String> {
    let mut names = Vec::new();
    for tree in tokens.clone() {
        match tree {
            TokenTree::Group(g) => names.extend(value_names(&g.stream())),
            TokenTree::Ident(i) if is_value(&i.to_string()) => names.push(i.to_string()),
            _ => {}
        }
    }
    names.sort();
    names.dedup();
    names
}

fn is_value(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some('v' | 'x')) && chars.as_str().parse::<u32>().is_ok()
}

/// Methods a mutant may call in place of another: the same and other arities, views and computations.
const METHODS: [&str; 16] = [
    "t",
    "transpose",
    "permute",
    "narrow",
    "slice",
    "reshape",
    "softmax",
    "sum",
    "max",
    "mean",
    "matmul",
    "tanh",
    "neg",
    "layer_norm",
    "rms_norm",
    "dim",
];

/// The kind of place a mutant may change.
#[derive(Clone, Copy)]
enum Site {
    /// An unsuffixed integer.
    Integer,
    /// A value's name.
    Value,
    /// A method's name (an identifier after a `.`).
    Method,
}

fn site_of(tree: &TokenTree, after_dot: bool, names: &[String]) -> Option<Site> {
    match tree {
        TokenTree::Literal(l) if l.to_string().parse::<u64>().is_ok() => Some(Site::Integer),
        TokenTree::Ident(i) if after_dot && METHODS.contains(&i.to_string().as_str()) => {
            Some(Site::Method)
        }
        TokenTree::Ident(i) if names.len() > 1 && names.contains(&i.to_string()) => {
            Some(Site::Value)
        }
        _ => None,
    }
}

/// `tokens` with each site passed to `visit` in order (groups depth first), and replaced by what it returns.
fn walk(
    tokens: TokenStream,
    names: &[String],
    visit: &mut dyn FnMut(&TokenTree, Site) -> Option<TokenTree>,
) -> TokenStream {
    let mut after_dot = false;
    let mut out = Vec::new();
    for tree in tokens {
        let next = match tree {
            TokenTree::Group(g) => {
                let mut group = Group::new(g.delimiter(), walk(g.stream(), names, visit));
                group.set_span(g.span());
                TokenTree::Group(group)
            }
            t => match site_of(&t, after_dot, names) {
                Some(site) => visit(&t, site).unwrap_or(t),
                None => t,
            },
        };
        after_dot = matches!(&next, TokenTree::Punct(p) if p.as_char() == '.');
        out.push(next);
    }
    out.into_iter().collect()
}

fn count_sites(tokens: &TokenStream, names: &[String]) -> usize {
    let mut count = 0;
    walk(tokens.clone(), names, &mut |_, _| {
        count += 1;
        None
    });
    count
}

/// `tokens` with site number `site` (in [`walk`]'s order) changed, and what was changed in `what`.
fn mutate(
    tokens: TokenStream,
    names: &[String],
    site: usize,
    rng: &mut impl Rng,
    what: &mut String,
) -> TokenStream {
    let mut seen = 0;
    walk(tokens, names, &mut |t, kind| {
        seen += 1;
        if seen - 1 != site {
            return None;
        }
        let changed = match (kind, t) {
            (Site::Integer, TokenTree::Literal(l)) => {
                let v: u64 = l.to_string().parse().expect("an integer site");
                let to = [0, 1, 2, 3, v + 1, v.saturating_sub(1), 2 * v, 1000][rng.gen_range(0..8)];
                let mut lit = Literal::u64_unsuffixed(to);
                lit.set_span(l.span());
                TokenTree::Literal(lit)
            }
            (Site::Method, _) => TokenTree::Ident(Ident::new(
                METHODS[rng.gen_range(0..METHODS.len())],
                t.span(),
            )),
            _ => TokenTree::Ident(Ident::new(&names[rng.gen_range(0..names.len())], t.span())),
        };
        *what = format!("`{t}` as `{changed}`");
        Some(changed)
    })
}
