//! Collects every error of a build so a user with three mistakes sees three messages, each on their own tokens.
//!
//! An error points at a range of the user's tokens ([`At`]): a proc macro on stable Rust cannot join two spans
//! into one, but `compile_error!` spanned from a first to a last token underlines everything between them, which
//! is what `syn::Error::new_spanned` does. So `At` keeps the first and last token's span, not a joined span.

use std::collections::BTreeSet;

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::ToTokens;

/// Where an error points: from the first to the last token of some user code.
#[derive(Clone, Copy, Debug)]
pub struct At {
    pub start: Span,
    pub end: Span,
}

impl At {
    /// Everything `tokens` covers.
    pub fn of(tokens: &(impl ToTokens + ?Sized)) -> At {
        let mut iter = tokens.to_token_stream().into_iter();
        let start = iter.next().map_or_else(Span::call_site, |t| t.span());
        let end = iter.last().map_or(start, |t| t.span());
        At { start, end }
    }

    /// From the start of `first` to the end of `last`.
    pub fn range(first: &(impl ToTokens + ?Sized), last: &(impl ToTokens + ?Sized)) -> At {
        At {
            start: At::of(first).start,
            end: At::of(last).end,
        }
    }

    /// From the start of `first` to the token spanned by `end` (a closing delimiter).
    pub fn until(first: &(impl ToTokens + ?Sized), end: Span) -> At {
        At {
            start: At::of(first).start,
            end,
        }
    }

    pub fn token(span: Span) -> At {
        At {
            start: span,
            end: span,
        }
    }

    /// Two tokens carrying the start and end spans: `new_spanned` on them covers the whole range.
    fn tokens(self) -> TokenStream {
        let mut open = proc_macro2::Punct::new('<', proc_macro2::Spacing::Alone);
        open.set_span(self.start);
        let mut close = proc_macro2::Punct::new('>', proc_macro2::Spacing::Alone);
        close.set_span(self.end);
        [TokenTree::Punct(open), TokenTree::Punct(close)]
            .into_iter()
            .collect()
    }

    /// A key for "the same place": spans have no `Eq`, but their `Debug` form names the byte range.
    fn key(&self) -> String {
        format!("{:?}..{:?}", self.start, self.end)
    }
}

impl From<Span> for At {
    fn from(span: Span) -> At {
        At::token(span)
    }
}

#[derive(Default)]
pub struct Diagnostics {
    errors: Vec<syn::Error>,
    /// (place, message) of each error, to drop repeats: a sub-model inlined at many call sites would otherwise
    /// report the same mistake once per call.
    seen: BTreeSet<(String, String)>,
}

/// Past this many errors the rest are dropped: they are almost always consequences of the first ones.
const MAX_ERRORS: usize = 100;

impl Diagnostics {
    pub fn error(&mut self, at: impl Into<At>, message: impl std::fmt::Display) {
        let at = at.into();
        let message = message.to_string();
        if self.errors.len() >= MAX_ERRORS || !self.seen.insert((at.key(), message.clone())) {
            return;
        }
        self.errors
            .push(syn::Error::new_spanned(at.tokens(), message));
    }

    /// An error on everything `tokens` covers.
    pub fn error_at(&mut self, tokens: &(impl ToTokens + ?Sized), message: impl std::fmt::Display) {
        self.error(At::of(tokens), message);
    }

    /// An error produced elsewhere (`syn`'s parsers, constant evaluation); each of its parts keeps its span.
    pub fn push(&mut self, err: syn::Error) {
        for e in err {
            let key = (At::token(e.span()).key(), e.to_string());
            if self.errors.len() < MAX_ERRORS && self.seen.insert(key) {
                self.errors.push(e);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }

    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// All errors as one `syn::Error` (each keeps its own span), or `Ok` if there were none.
    pub fn finish(self) -> Result<(), syn::Error> {
        let mut iter = self.errors.into_iter();
        let Some(mut first) = iter.next() else {
            return Ok(());
        };
        for e in iter {
            first.combine(e);
        }
        Err(first)
    }
}
