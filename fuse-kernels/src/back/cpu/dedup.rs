//! One function per distinct kernel. The layers of a transformer are the same kernels on other buffers: their
//! bodies differ only in the node ids inside local names (`buf12` vs `buf87`), since buffers come from the launch's
//! table. Renumbering those names by first appearance gives each kernel a canonical body; kernels with the same
//! canonical body share one function, as the CUDA writer shares one `__global__` between kernels whose code is
//! the same (`back::cuda::shared_kernels`), so the generated Rust grows with distinct kernels, not with depth.

use std::collections::BTreeMap;

use proc_macro2::{Group, Ident, TokenStream, TokenTree};

use super::expr::VAR_PREFIXES;

/// `body` with every name made by [`super::expr::var`] renumbered: the first node id met becomes 0, the next 1,
/// and so on, the same number for every prefix of one node (`buf12`, `off12` → `buf0`, `off0`). A bijection on
/// the ids, so the canonical body computes exactly what `body` does.
pub fn canonical(body: TokenStream) -> TokenStream {
    let mut numbers = BTreeMap::new();
    renumber(body, &mut numbers)
}

fn renumber(tokens: TokenStream, numbers: &mut BTreeMap<String, usize>) -> TokenStream {
    tokens
        .into_iter()
        .map(|tree| match tree {
            TokenTree::Group(g) => {
                let mut inner = Group::new(g.delimiter(), renumber(g.stream(), numbers));
                inner.set_span(g.span());
                TokenTree::Group(inner)
            }
            TokenTree::Ident(ident) => match split_var(&ident.to_string()) {
                Some((prefix, id)) => {
                    let next = numbers.len();
                    let n = *numbers.entry(id.to_string()).or_insert(next);
                    TokenTree::Ident(Ident::new(&format!("{prefix}{n}"), ident.span()))
                }
                None => TokenTree::Ident(ident),
            },
            other => other,
        })
        .collect()
}

/// `("buf", "12")` for `buf12`: a registered prefix followed by digits only.
fn split_var(name: &str) -> Option<(&str, &str)> {
    let digits = name.trim_start_matches(|c: char| !c.is_ascii_digit());
    let prefix = &name[..name.len() - digits.len()];
    let is_var = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && VAR_PREFIXES.contains(&prefix);
    is_var.then_some((prefix, digits))
}

/// Groups kernels by canonical body: for each kernel, the index of its function among the distinct bodies, and
/// the distinct bodies in order of first use.
pub fn distinct(bodies: Vec<TokenStream>) -> (Vec<usize>, Vec<(usize, TokenStream)>) {
    let mut index_of: BTreeMap<String, usize> = BTreeMap::new();
    let mut functions = Vec::new();
    let mut which = Vec::with_capacity(bodies.len());
    for (kernel, body) in bodies.into_iter().enumerate() {
        let text = body.to_string();
        let next = functions.len();
        let f = *index_of.entry(text).or_insert(next);
        if f == next {
            functions.push((kernel, body));
        }
        which.push(f);
    }
    (which, functions)
}

#[cfg(test)]
mod tests {
    use quote::quote;

    use super::*;

    #[test]
    fn renames_only_node_variables_and_consistently() {
        let a =
            canonical(quote!(let buf12 = x[i0]; let off12 = 1; let v40 = buf12[off12] + row0; a7));
        let b = canonical(quote!(let buf3 = x[i0]; let off3 = 1; let v9 = buf3[off3] + row0; a8));
        assert_eq!(a.to_string(), b.to_string());
        assert_eq!(
            a.to_string(),
            quote!(let buf0 = x[i0]; let off0 = 1; let v1 = buf0[off0] + row0; a2).to_string()
        );
    }

    #[test]
    fn different_structure_stays_different() {
        // The second adds one value to itself: not the same computation.
        let a = canonical(quote!(let v1 = x2 + x3;));
        let b = canonical(quote!(let v1 = x2 + x2;));
        assert_ne!(a.to_string(), b.to_string());
        let (which, functions) = distinct(vec![a.clone(), b, a]);
        assert_eq!(which, vec![0, 1, 0]);
        assert_eq!(functions.len(), 2);
    }
}
