//! When a model does not compile: the errors, plus a stub of each root model with the same API, so code that uses
//! the model type-checks and the user sees only the real errors (thiserror's `fallback.rs` does the same).

use proc_macro2::TokenStream;
use quote::{format_ident, quote};

fn forward_arity(module: &syn::ItemMod, model: &syn::Ident) -> usize {
    let Some((_, items)) = &module.content else {
        return 0;
    };
    items
        .iter()
        .find_map(|item| match item {
            syn::Item::Impl(imp) => match imp.self_ty.as_ref() {
                syn::Type::Path(p) if p.path.is_ident(model) => imp.items.iter().find_map(|i| match i {
                    syn::ImplItem::Fn(f) if f.sig.ident == "forward" => Some(
                        f.sig
                            .inputs
                            .iter()
                            .filter(|a| matches!(a, syn::FnArg::Typed(_)))
                            .count(),
                    ),
                    _ => None,
                }),
                _ => None,
            },
            _ => None,
        })
        .unwrap_or(0)
}

pub fn stub(module: &syn::ItemMod, roots: &[syn::Ident], errors: syn::Error) -> TokenStream {
    let errors = errors.into_compile_error();
    let consts = crate::expand::kept_items(module);
    let models = roots.iter().map(|name| {
        let args: Vec<syn::Ident> = (0..forward_arity(module, name)).map(|i| format_ident!("_input{}", i)).collect();
        quote! {
            pub struct #name {
                _not_compiled: (),
            }
            #[allow(unused_variables, clippy::all)]
            impl #name {
                pub const PLAN_HASH: u64 = 0;
                pub fn load(path: impl ::std::convert::AsRef<::std::path::Path>) -> ::fuse_runtime::Result<Self> {
                    unimplemented!("model did not compile")
                }
                pub fn random(seed: u64) -> Self {
                    unimplemented!("model did not compile")
                }
                pub fn forward(&self, #(#args: &::fuse_runtime::Tensor),*) -> ::fuse_runtime::Result<::fuse_runtime::Tensor> {
                    unimplemented!("model did not compile")
                }
                pub fn forward_eager(&self, #(#args: &::fuse_runtime::Tensor),*) -> ::fuse_runtime::Result<::fuse_runtime::Tensor> {
                    unimplemented!("model did not compile")
                }
                pub fn plan(&self) -> ::fuse_runtime::PlanReport {
                    unimplemented!("model did not compile")
                }
                pub fn eager_plan(&self) -> ::fuse_runtime::PlanReport {
                    unimplemented!("model did not compile")
                }
            }
        }
    });
    let attrs = &module.attrs;
    let vis = &module.vis;
    let ident = &module.ident;
    quote! {
        #(#attrs)*
        #vis mod #ident {
            #errors
            #(#consts)*
            #(#models)*
        }
    }
}
