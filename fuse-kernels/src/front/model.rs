//! Reads the items of a `#[fused_model] mod`: constants, model structs (tensor fields with `#[shape]`, sub-model
//! fields, arrays of sub-models) and the `impl` blocks whose methods `forward` may call.

use std::collections::{BTreeMap, BTreeSet};

use syn::spanned::Spanned;

use super::consts::{check_declared_type, eval_const, ConstError, ConstVal, ModuleConsts};
use super::diag::{At, Diagnostics};
use crate::ir::DType;

/// A struct of the model with its fields.
pub struct StructDef {
    pub name: syn::Ident,
    /// Names of its `const N: usize` generics, in order.
    pub const_generics: Vec<String>,
    pub fields: Vec<FieldDef>,
    /// Fields already reported and left out (bad type, missing shape); uses of them stay silent.
    pub dropped_fields: Vec<String>,
    /// The `#[fused_model(library)]` module it comes from; `None` for the model's own module.
    pub library: Option<String>,
}

pub struct FieldDef {
    pub name: syn::Ident,
    /// Checkpoint name of this path segment (the field name unless `#[rename("...")]`).
    pub checkpoint_name: String,
    pub kind: FieldKind,
}

pub enum FieldKind {
    /// A parameter tensor: dims are const expressions of the struct's generics and the module's consts. With
    /// `#[state]`, a buffer the caller's session owns instead (its dims may name dynamic dims, bound when the
    /// session is made), which `forward` reads and may `write` in place.
    Tensor {
        dtype: DType,
        shape: Vec<syn::Expr>,
        state: bool,
    },
    /// A sub-model with its const generic arguments.
    Model {
        ty: syn::Ident,
        args: Vec<syn::Expr>,
    },
    /// `[SubModel; N]`.
    Models {
        ty: syn::Ident,
        args: Vec<syn::Expr>,
        len: Box<syn::Expr>,
    },
}

/// Everything the lowering needs from the module.
pub struct ModelSource {
    pub consts: BTreeMap<String, ConstVal>,
    pub structs: Vec<StructDef>,
    /// Methods by (struct name, method name).
    pub methods: BTreeMap<(String, String), syn::ImplItemFn>,
    /// Names of items already reported (a static, a free function, a const that failed to evaluate): uses of
    /// them in `forward` stay silent instead of adding "cannot find" errors.
    pub rejected: BTreeSet<String>,
}

impl ModelSource {
    /// The module's constants, for [`eval_const`].
    pub fn module_consts(&self) -> ModuleConsts<'_> {
        ModuleConsts {
            values: &self.consts,
            rejected: &self.rejected,
        }
    }

    pub fn struct_def(&self, name: &str) -> Option<(usize, &StructDef)> {
        self.structs
            .iter()
            .enumerate()
            .find(|(_, s)| s.name == name)
    }

    /// The module's own structs that no other struct uses as a field: each is a compiled model. (A library's
    /// structs are building blocks, never models of their own.)
    pub fn roots(&self) -> Vec<usize> {
        let used: Vec<String> = self
            .structs
            .iter()
            .flat_map(|s| s.fields.iter())
            .filter_map(|f| match &f.kind {
                FieldKind::Model { ty, .. } | FieldKind::Models { ty, .. } => Some(ty.to_string()),
                FieldKind::Tensor { .. } => None,
            })
            .collect();
        (0..self.structs.len())
            .filter(|&i| self.structs[i].library.is_none())
            .filter(|&i| !used.contains(&self.structs[i].name.to_string()))
            .collect()
    }
}

/// Parses the items of the module and of the libraries it uses (`#[fused_model(uses(..))]`); errors go to
/// `diags` and the item is skipped. Libraries are read first, so a name the module redefines is reported on the
/// module's own item.
pub fn read_module(
    module: &syn::ItemMod,
    libraries: &[syn::ItemMod],
    diags: &mut Diagnostics,
) -> ModelSource {
    let mut source = ModelSource {
        consts: BTreeMap::new(),
        structs: Vec::new(),
        methods: BTreeMap::new(),
        rejected: BTreeSet::new(),
    };
    for library in libraries {
        read_items(library, Some(library.ident.to_string()), &mut source, diags);
    }
    read_items(module, None, &mut source, diags);
    super::model_tree::check_field_types(&mut source, diags);
    super::model_tree::break_cycles(&mut source, diags);
    source
}

