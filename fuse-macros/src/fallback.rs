//! When a model does not compile: the errors, plus a stub of each root model with the same API as the real
//! expansion (`expand.rs`), so code that uses the model type-checks and the user sees only the real errors
//! (thiserror's `fallback.rs` does the same). Keep the two in step: a method missing here turns one error into
//! several.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

/// The `impl Model { fn forward .. }` of `model`, if any.
fn forward_fn<'m>(module: &'m syn::ItemMod, model: &syn::Ident) -> Option<&'m syn::ImplItemFn> {
    let (_, items) = module.content.as_ref()?;
    items.iter().find_map(|item| match item {
        syn::Item::Impl(imp) if imp.trait_.is_none() => match imp.self_ty.as_ref() {
            syn::Type::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == *model) => {
                imp.items.iter().find_map(|i| match i {
                    syn::ImplItem::Fn(f) if f.sig.ident == "forward" => Some(f),
                    _ => None,
                })
            }
            _ => None,
        },
        _ => None,
    })
}

/// How many tensors `forward` returns, read from its signature: a tuple of n gives n, anything else one.
fn output_count(forward: &syn::ImplItemFn) -> usize {
    match &forward.sig.output {
        syn::ReturnType::Type(_, ty) => match ty.as_ref() {
            syn::Type::Tuple(t) if !t.elems.is_empty() => t.elems.len(),
            _ => 1,
        },
        syn::ReturnType::Default => 1,
    }
}

/// Structs the stub stands in for: the roots the compiler found, plus any struct of the module that no other
/// struct uses as a field (a struct the compiler could not read is still a name the user's code refers to).
fn stub_names(module: &syn::ItemMod, roots: &[syn::Ident]) -> Vec<syn::Ident> {
    let Some((_, items)) = &module.content else {
        return roots.to_vec();
    };
    let structs: Vec<&syn::ItemStruct> = items
        .iter()
        .filter_map(|i| match i {
            syn::Item::Struct(s) => Some(s),
            _ => None,
        })
        .collect();
    let mut used = Vec::new();
    for s in &structs {
        for field in &s.fields {
            let mut ty = &field.ty;
            while let syn::Type::Array(a) = ty {
                ty = &a.elem;
            }
            if let syn::Type::Path(p) = ty {
                if let Some(seg) = p.path.segments.last() {
                    used.push(seg.ident.to_string());
                }
            }
        }
    }
    let mut names: Vec<syn::Ident> = roots.to_vec();
    for s in structs {
        if !used.contains(&s.ident.to_string()) {
            names.push(s.ident.clone());
        }
    }
    let mut seen = Vec::new();
    names.retain(|n| {
        let key = n.to_string();
        let fresh = !seen.contains(&key);
        seen.push(key);
        fresh
    });
    names
}

