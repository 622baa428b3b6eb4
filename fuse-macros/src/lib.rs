//! `#[fused_model]`: parse the module, hand it to the compiler (`fuse-kernels`), expand the result. All the work
//! is in `expand`; errors come back as spanned compile errors with a stub model beside them (`fallback`).

mod expand;
mod fallback;

use proc_macro::TokenStream;

/// Compiles the models of an inline module at build time. See the README for the model language.
#[proc_macro_attribute]
pub fn fused_model(args: TokenStream, input: TokenStream) -> TokenStream {
    let args = proc_macro2::TokenStream::from(args);
    if !args.is_empty() {
        return syn::Error::new_spanned(args, "#[fused_model] takes no arguments")
            .into_compile_error()
            .into();
    }
    match syn::parse::<syn::ItemMod>(input) {
        Ok(module) => expand::expand(&module).into(),
        Err(e) => e.into_compile_error().into(),
    }
}