/// Reads one module's items into `source`; `library` names the module when it is a library.
fn read_items(
    module: &syn::ItemMod,
    library: Option<String>,
    source: &mut ModelSource,
    diags: &mut Diagnostics,
) {
    let Some((_, items)) = &module.content else {
        diags.error(
            At::range(&module.mod_token, &module.ident),
            "#[fused_model] needs an inline module: `mod name { ... }` with the model's structs and impls",
        );
        return;
    };
    // Names that came from libraries read before this module: defining one again is ambiguous.
    let library_consts: BTreeSet<String> = source.consts.keys().cloned().collect();
    let library_struct = |name: &str, source: &ModelSource| -> Option<String> {
        let (_, def) = source.struct_def(name)?;
        def.library.as_ref().map(|l| format!("library `{l}`"))
    };
    // Constants first, in order, so later constants and shapes can use earlier ones.
    for item in items {
        if let syn::Item::Const(c) = item {
            let name = c.ident.to_string();
            if library_consts.contains(&name) {
                diags.error_at(
                    &c.ident,
                    format!("`{name}` is also defined in a library this module uses; rename one of them"),
                );
                continue;
            }
            let value =
                eval_const(&c.expr, source.module_consts(), &BTreeMap::new()).and_then(|v| {
                    check_declared_type(&c.ty, &v)
                        .map(|()| v)
                        .map_err(|m| ConstError::Invalid(syn::Error::new_spanned(&c.expr, m)))
                });
            match value {
                Ok(v) => {
                    source.consts.insert(name, v);
                }
                Err(e) => {
                    source.rejected.insert(name);
                    if let ConstError::Invalid(e) = e {
                        diags.push(e);
                    }
                }
            }
        }
    }
    let own_structs = source.structs.len();
    for item in items {
        match item {
            syn::Item::Struct(s) => {
                let name = s.ident.to_string();
                if source.structs[own_structs..]
                    .iter()
                    .any(|d| d.name == s.ident)
                {
                    diags.error_at(
                        &s.ident,
                        format!("the model struct `{name}` is defined twice"),
                    );
                } else if let Some(other) = library_struct(&name, source) {
                    diags.error_at(
                        &s.ident,
                        format!("`{name}` is also defined in {other}; rename one of them"),
                    );
                } else if let Some(mut def) = read_struct(s, diags) {
                    def.library = library.clone();
                    source.structs.push(def);
                }
            }
            syn::Item::Impl(_) | syn::Item::Const(_) | syn::Item::Use(_) => {}
            other => {
                if let Some(name) = unsupported_item(other, diags) {
                    source.rejected.insert(name);
                }
            }
        }
    }
    for item in items {
        if let syn::Item::Impl(imp) = item {
            read_impl(imp, &library, source, diags);
        }
    }
    if source.structs.len() == own_structs {
        diags.error_at(
            &module.ident,
            "this #[fused_model] module has no model struct; add a struct with tensor fields and an impl with \
             `forward`",
        );
    }
}

/// Reports an item a model cannot hold; returns its name, if it has one.
fn unsupported_item(item: &syn::Item, diags: &mut Diagnostics) -> Option<String> {
    let name = match item {
        syn::Item::Static(s) => Some(s.ident.to_string()),
        syn::Item::Fn(f) => Some(f.sig.ident.to_string()),
        syn::Item::Enum(e) => Some(e.ident.to_string()),
        syn::Item::Type(t) => Some(t.ident.to_string()),
        syn::Item::Union(u) => Some(u.ident.to_string()),
        syn::Item::Trait(t) => Some(t.ident.to_string()),
        syn::Item::Mod(m) => Some(m.ident.to_string()),
        _ => None,
    };
    let (at, message) = match item {
        syn::Item::Static(s) => (
            At::range(&s.static_token, &s.ident),
            "statics are not supported in a model: declare a `const` instead (`const SCALE: f64 = 0.5;`)",
        ),
        syn::Item::Fn(f) => (
            At::range(&f.sig.fn_token, &f.sig.ident),
            "free functions are not supported in a model: make it a method in the model's `impl` (`fn helper(&self, \
             x: Tensor) -> Tensor`) and call it as `self.helper(&x)`",
        ),
        syn::Item::Macro(m) => (
            At::range(&m.mac.path, &m.mac.bang_token),
            "macros are not supported in a #[fused_model] module: the compiler reads the items as written",
        ),
        other => (
            At::token(other.span()),
            "a #[fused_model] module holds only consts, model structs, their impls and `use` items",
        ),
    };
    diags.error(at, message);
    name
}

