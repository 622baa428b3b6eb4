//! Performance contracts: limits a model states in its attribute, `#[fused_model(max_kernels = 11, max_arena =
//! "12 MiB", at(batch = 8, seq = 128))]`, and `.fused()` promises on expressions of `forward` (recorded by the
//! front end as [`crate::ir::FusedPromise`]s). [`check`] holds a fused [`Plan`](crate::plan::Plan) to both and
//! turns a broken one into a compile error on the line of `forward` responsible, with the planner's reason and
//! what to write instead. A contract that holds leaves no trace in the generated code.

mod check;
mod size;

pub use check::check;
pub use size::{format_bytes, parse_bytes};

use proc_macro2::TokenStream;
use quote::ToTokens;

/// The limits of one `#[fused_model(..)]` module; each applies to every model of the module.
#[derive(Clone, Debug, Default)]
pub struct Contract {
    /// At most this many kernels in the fused plan.
    pub max_kernels: Option<Limit>,
    /// At most this many bytes of arena (intermediate values) at the dims of `at`.
    pub max_arena: Option<Limit>,
    /// Sizes of dynamic dims for the limits that depend on them.
    pub at: Vec<DimSize>,
}

/// One limit, with the tokens that stated it (for errors that point at the attribute).
#[derive(Clone, Debug)]
pub struct Limit {
    pub value: usize,
    pub tokens: TokenStream,
}

/// `batch = 8` inside `at(..)`.
#[derive(Clone, Debug)]
pub struct DimSize {
    pub name: syn::Ident,
    pub size: usize,
}

impl Contract {
    pub fn is_empty(&self) -> bool {
        self.max_kernels.is_none() && self.max_arena.is_none() && self.at.is_empty()
    }

    /// Reads one argument of the attribute into the contract. `Ok(false)`: not a contract argument at all.
    pub fn parse_item(&mut self, meta: &syn::Meta) -> syn::Result<bool> {
        match meta {
            syn::Meta::NameValue(nv) if nv.path.is_ident("max_kernels") => {
                let value =
                    match &nv.value {
                        syn::Expr::Lit(syn::ExprLit {
                            lit: syn::Lit::Int(n),
                            ..
                        }) => n.base10_parse::<usize>()?,
                        other => return Err(syn::Error::new_spanned(
                            other,
                            "`max_kernels` is a whole number of kernels, e.g. `max_kernels = 11`",
                        )),
                    };
                set_once(&mut self.max_kernels, meta, value)?;
                Ok(true)
            }
            syn::Meta::NameValue(nv) if nv.path.is_ident("max_arena") => {
                let value = match &nv.value {
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s),
                        ..
                    }) => parse_bytes(&s.value()).map_err(|why| syn::Error::new_spanned(s, why))?,
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Int(n),
                        ..
                    }) => n.base10_parse::<usize>()?,
                    other => {
                        return Err(syn::Error::new_spanned(
                            other,
                            "`max_arena` is a size, e.g. `max_arena = \"12 MiB\"` (B, KiB, MiB, GiB, KB, MB, GB) \
                             or a number of bytes",
                        ))
                    }
                };
                set_once(&mut self.max_arena, meta, value)?;
                Ok(true)
            }
            syn::Meta::List(list) if list.path.is_ident("at") => {
                if !self.at.is_empty() {
                    return Err(syn::Error::new_spanned(list, "`at(..)` is given twice"));
                }
                self.at = parse_at(list)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// The size `at(..)` gives the dynamic dim `name`.
    pub fn size_of(&self, name: &str) -> Option<usize> {
        self.at.iter().find(|d| d.name == name).map(|d| d.size)
    }
}

fn set_once(slot: &mut Option<Limit>, meta: &syn::Meta, value: usize) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new_spanned(meta, "this limit is given twice"));
    }
    *slot = Some(Limit {
        value,
        tokens: meta.to_token_stream(),
    });
    Ok(())
}

const AT_USAGE: &str = "`at(..)` gives sizes of dynamic dims, e.g. `at(batch = 8, seq = 128)`";

fn parse_at(list: &syn::MetaList) -> syn::Result<Vec<DimSize>> {
    use syn::parse::Parser;
    let items = syn::punctuated::Punctuated::<syn::MetaNameValue, syn::Token![,]>::parse_terminated
        .parse2(list.tokens.clone())
        .map_err(|_| syn::Error::new_spanned(list, AT_USAGE))?;
    if items.is_empty() {
        return Err(syn::Error::new_spanned(list, AT_USAGE));
    }
    let mut dims: Vec<DimSize> = Vec::new();
    for item in items {
        let Some(name) = item.path.get_ident().cloned() else {
            return Err(syn::Error::new_spanned(&item.path, AT_USAGE));
        };
        let size = match &item.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Int(n),
                ..
            }) => n.base10_parse::<usize>()?,
            other => return Err(syn::Error::new_spanned(other, AT_USAGE)),
        };
        if dims.iter().any(|d| d.name == name) {
            return Err(syn::Error::new_spanned(
                &name,
                "this dim is given twice in `at(..)`",
            ));
        }
        dims.push(DimSize { name, size });
    }
    Ok(dims)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contract(args: &str) -> syn::Result<Contract> {
        let metas: syn::punctuated::Punctuated<syn::Meta, syn::Token![,]> =
            syn::parse::Parser::parse_str(syn::punctuated::Punctuated::parse_terminated, args)?;
        let mut c = Contract::default();
        for m in &metas {
            if !c.parse_item(m)? {
                return Err(syn::Error::new_spanned(m, "not a contract"));
            }
        }
        Ok(c)
    }

    #[test]
    fn reads_limits_and_dims() {
        let c = contract(r#"max_kernels = 11, max_arena = "12 MiB", at(batch = 8, seq = 128)"#)
            .expect("a full contract parses");
        assert_eq!(c.max_kernels.as_ref().map(|l| l.value), Some(11));
        assert_eq!(c.max_arena.as_ref().map(|l| l.value), Some(12 << 20));
        assert_eq!(c.size_of("seq"), Some(128));
        assert_eq!(c.size_of("heads"), None);
        assert_eq!(
            contract("max_arena = 4096")
                .ok()
                .and_then(|c| c.max_arena)
                .map(|l| l.value),
            Some(4096)
        );
        for bad in [
            "max_kernels = \"11\"",
            "max_kernels = 1, max_kernels = 2",
            "max_arena = \"12 parsecs\"",
            "at()",
            "at(batch = 8, batch = 9)",
            "at(batch = x)",
        ] {
            assert!(contract(bad).is_err(), "{bad} should be refused");
        }
    }
}
