//! Mutants of the random-view models: in one model's `forward`, one integer changed (an axis, a length, a start,
//! a declared size), one value read in place of another, or one method called in place of another. Shared by
//! `build.rs`, which compiles the first mutants of each model the compiler takes as a valid model so that
//! `tests/random_views.rs` runs them against the f64 reference, and by `tests/mutated_models.rs`, which checks
//! that the compiler refuses every other mutant on a line of its source.

use fuse_kernels::back::cpu::write_program;
use fuse_kernels::back::cuda::write_all;
use fuse_kernels::front::capture_str;
use fuse_kernels::plan::{plan, Mode};
use proc_macro2::{Group, Ident, Literal, TokenStream, TokenTree};
use quote::ToTokens;
use rand::Rng;

/// What the compiler made of a mutant.
pub enum Outcome {
    /// Refused, with errors on places in the source.
    Refused,
    /// Taken as a model: captured, planned and written by both writers.
    Compiled,
}

/// What the macro does with a module, less the tokens it emits: capture, both plans, the CPU program and the CUDA
/// sources in every storage type with their launch table. An error with no place in the source, or one that
/// calls itself internal, is the compiler's fault, not the mutant's: `Err`.
pub fn compile(source: &str) -> Result<Outcome, String> {
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

/// The `#[fused_model]` module of a models source.
pub fn module_of(source: &str) -> syn::ItemMod {
    let file = syn::parse_file(source).expect("a models source parses");
    file.items
        .into_iter()
        .find_map(|item| match item {
            syn::Item::Mod(m) => Some(m),
            _ => None,
        })
        .expect("a models source holds its module")
}

/// One model of a module, ready to be mutated: the module with only its struct and impl (each mutant is compiled
/// alone), and the places in its impl a mutant may change.
pub struct Mutable {
    module: syn::ItemMod,
    /// Where the impl is among the module's items.
    at: usize,
    body: TokenStream,
    names: Vec<String>,
    sites: usize,
}

impl Mutable {
    pub fn new(module: &syn::ItemMod, model: &str) -> Self {
        let mut module = module.clone();
        let items = &mut module.content.as_mut().expect("the module has items").1;
        items.retain(|item| match item {
            syn::Item::Struct(s) => s.ident == model,
            syn::Item::Impl(i) => i.self_ty.to_token_stream().to_string() == model,
            _ => true,
        });
        let at = items
            .iter()
            .position(|item| matches!(item, syn::Item::Impl(_)))
            .unwrap_or_else(|| panic!("{model}: no impl in its source"));
        let body = items[at].to_token_stream();
        let names = value_names(&body);
        let sites = count_sites(&body, &names);
        Mutable {
            module,
            at,
            body,
            names,
            sites,
        }
    }

    /// A mutant with `changes` changes, each at a site drawn anew: what was changed, and the module with it;
    /// `None` where the changes left the impl as it was (an integer drawn equal to itself, a value or method drawn
    /// in place of itself, a change undone by the next) or no longer parsing. Each change leaves the sites where
    /// they were (an integer stays an integer, a name a name), so the sites counted once serve every change.
    pub fn mutant(&self, changes: usize, rng: &mut impl Rng) -> Option<(String, syn::ItemMod)> {
        let mut body = self.body.clone();
        let mut whats = Vec::new();
        for _ in 0..changes {
            let site = rng.gen_range(0..self.sites);
            body = mutate(body, &self.names, site, rng, &mut |from, to| {
                // A change that drew what was there is none.
                if from.to_string() != to.to_string() {
                    whats.push(format!("`{from}` as `{to}`"))
                }
            });
        }
        if body.to_string() == self.body.to_string() {
            return None;
        }
        let item = syn::parse2::<syn::Item>(body).ok()?;
        let mut module = self.module.clone();
        module.content.as_mut().expect("the module has items").1[self.at] = item;
        Some((whats.join(" and "), module))
    }
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

/// `tokens` with site number `site` (in [`walk`]'s order) changed, the change told to `told`.
fn mutate(
    tokens: TokenStream,
    names: &[String],
    site: usize,
    rng: &mut impl Rng,
    told: &mut dyn FnMut(&TokenTree, &TokenTree),
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
        told(t, &changed);
        Some(changed)
    })
}