fn read_struct(s: &syn::ItemStruct, diags: &mut Diagnostics) -> Option<StructDef> {
    let mut const_generics = Vec::new();
    let mut type_params = Vec::new();
    for param in &s.generics.params {
        if let syn::GenericParam::Type(t) = param {
            type_params.push(t.ident.to_string());
        }
        match param {
            syn::GenericParam::Const(c) => const_generics.push(c.ident.to_string()),
            other => diags.error_at(
                other,
                "model structs take only `const N: usize` generics; the compiler cannot resolve type or lifetime \
                 generics",
            ),
        }
    }
    let syn::Fields::Named(named) = &s.fields else {
        diags.error_at(
            &s.ident,
            "a model struct needs named fields: `struct Model { #[shape(8, 4)] weight: Tensor }`",
        );
        return None;
    };
    let mut fields = Vec::new();
    let mut dropped_fields = Vec::new();
    for field in &named.named {
        // A field of a type parameter's type is covered by the error on the parameter itself.
        let of_type_param = matches!(&field.ty, syn::Type::Path(p)
            if p.path.get_ident().is_some_and(|i| type_params.contains(&i.to_string())));
        let read = if of_type_param {
            None
        } else {
            read_field(field, diags)
        };
        match read {
            Some(f) => fields.push(f),
            None => dropped_fields.extend(field.ident.as_ref().map(|i| i.to_string())),
        }
    }
    Some(StructDef {
        name: s.ident.clone(),
        const_generics,
        fields,
        dropped_fields,
        library: None,
    })
}

fn read_field(field: &syn::Field, diags: &mut Diagnostics) -> Option<FieldDef> {
    let name = field.ident.clone()?;
    let mut checkpoint_name = name.to_string();
    let mut shape = None;
    let state = field.attrs.iter().any(|a| a.path().is_ident("state"));
    for attr in &field.attrs {
        if attr.path().is_ident("rename") {
            match attr.parse_args::<syn::LitStr>() {
                Ok(lit) => checkpoint_name = lit.value(),
                Err(_) => diags.error_at(
                    attr,
                    "write the checkpoint name as a string: #[rename(\"encoder.layer\")]",
                ),
            }
        } else if attr.path().is_ident("shape") {
            match parse_shape_attr(attr) {
                Ok(dims) => shape = Some(dims),
                Err(e) => diags.push(e),
            }
        }
    }
    let is_tensor = matches!(&field.ty, syn::Type::Path(p)
        if p.path.segments.last().is_some_and(|s| s.ident == "Tensor"));
    if let (Some(attr), false) = (
        field.attrs.iter().find(|a| a.path().is_ident("shape")),
        is_tensor,
    ) {
        diags.error_at(
            attr,
            "#[shape(..)] goes on `Tensor` fields; a sub-model's shapes come from its own fields",
        );
    }
    let kind = match &field.ty {
        syn::Type::Array(arr) => {
            let (ty, args) = model_type(&arr.elem, diags)?;
            FieldKind::Models {
                ty,
                args,
                len: Box::new(arr.len.clone()),
            }
        }
        syn::Type::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == "Tensor") => {
            let dtype = tensor_dtype(&field.ty, diags)?;
            let Some(shape) = shape else {
                diags.error_at(
                    &field.ty,
                    format!("parameter `{name}` needs a static shape: put #[shape(D0, D1, ...)] on the field"),
                );
                return None;
            };
            if shape.is_empty() {
                diags.error_at(
                    &field.ty,
                    format!("parameter `{name}` needs at least one dim in #[shape(..)]; a scalar belongs in a `const`"),
                );
                return None;
            }
            FieldKind::Tensor {
                dtype,
                shape,
                state,
            }
        }
        other => {
            let (ty, args) = model_type(other, diags)?;
            FieldKind::Model { ty, args }
        }
    };
    Some(FieldDef {
        name,
        checkpoint_name,
        kind,
    })
}

/// `#[shape(batch, seq, HIDDEN)]`: a list of dim expressions.
pub fn parse_shape_attr(attr: &syn::Attribute) -> syn::Result<Vec<syn::Expr>> {
    let list = attr.parse_args_with(
        syn::punctuated::Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated,
    )?;
    Ok(list.into_iter().collect())
}

