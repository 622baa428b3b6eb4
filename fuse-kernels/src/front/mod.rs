//! The front end: a `#[fused_model] mod` (syn) → one [`Graph`] per root model, or spanned errors.

mod consts;
mod diag;
mod lower;
mod model;
mod model_tree;
mod recompute;
mod role;

pub use consts::ConstVal;
pub use diag::Diagnostics;
pub use role::{find_libraries, fused_modules, library_macro_name, parse_role, Role};

use crate::ir::Graph;

/// One compiled model of a module: a struct that no other struct uses as a field.
pub struct CapturedModel {
    pub name: syn::Ident,
    pub graph: Graph,
}

/// What the front end made of a module. `errors` holds every error found (each on its own span); the names of
/// the root structs are kept even then, so the macro can emit stubs beside the errors.
///
/// `models` is all or nothing: every root's graph when the module compiled, empty when `errors` is `Some`. A
/// module with an error is replaced by stubs as a whole, so a graph from it would only mislead a consumer (the
/// build script would write kernels nobody loads), and a root lowered after an error elsewhere may have lost
/// values to it without a message of its own.
pub struct Capture {
    pub module: syn::Ident,
    pub models: Vec<CapturedModel>,
    pub root_names: Vec<syn::Ident>,
    pub errors: Option<syn::Error>,
}

/// Captures every root model of `module`.
pub fn capture(module: &syn::ItemMod) -> Capture {
    capture_with(module, &[])
}

/// Captures every root model of `module`, whose structs may use those of `libraries` (the
/// `#[fused_model(library)]` modules named in its `uses(..)`, in that order).
pub fn capture_with(module: &syn::ItemMod, libraries: &[syn::ItemMod]) -> Capture {
    let mut diags = Diagnostics::default();
    let source = model::read_module(module, libraries, &mut diags);
    let roots = source.roots();
    let root_names: Vec<syn::Ident> = roots
        .iter()
        .map(|&i| source.structs[i].name.clone())
        .collect();
    let mut models = Vec::new();
    for &root in &roots {
        let mut lowerer = lower::Lowerer::new(&source, &mut diags);
        lowerer.lower_root(root);
        let graph = std::mem::take(&mut lowerer.g);
        if diags.is_empty() && graph.outputs.is_empty() {
            // Every path that drops a value reports why; this backstop keeps an empty graph from ever reaching
            // the planner if one does not.
            diags.error_at(
                &source.structs[root].name,
                "internal: `forward` of this model produced no tensor, and no error said why",
            );
        }
        models.push(CapturedModel {
            name: source.structs[root].name.clone(),
            graph: recompute::copy_shared_dim_values(graph),
        });
    }
    let errors = diags.finish().err();
    if errors.is_some() {
        models.clear();
    }
    Capture {
        module: module.ident.clone(),
        models,
        root_names,
        errors,
    }
}

/// Checks a `#[fused_model(library)]` module on its own: its items, structs and impls (each `forward` is
/// lowered where a model uses it, with that model's const arguments).
pub fn check_library(library: &syn::ItemMod) -> Result<(), syn::Error> {
    let mut diags = Diagnostics::default();
    model::read_module(library, &[], &mut diags);
    diags.finish()
}

/// Captures from source text (the form `build.rs` and the tests use; spans then point into that text): the
/// model's module, then the libraries it uses, as [`model_source`] writes them.
pub fn capture_str(source: &str) -> Result<Capture, syn::Error> {
    let file = syn::parse_file(source)?;
    let mut modules = file.items.into_iter().filter_map(|item| match item {
        syn::Item::Mod(m) => Some(m),
        _ => None,
    });
    let Some(module) = modules.next() else {
        return Err(syn::Error::new(
            proc_macro2::Span::call_site(),
            "no module in the model source",
        ));
    };
    let libraries: Vec<syn::ItemMod> = modules.collect();
    Ok(capture_with(&module, &libraries))
}

/// The text of a model's module followed by its libraries' (what `ModelSpec::source` holds, and
/// [`capture_str`] reads back).
pub fn model_source(module: &syn::ItemMod, libraries: &[syn::ItemMod]) -> String {
    std::iter::once(module)
        .chain(libraries)
        .map(|m| quote::quote!(#m).to_string())
        .collect::<Vec<_>>()
        .join("\n")
}
