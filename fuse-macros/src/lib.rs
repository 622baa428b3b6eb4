//! `#[fused_model]`: parse the module, hand it to the compiler (`fuse-kernels`), expand the result. All the work
//! is in `expand`; errors come back as spanned compile errors with a stub model beside them (`fallback`).

mod expand;
mod fallback;
mod library;

use proc_macro::TokenStream;

use fuse_kernels::front::{parse_role, Role};

/// Compiles the models of an inline module at build time. See the README for the model language.
///
/// `#[fused_model(library)]` marks a module of sub-models that other modules' models use;
/// `#[fused_model(uses(layers, ..))]` is a model module that uses them. A model module may also state a
/// contract, `max_kernels = 11, max_arena = "12 MiB", at(batch = 8, seq = 128)`, checked at compile time.
#[proc_macro_attribute]
pub fn fused_model(args: TokenStream, input: TokenStream) -> TokenStream {
    let args: proc_macro2::TokenStream = args.into();
    let role = match parse_role(args.clone()) {
        Ok(role) => role,
        Err(e) => return e.into_compile_error().into(),
    };
    let module = match syn::parse::<syn::ItemMod>(input) {
        Ok(module) => module,
        Err(e) => return e.into_compile_error().into(),
    };
    match role {
        Role::Library => library::expand_library(&module).into(),
        Role::Model { uses, .. } => library::collect_libraries(&uses, &args, &module, &[]).into(),
    }
}

/// The second half of `#[fused_model(uses(..))]`, called by each library's hand-over macro in turn (see
/// `fuse_kernels::front::Role`). Not for direct use.
#[doc(hidden)]
#[proc_macro]
pub fn __fused_model_with(input: TokenStream) -> TokenStream {
    library::continue_with(input.into()).into()
}
