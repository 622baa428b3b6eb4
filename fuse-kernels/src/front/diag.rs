//! Collects every error of a build so a user with three mistakes sees three messages, each on their own token.

use proc_macro2::Span;

#[derive(Default)]
pub struct Diagnostics {
    errors: Vec<syn::Error>,
}

impl Diagnostics {
    pub fn error(&mut self, span: Span, message: impl std::fmt::Display) {
        self.errors.push(syn::Error::new(span, message));
    }

    pub fn push(&mut self, err: syn::Error) {
        self.errors.push(err);
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