fn stub_model(module: &syn::ItemMod, name: &syn::Ident) -> TokenStream {
    let forward = forward_fn(module, name);
    // The stub keeps `forward`'s signature, so calls to it raise no errors of their own: a `#[dim]` argument is a
    // `usize`, any other a tensor.
    let args: Vec<TokenStream> = forward
        .map(|f| {
            f.sig
                .inputs
                .iter()
                .filter_map(|a| match a {
                    syn::FnArg::Typed(pt) => Some(pt),
                    syn::FnArg::Receiver(_) => None,
                })
                .enumerate()
                .map(|(i, pt)| {
                    let name = format_ident!("_input{}", i);
                    if pt.attrs.iter().any(|a| a.path().is_ident("dim")) {
                        quote!(#name: usize)
                    } else {
                        quote!(#name: &::fuse_runtime::Tensor)
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    // A model with `#[state]` fields (anywhere in the module) takes the caller's session first.
    let (session_param, session_fn) = if has_state_field(module) {
        (
            quote!(session: &mut ::fuse_runtime::Session,),
            quote! {
                pub fn session(&self, sizes: &[(&str, usize)]) -> ::fuse_runtime::Result<::fuse_runtime::Session> {
                    ::core::unimplemented!("model did not compile")
                }
            },
        )
    } else {
        (quote!(), quote!())
    };
    let outputs = forward.map_or(1, output_count);
    let tensor = quote!(::fuse_runtime::Tensor);
    let ret = if outputs == 1 {
        tensor.clone()
    } else {
        let tys = (0..outputs).map(|_| &tensor);
        quote!((#(#tys),*))
    };
    let message = format!("model `{name}` did not compile");
    let fail = quote!(::core::unimplemented!(#message));
    quote! {
        #[allow(dead_code)]
        pub struct #name {
            _not_compiled: (),
        }

        #[allow(unused_variables, dead_code, clippy::all)]
        impl #name {
            pub const PLAN_HASH: u64 = 0;
            pub fn load(path: impl ::std::convert::AsRef<::std::path::Path>) -> ::fuse_runtime::Result<Self> {
                #fail
            }
            pub fn random(seed: u64) -> Self {
                #fail
            }
            pub fn try_random(seed: u64) -> ::fuse_runtime::Result<Self> {
                #fail
            }
            pub fn from_weights(weights: ::std::vec::Vec<::fuse_runtime::Tensor>) -> ::fuse_runtime::Result<Self> {
                #fail
            }
            pub fn load_in(path: impl ::std::convert::AsRef<::std::path::Path>, precision: ::fuse_runtime::CpuPrecision) -> ::fuse_runtime::Result<Self> {
                #fail
            }
            pub fn from_weights_in(weights: ::std::vec::Vec<::fuse_runtime::Tensor>, precision: ::fuse_runtime::CpuPrecision) -> ::fuse_runtime::Result<Self> {
                #fail
            }
            pub fn with_cpu_precision(self, precision: ::fuse_runtime::CpuPrecision) -> ::fuse_runtime::Result<Self> {
                #fail
            }
            #session_fn
            pub fn forward(&self, #session_param #(#args),*) -> ::fuse_runtime::Result<#ret> {
                #fail
            }
            pub fn forward_eager(&self, #session_param #(#args),*) -> ::fuse_runtime::Result<#ret> {
                #fail
            }
            pub fn forward_with(&self, mode: ::fuse_runtime::PlanMode, #session_param #(#args),*) -> ::fuse_runtime::Result<#ret> {
                #fail
            }
            pub fn plan(&self) -> ::fuse_runtime::PlanReport {
                #fail
            }
            pub fn eager_plan(&self) -> ::fuse_runtime::PlanReport {
                #fail
            }
            pub fn spec() -> &'static ::fuse_runtime::ModelSpec {
                #fail
            }
            pub fn weights(&self) -> ::fuse_runtime::Result<&[::fuse_runtime::Tensor]> {
                #fail
            }
            pub fn compiled(&self) -> &::fuse_runtime::CompiledModel {
                #fail
            }
            pub fn into_compiled(self) -> ::fuse_runtime::CompiledModel {
                #fail
            }
        }
    }
}

/// Whether any struct of the module has a `#[state]` field.
fn has_state_field(module: &syn::ItemMod) -> bool {
    let Some((_, items)) = &module.content else {
        return false;
    };
    items.iter().any(|item| match item {
        syn::Item::Struct(s) => s
            .fields
            .iter()
            .any(|f| f.attrs.iter().any(|a| a.path().is_ident("state"))),
        _ => false,
    })
}

/// `expand` (one model's expansion), or, if it panics, an error at the model's name and the model's stub. A panic
/// there is a bug of fuse's (a planner or writer assertion), never the model's: rustc would show it as "custom
/// attribute panicked" at the attribute, with the message of an index or an assertion deep in the compiler. The
/// user gets the model it happened in, the message, and what to do.
pub fn guarded(
    module: &syn::ItemMod,
    model: &syn::Ident,
    expand: impl FnOnce() -> TokenStream,
) -> TokenStream {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(expand)) {
        Ok(tokens) => tokens,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".into());
            let error = syn::Error::new(
                model.span(),
                format!(
                    "fuse: internal error while compiling model `{model}`: {message}\n\
                     This is a bug in fuse, not in the model: please report it with the model's source \
                     (the panic's place in fuse is printed above)."
                ),
            )
            .into_compile_error();
            let stub = stub_model(module, model);
            quote!(#error #stub)
        }
    }
}

pub fn stub(module: &syn::ItemMod, roots: &[syn::Ident], errors: syn::Error) -> TokenStream {
    let errors = errors.into_compile_error();
    let consts = crate::expand::kept_items(module);
    let models = stub_names(module, roots)
        .into_iter()
        .map(|name| stub_model(module, &name));
    crate::expand::replace_module(module, quote!(#errors #(#consts)* #(#models)*))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic in a model's expansion becomes a compile error naming the model and carrying the message, beside
    /// the model's stub; an expansion that does not panic passes through untouched.
    #[test]
    fn a_panicking_expansion_becomes_a_compile_error_and_a_stub() {
        let module: syn::ItemMod = syn::parse_quote! {
            mod m {
                pub struct Tiny {}
                impl Tiny {
                    pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor { x * 2.0 }
                }
            }
        };
        let name: syn::Ident = syn::parse_quote!(Tiny);
        let passed = guarded(&module, &name, || {
            quote!(
                struct Fine;
            )
        });
        assert_eq!(
            passed.to_string(),
            quote!(
                struct Fine;
            )
            .to_string()
        );
        let caught = guarded(&module, &name, || {
            panic!("index out of bounds: the len is 4")
        });
        let formatted = guarded(&module, &name, || panic!("{} kernels", 3));
        let text = caught.to_string();
        assert!(text.contains("compile_error"), "{text}");
        assert!(
            text.contains("internal error while compiling model `Tiny`: index out of bounds"),
            "{text}"
        );
        assert!(text.contains("struct Tiny"), "no stub: {text}");
        assert!(formatted.to_string().contains("3 kernels"));
    }
}
