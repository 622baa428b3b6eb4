//! Writes the random-view models (`gen/random_views.rs`) into `OUT_DIR`, and beside them, for each model, the first
//! two of its mutants of one change and the first of two changes (`gen/mutants.rs`) that the compiler takes as
//! models, so that they run against the reference too. `FUSE_VIEW_SEED` and `FUSE_VIEW_MODELS` draw another set
//! (the defaults are what CI runs); `FUSE_MUTANTS=n` takes n mutants of each model instead, each of
//! `FUSE_MUTANT_CHANGES` changes (1 unless set).

#[path = "gen/mutants.rs"]
mod mutants;
#[path = "gen/random_views.rs"]
mod random_views;

use mutants::{compile, module_of, Mutable, Outcome};
use quote::ToTokens;
use rand::SeedableRng;

/// The set CI runs: its coverage is checked (`tests/random_views.rs`).
const DEFAULT_SEED: u64 = 1;
const DEFAULT_MODELS: u64 = 48;
/// How many mutants of each model, and of how many changes each: a wrong size and a wrong axis together reach
/// what one alone does not.
const DEFAULT_MUTANTS: [(u64, usize); 2] = [(2, 1), (1, 2)];

/// How many mutants of one change of a model are drawn at most to find those that compile: about one in five
/// does (fewer of more changes: as many more are drawn).
const TRIES: usize = 80;

fn main() {
    println!("cargo:rerun-if-changed=gen/random_views.rs");
    println!("cargo:rerun-if-changed=gen/mutants.rs");
    for var in [
        "FUSE_VIEW_SEED",
        "FUSE_VIEW_MODELS",
        "FUSE_MUTANTS",
        "FUSE_MUTANT_CHANGES",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let number = |var: &str, default: u64| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let seed = number("FUSE_VIEW_SEED", DEFAULT_SEED);
    let models = number("FUSE_VIEW_MODELS", DEFAULT_MODELS) as usize;
    let written = random_views::write(seed, models);
    let mut text = written.text.clone();
    let kinds = match std::env::var("FUSE_MUTANTS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        Some(n) => vec![(n, number("FUSE_MUTANT_CHANGES", 1) as usize)],
        None => DEFAULT_MUTANTS.to_vec(),
    };
    text += &compiling_mutants(&written, models, seed, &kinds);
    text += &format!(
        "\n/// Whether this is the set CI runs, whose coverage is checked.\npub const DEFAULT_SET: bool = {};\n",
        (seed, models as u64) == (DEFAULT_SEED, DEFAULT_MODELS)
    );
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    std::fs::write(std::path::Path::new(&out).join("random_views.rs"), text)
        .expect("OUT_DIR is writable");
}

/// The `#[fused_model]` module of compiling mutants of each of the `models` in `written`, as many of each number
/// of changes as `kinds` says, each renamed `Mutant{n}`, and their table `MUTANTS`.
fn compiling_mutants(
    written: &random_views::Written,
    models: usize,
    seed: u64,
    kinds: &[(u64, usize)],
) -> String {
    let module = module_of(&written.text);
    let mut items: Vec<syn::Item> = Vec::new();
    let mut table = String::new();
    let mut taken = 0;
    for i in 0..models {
        let parent = format!("View{i}");
        let mutable = Mutable::new(&module, &parent);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed << 32 | i as u64);
        for &(count, changes) in kinds {
            for (what, mutant) in first_compiling(&mutable, count, changes, &mut rng) {
                let name = quote::format_ident!("Mutant{taken}");
                taken += 1;
                for item in mutant.content.expect("the module has items").1 {
                    items.push(match item {
                        syn::Item::Struct(mut s) => {
                            s.ident = name.clone();
                            syn::Item::Struct(s)
                        }
                        syn::Item::Impl(mut i) => {
                            i.self_ty = Box::new(syn::parse_quote!(#name));
                            syn::Item::Impl(i)
                        }
                        other => other,
                    });
                }
                table += &format!(
                    "    Mutant {{ case: Case {{ spec: mutants::{name}::spec, {} }}, what: {:?} }},\n",
                    written.checks[i],
                    format!("{parent} with {what}")
                );
            }
        }
    }
    let module = if items.is_empty() {
        String::new()
    } else {
        let file: syn::File = syn::parse_quote! {
            #[::fuse_runtime::fused_model]
            pub mod mutants {
                #(#items)*
            }
        };
        prettyplease::unparse(&file)
    };
    format!(
        "\n{module}\n/// Mutants of the models above that the compiler takes as models, each with its parent's tolerance.\n\
         pub const MUTANTS: &[Mutant] = &[\n{table}];\n"
    )
}

/// The first `count` mutants of `changes` changes of `mutable` the compiler takes as models, of at most
/// [`TRIES`] per change drawn. A mutant the compiler panics on is passed over here: reporting those is
/// `tests/mutated_models.rs`'s job.
fn first_compiling(
    mutable: &Mutable,
    count: u64,
    changes: usize,
    rng: &mut rand_chacha::ChaCha8Rng,
) -> Vec<(String, syn::ItemMod)> {
    let mut found = Vec::new();
    for _ in 0..TRIES * changes {
        if found.len() as u64 == count {
            break;
        }
        let Some((what, mutant)) = mutable.mutant(changes, rng) else {
            continue;
        };
        let source = mutant.to_token_stream().to_string();
        if matches!(
            std::panic::catch_unwind(|| compile(&source)),
            Ok(Ok(Outcome::Compiled))
        ) {
            found.push((what, mutant));
        }
    }
    found
}