/// `Tensor` is f32; `Tensor<f32>` and `Tensor<i64>` name the dtype. `&Tensor` reads the same.
pub fn tensor_dtype(ty: &syn::Type, diags: &mut Diagnostics) -> Option<DType> {
    let p = match ty {
        syn::Type::Path(p) => p,
        syn::Type::Reference(r) => return tensor_dtype(&r.elem, diags),
        syn::Type::Paren(p) => return tensor_dtype(&p.elem, diags),
        other => {
            diags.error_at(other, "expected `Tensor`, `Tensor<f32>` or `Tensor<i64>`");
            return None;
        }
    };
    let seg = p.path.segments.last()?;
    if seg.ident != "Tensor" {
        diags.error_at(ty, "expected `Tensor`, `Tensor<f32>` or `Tensor<i64>`");
        return None;
    }
    match &seg.arguments {
        syn::PathArguments::None => Some(DType::F32),
        syn::PathArguments::AngleBracketed(args) => {
            let name = args.args.first().map(|a| quote::quote!(#a).to_string());
            match name.as_deref() {
                Some("f32") => Some(DType::F32),
                Some("i64") => Some(DType::I64),
                _ => {
                    diags.error_at(
                        &args.args,
                        "supported tensor dtypes are `f32` (the default) and `i64` (integer ids); masks come from \
                         comparisons",
                    );
                    None
                }
            }
        }
        syn::PathArguments::Parenthesized(_) => {
            diags.error_at(ty, "expected `Tensor<f32>` or `Tensor<i64>`");
            None
        }
    }
}

fn model_type(ty: &syn::Type, diags: &mut Diagnostics) -> Option<(syn::Ident, Vec<syn::Expr>)> {
    let syn::Type::Path(p) = ty else {
        diags.error_at(
            ty,
            "a model field is a `Tensor` with #[shape(..)], another model struct, or an array `[Model; N]`",
        );
        return None;
    };
    let seg = p.path.segments.last()?;
    let mut args = Vec::new();
    if let syn::PathArguments::AngleBracketed(generic) = &seg.arguments {
        for arg in &generic.args {
            match arg {
                syn::GenericArgument::Const(e) => args.push(e.clone()),
                // `Linear<HIDDEN, 4>` parses HIDDEN as a type path; read it back as a const expression.
                syn::GenericArgument::Type(syn::Type::Path(tp)) if tp.qself.is_none() => {
                    args.push(syn::Expr::Path(syn::ExprPath {
                        attrs: Vec::new(),
                        qself: None,
                        path: tp.path.clone(),
                    }))
                }
                other => {
                    diags.error_at(other, "sub-model generic arguments must be constants");
                    return None;
                }
            }
        }
    }
    Some((seg.ident.clone(), args))
}

fn read_impl(
    imp: &syn::ItemImpl,
    library: &Option<String>,
    source: &mut ModelSource,
    diags: &mut Diagnostics,
) {
    if let Some((_, path, _)) = &imp.trait_ {
        diags.error_at(
            path,
            "trait impls are not part of a model; write an inherent `impl Model { fn forward(..) }`",
        );
        return;
    }
    let syn::Type::Path(p) = imp.self_ty.as_ref() else {
        diags.error_at(&imp.self_ty, "expected `impl ModelStruct`");
        return;
    };
    let Some(seg) = p.path.segments.last() else {
        return;
    };
    let owner = seg.ident.to_string();
    if source
        .struct_def(&owner)
        .is_none_or(|(_, d)| d.library != *library)
    {
        diags.error_at(
            &imp.self_ty,
            format!("`{owner}` is not a model struct of this module; an `impl` here belongs to one of its structs"),
        );
        return;
    }
    for item in &imp.items {
        match item {
            syn::ImplItem::Fn(f) => {
                let key = (owner.clone(), f.sig.ident.to_string());
                if source.methods.contains_key(&key) {
                    diags.error_at(
                        &f.sig.ident,
                        format!("`{owner}` already has a method `{}`", f.sig.ident),
                    );
                    continue;
                }
                source.methods.insert(key, f.clone());
            }
            syn::ImplItem::Const(c) => diags.error_at(
                &c.ident,
                "associated consts are not supported in a model: declare it in the module (`const NAME: usize = ..;`)",
            ),
            other => diags.error_at(other, "a model impl holds only methods"),
        }
    }
}

/// Evaluates a field's generic arguments against the parent's bindings.
pub fn bind_generics(
    def: &StructDef,
    args: &[syn::Expr],
    at: &impl quote::ToTokens,
    consts: ModuleConsts<'_>,
    parent: &BTreeMap<String, ConstVal>,
) -> Result<BTreeMap<String, ConstVal>, ConstError> {
    if args.len() != def.const_generics.len() {
        return Err(ConstError::Invalid(syn::Error::new_spanned(
            at,
            format!(
                "`{}` takes {} const generic argument(s), got {}",
                def.name,
                def.const_generics.len(),
                args.len()
            ),
        )));
    }
    let mut bound = BTreeMap::new();
    for (name, arg) in def.const_generics.iter().zip(args) {
        bound.insert(name.clone(), eval_const(arg, consts, parent)?);
    }
    Ok(bound)
}
