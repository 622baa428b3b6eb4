//! What `#[fused_model(..)]` makes of a module: a model (using the sub-models of some libraries, or none), or a
//! library of sub-models that models of other modules use.
//!
//! A proc-macro attribute sees only its own item, so a library hands its source to the models that use it
//! through a `macro_rules!` it defines (named by [`library_macro_name`], re-exported in the library as
//! `__fuse_library`): the model's attribute expands to a call of each library's macro in turn, each appends its
//! module's tokens, and the last one calls the model expansion with all of them.

use proc_macro2::TokenStream;
use syn::parse::Parser;
use syn::punctuated::Punctuated;

use crate::contract::Contract;

/// The role of a `#[fused_model]` module.
#[derive(Clone, Debug)]
pub enum Role {
    /// Compiled models; `uses` are paths (from the module that holds this one) to library modules, and
    /// `contract` the limits every model of the module must meet (see [`crate::contract`]).
    Model {
        uses: Vec<syn::Path>,
        contract: Contract,
    },
    /// `#[fused_model(library)]`: sub-models for other modules' models; compiles no model itself.
    Library,
}

const USAGE: &str =
    "#[fused_model] takes no arguments, `library`, or any of `uses(module, ..)` naming library \
     modules, `max_kernels = N`, `max_arena = \"12 MiB\"` and `at(dim = N, ..)`";

/// Parses the attribute's arguments (the tokens inside `#[fused_model(...)]`).
pub fn parse_role(args: TokenStream) -> syn::Result<Role> {
    if args.is_empty() {
        return Ok(Role::Model {
            uses: Vec::new(),
            contract: Contract::default(),
        });
    }
    let metas = Punctuated::<syn::Meta, syn::Token![,]>::parse_terminated
        .parse2(args.clone())
        .map_err(|_| syn::Error::new_spanned(&args, USAGE))?;
    if metas.len() == 1 {
        if let Some(syn::Meta::Path(p)) = metas.first() {
            if p.is_ident("library") {
                return Ok(Role::Library);
            }
        }
    }
    let mut uses: Option<Vec<syn::Path>> = None;
    let mut contract = Contract::default();
    for meta in metas {
        match meta {
            syn::Meta::List(list) if list.path.is_ident("uses") => {
                if uses.is_some() {
                    return Err(syn::Error::new_spanned(list, "`uses(..)` is given twice"));
                }
                uses = Some(parse_uses(&list)?);
            }
            syn::Meta::Path(p) if p.is_ident("library") => {
                return Err(syn::Error::new_spanned(
                    p,
                    "a library compiles no model of its own, so it takes no `uses(..)` or contract; write \
                     `#[fused_model(library)]` alone",
                ));
            }
            other => {
                if !contract.parse_item(&other)? {
                    return Err(syn::Error::new_spanned(other, USAGE));
                }
            }
        }
    }
    Ok(Role::Model {
        uses: uses.unwrap_or_default(),
        contract,
    })
}

