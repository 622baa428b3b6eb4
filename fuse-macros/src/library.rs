//! Libraries of sub-models shared between `#[fused_model]` modules.
//!
//! A library expands to its constants plus a `macro_rules!` that appends the library's own tokens to whatever it
//! is given and calls `__fused_model_with!`. A model with `uses(a, b)` expands to `a::__fuse_library!{ [b]
//! [model] }`, which becomes `__fused_model_with!{ [b] [model] [a's module] }`, which calls `b`'s macro, and so
//! on; with no library left, the model is expanded with every library's source. The tokens keep their spans, so
//! an error in a library's code points into the library.

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use quote::quote;
use syn::punctuated::Punctuated;

use fuse_kernels::contract::Contract;
use fuse_kernels::front::{check_library, library_macro_name, parse_role, Role};

/// `#[fused_model(library)]`: the library's constants and its hand-over macro; its structs become part of the
/// models that use it.
pub fn expand_library(module: &syn::ItemMod) -> TokenStream {
    let errors = check_library(module).err().map(|e| e.into_compile_error());
    let consts = crate::expand::kept_items(module);
    let name = library_macro_name(&module.ident);
    crate::expand::replace_module(
        module,
        quote! {
            #errors
            #(#consts)*
            #[doc(hidden)]
            #[allow(unused_macros)]
            macro_rules! #name {
                ($($acc:tt)*) => { ::fuse_runtime::__fused_model_with! { $($acc)* [#module] } };
            }
            #[doc(hidden)]
            #[allow(unused_imports)]
            pub(crate) use #name as __fuse_library;
        },
    )
}

/// Hands the model to the first library of `uses`, which appends its source and passes on the rest. `args` (the
/// model's attribute arguments, its contract among them) travel along, read again when the last library is in.
pub fn collect_libraries(
    uses: &[syn::Path],
    args: &TokenStream,
    module: &syn::ItemMod,
    libraries: &[syn::ItemMod],
) -> TokenStream {
    let Some((first, rest)) = uses.split_first() else {
        let contract = match parse_role(args.clone()) {
            Ok(Role::Model { contract, .. }) => contract,
            Ok(Role::Library) => Contract::default(),
            Err(e) => return e.into_compile_error(),
        };
        return crate::expand::expand(module, libraries, &contract);
    };
    quote! {
        #first::__fuse_library! { [#(#rest),*] [#args] [#module] #([#libraries])* }
    }
}

/// `__fused_model_with!{ [remaining uses] [model attribute arguments] [model module] [library]* }`.
pub fn continue_with(input: TokenStream) -> TokenStream {
    match parse_handover(input) {
        Ok((uses, args, module, libraries)) => collect_libraries(&uses, &args, &module, &libraries),
        Err(e) => e.into_compile_error(),
    }
}

/// What a hand-over carries: the libraries still to collect, the model's attribute arguments, the model, the
/// libraries collected.
type Handover = (Vec<syn::Path>, TokenStream, syn::ItemMod, Vec<syn::ItemMod>);

/// The bracketed groups of a hand-over.
fn parse_handover(input: TokenStream) -> syn::Result<Handover> {
    let groups: Vec<TokenStream> = input
        .into_iter()
        .filter_map(|t| match t {
            TokenTree::Group(g) if g.delimiter() == Delimiter::Bracket => Some(g.stream()),
            _ => None,
        })
        .collect();
    let [uses, args, module, libraries @ ..] = groups.as_slice() else {
        return Err(syn::Error::new(
            proc_macro2::Span::call_site(),
            "__fused_model_with! is internal to #[fused_model(uses(..))]",
        ));
    };
    let uses = syn::parse::Parser::parse2(
        Punctuated::<syn::Path, syn::Token![,]>::parse_terminated,
        uses.clone(),
    )?;
    let module: syn::ItemMod = syn::parse2(module.clone())?;
    let libraries = libraries
        .iter()
        .map(|l| syn::parse2(l.clone()))
        .collect::<syn::Result<Vec<syn::ItemMod>>>()?;
    Ok((uses.into_iter().collect(), args.clone(), module, libraries))
}