fn parse_uses(list: &syn::MetaList) -> syn::Result<Vec<syn::Path>> {
    let paths = Punctuated::<syn::Path, syn::Token![,]>::parse_terminated
        .parse2(list.tokens.clone())
        .map_err(|_| syn::Error::new_spanned(&list.tokens, USAGE))?;
    if paths.is_empty() {
        return Err(syn::Error::new_spanned(
            list,
            "`uses()` names no library module",
        ));
    }
    let text = |p: &syn::Path| quote::quote!(#p).to_string();
    for (i, p) in paths.iter().enumerate() {
        if paths.iter().take(i).any(|q| text(q) == text(p)) {
            return Err(syn::Error::new_spanned(
                p,
                "this library is already named in `uses(..)`",
            ));
        }
    }
    Ok(paths.into_iter().collect())
}

/// The `macro_rules!` through which the library module `module` hands over its source.
pub fn library_macro_name(module: &syn::Ident) -> syn::Ident {
    quote::format_ident!("__fuse_library_{}", module)
}

/// The role a module's `#[fused_model]` attribute (under any path: `fuse_runtime::fused_model`, a re-export..)
/// gives it; `None` without one, or with malformed arguments (the macro reports those).
fn module_role(module: &syn::ItemMod) -> Option<Role> {
    module.attrs.iter().find_map(|attr| {
        let name = attr.path().segments.last()?;
        if name.ident != "fused_model" {
            return None;
        }
        let args = match &attr.meta {
            syn::Meta::List(list) => list.tokens.clone(),
            _ => TokenStream::new(),
        };
        parse_role(args).ok()
    })
}

/// The `#[fused_model]` modules among `items`, outermost first, searching inside inline modules, with their
/// roles: what `fuse-build` compiles, and what the tests scan.
pub fn fused_modules(items: &[syn::Item]) -> Vec<(syn::ItemMod, Role)> {
    let mut found = Vec::new();
    for item in items {
        let syn::Item::Mod(module) = item else {
            continue;
        };
        if let Some(role) = module_role(module) {
            found.push((module.clone(), role));
        } else if let Some((_, inner)) = &module.content {
            found.extend(fused_modules(inner));
        }
    }
    found
}

/// The library modules `uses` names, looked up among `modules` by module name (the path's last segment: outside
/// the compiler there is no name resolution). `Err` names the first library that matches no library module, or
/// several.
pub fn find_libraries(
    uses: &[syn::Path],
    modules: &[(syn::ItemMod, Role)],
) -> Result<Vec<syn::ItemMod>, String> {
    uses.iter()
        .map(|path| {
            let name = path
                .segments
                .last()
                .map(|s| s.ident.to_string())
                .unwrap_or_default();
            let mut matches = modules
                .iter()
                .filter(|(m, role)| matches!(role, Role::Library) && m.ident == name);
            match (matches.next(), matches.next()) {
                (Some((m, _)), None) => Ok(m.clone()),
                (None, _) => Err(format!("no library module is named `{name}`")),
                (Some(_), Some(_)) => Err(format!("several library modules are named `{name}`")),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(args: &str) -> syn::Result<Role> {
        parse_role(args.parse().expect("test tokens lex"))
    }

    #[test]
    fn reads_the_three_forms_and_refuses_the_rest() {
        assert!(matches!(role(""), Ok(Role::Model { uses, .. }) if uses.is_empty()));
        assert!(matches!(role("library"), Ok(Role::Library)));
        let Ok(Role::Model { uses, .. }) = role("uses(layers, crate::nn::blocks)") else {
            panic!("uses(..) should parse");
        };
        let names: Vec<String> = uses
            .iter()
            .map(|p| quote::quote!(#p).to_string().replace(' ', ""))
            .collect();
        assert_eq!(names, ["layers", "crate::nn::blocks"]);
        for bad in [
            "uses()",
            "librar",
            "uses(1)",
            "library, uses(a)",
            "uses(a, b, a)",
            "uses = a",
        ] {
            assert!(role(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn finds_modules_and_their_libraries_by_name() {
        let file: syn::File = syn::parse_str(
            "#[fused_model(uses(crate::nn::layers))] mod a {} \
             mod nn { #[fuse_runtime::fused_model(library)] pub mod layers {} #[other] mod c {} } \
             #[fused_model(library)] mod twin {} mod elsewhere { #[fused_model(library)] mod twin {} }",
        )
        .expect("test source parses");
        let modules = fused_modules(&file.items);
        let names: Vec<String> = modules.iter().map(|(m, _)| m.ident.to_string()).collect();
        assert_eq!(names, ["a", "layers", "twin", "twin"]);
        let Role::Model { uses, .. } = &modules[0].1 else {
            panic!("`a` is a model");
        };
        let found = find_libraries(uses, &modules).expect("layers is found");
        assert_eq!(found[0].ident, "layers");
        let path = |p: &str| vec![syn::parse_str::<syn::Path>(p).expect("path parses")];
        assert!(find_libraries(&path("twin"), &modules)
            .unwrap_err()
            .contains("several"));
        assert!(find_libraries(&path("a"), &modules)
            .unwrap_err()
            .contains("no library"));
    }
}
