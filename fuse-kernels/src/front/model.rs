//! Reads the items of a `#[fused_model] mod`: constants, model structs (tensor fields with `#[shape]`, sub-model
//! fields, arrays of sub-models) and the `impl` blocks whose methods `forward` may call.

use std::collections::BTreeMap;

use proc_macro2::Span;
use syn::spanned::Spanned;

use super::consts::{eval_const, ConstVal};
use super::diag::Diagnostics;
use crate::ir::DType;

/// A struct of the model with its fields.
pub struct StructDef {
    pub name: syn::Ident,
    /// Names of its `const N: usize` generics, in order.
    pub const_generics: Vec<String>,
    pub fields: Vec<FieldDef>,
}

pub struct FieldDef {
    pub name: syn::Ident,
    /// Checkpoint name of this path segment (the field name unless `#[rename("...")]`).
    pub checkpoint_name: String,
    pub kind: FieldKind,
}

pub enum FieldKind {
    /// A parameter tensor: dims are const expressions of the struct's generics and the module's consts.
    Tensor { dtype: DType, shape: Vec<syn::Expr> },
    /// A sub-model with its const generic arguments.
    Model {
        ty: syn::Ident,
        args: Vec<syn::Expr>,
    },
    /// `[SubModel; N]`.
    Models {
        ty: syn::Ident,
        args: Vec<syn::Expr>,
        len: syn::Expr,
    },
}

/// Everything the lowering needs from the module.
pub struct ModelSource {
    pub consts: BTreeMap<String, ConstVal>,
    pub structs: Vec<StructDef>,
    /// Methods by (struct name, method name).
    pub methods: BTreeMap<(String, String), syn::ImplItemFn>,
}

impl ModelSource {
    pub fn struct_def(&self, name: &str) -> Option<(usize, &StructDef)> {
        self.structs
            .iter()
            .enumerate()
            .find(|(_, s)| s.name == name)
    }

    /// Structs no other struct uses as a field: each is a compiled model.
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
            .filter(|&i| !used.contains(&self.structs[i].name.to_string()))
            .collect()
    }
}

/// Parses the items of the module; errors go to `diags` and the item is skipped.
pub fn read_module(module: &syn::ItemMod, diags: &mut Diagnostics) -> ModelSource {
    let mut source = ModelSource {
        consts: BTreeMap::new(),
        structs: Vec::new(),
        methods: BTreeMap::new(),
    };
    let Some((_, items)) = &module.content else {
        diags.error(
            module.span(),
            "#[fused_model] needs an inline module: `mod name { ... }` with the model's structs and impls",
        );
        return source;
    };
    // Constants first, in order, so later constants and shapes can use earlier ones.
    for item in items {
        if let syn::Item::Const(c) = item {
            match eval_const(&c.expr, &source.consts, &BTreeMap::new()) {
                Ok(v) => {
                    source.consts.insert(c.ident.to_string(), v);
                }
                Err(e) => diags.push(e),
            }
        }
    }
    for item in items {
        match item {
            syn::Item::Struct(s) => {
                if let Some(def) = read_struct(s, diags) {
                    source.structs.push(def);
                }
            }
            syn::Item::Impl(imp) => read_impl(imp, &mut source, diags),
            syn::Item::Const(_) | syn::Item::Use(_) => {}
            other => diags.error(
                other.span(),
                "a #[fused_model] module holds only consts, model structs, their impls and `use` items",
            ),
        }
    }
    if source.structs.is_empty() {
        diags.error(
            module.ident.span(),
            "this #[fused_model] module has no model struct; add a struct with tensor fields and an impl with `forward`",
        );
    }
    source
}

fn read_struct(s: &syn::ItemStruct, diags: &mut Diagnostics) -> Option<StructDef> {
    let mut const_generics = Vec::new();
    for param in &s.generics.params {
        match param {
            syn::GenericParam::Const(c) => const_generics.push(c.ident.to_string()),
            other => diags.error(
                other.span(),
                "model structs take only `const N: usize` generics; the compiler cannot resolve type or lifetime generics",
            ),
        }
    }
    let syn::Fields::Named(named) = &s.fields else {
        diags.error(s.ident.span(), "a model struct needs named fields");
        return None;
    };
    let mut fields = Vec::new();
    for field in &named.named {
        if let Some(f) = read_field(field, diags) {
            fields.push(f);
        }
    }
    Some(StructDef {
        name: s.ident.clone(),
        const_generics,
        fields,
    })
}

fn read_field(field: &syn::Field, diags: &mut Diagnostics) -> Option<FieldDef> {
    let name = field.ident.clone()?;
    let mut checkpoint_name = name.to_string();
    let mut shape = None;
    for attr in &field.attrs {
        if attr.path().is_ident("rename") {
            match attr.parse_args::<syn::LitStr>() {
                Ok(lit) => checkpoint_name = lit.value(),
                Err(_) => diags.error(
                    attr.span(),
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
    let kind = match &field.ty {
        syn::Type::Array(arr) => {
            let (ty, args) = model_type(&arr.elem, diags)?;
            FieldKind::Models {
                ty,
                args,
                len: arr.len.clone(),
            }
        }
        syn::Type::Path(p) if p.path.segments.last().is_some_and(|s| s.ident == "Tensor") => {
            let dtype = tensor_dtype(&field.ty, diags)?;
            let Some(shape) = shape else {
                diags.error(
                    field.ty.span(),
                    format!(
                        "parameter `{name}` needs a static shape: put #[shape(D0, D1, ...)] on the field"
                    ),
                );
                return None;
            };
            FieldKind::Tensor { dtype, shape }
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

/// `Tensor` is f32; `Tensor<f32>` and `Tensor<i64>` name the dtype.
pub fn tensor_dtype(ty: &syn::Type, diags: &mut Diagnostics) -> Option<DType> {
    let syn::Type::Path(p) = ty else {
        diags.error(ty.span(), "expected `Tensor`, `Tensor<f32>` or `Tensor<i64>`");
        return None;
    };
    let seg = p.path.segments.last()?;
    if seg.ident != "Tensor" {
        diags.error(ty.span(), "expected `Tensor`, `Tensor<f32>` or `Tensor<i64>`");
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
                    diags.error(
                        args.span(),
                        "supported tensor dtypes are `f32` (the default) and `i64` (integer ids)",
                    );
                    None
                }
            }
        }
        syn::PathArguments::Parenthesized(_) => {
            diags.error(ty.span(), "expected `Tensor<f32>` or `Tensor<i64>`");
            None
        }
    }
}

fn model_type(ty: &syn::Type, diags: &mut Diagnostics) -> Option<(syn::Ident, Vec<syn::Expr>)> {
    let syn::Type::Path(p) = ty else {
        diags.error(
            ty.span(),
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
                    diags.error(other.span(), "sub-model generic arguments must be constants");
                    return None;
                }
            }
        }
    }
    Some((seg.ident.clone(), args))
}

fn read_impl(imp: &syn::ItemImpl, source: &mut ModelSource, diags: &mut Diagnostics) {
    if let Some((_, path, _)) = &imp.trait_ {
        diags.error(
            path.span(),
            "trait impls are not part of a model; write an inherent `impl Model { fn forward(..) }`",
        );
        return;
    }
    let syn::Type::Path(p) = imp.self_ty.as_ref() else {
        diags.error(imp.self_ty.span(), "expected `impl ModelStruct`");
        return;
    };
    let Some(seg) = p.path.segments.last() else {
        return;
    };
    let owner = seg.ident.to_string();
    for item in &imp.items {
        match item {
            syn::ImplItem::Fn(f) => {
                source
                    .methods
                    .insert((owner.clone(), f.sig.ident.to_string()), f.clone());
            }
            other => diags.error(other.span(), "a model impl holds only methods"),
        }
    }
}

/// Evaluates a field's generic arguments against the parent's bindings.
pub fn bind_generics(
    def: &StructDef,
    args: &[syn::Expr],
    span: Span,
    consts: &BTreeMap<String, ConstVal>,
    parent: &BTreeMap<String, ConstVal>,
) -> syn::Result<BTreeMap<String, ConstVal>> {
    if args.len() != def.const_generics.len() {
        return Err(syn::Error::new(
            span,
            format!(
                "`{}` takes {} const generic argument(s), got {}",
                def.name,
                def.const_generics.len(),
                args.len()
            ),
        ));
    }
    let mut bound = BTreeMap::new();
    for (name, arg) in def.const_generics.iter().zip(args) {
        bound.insert(name.clone(), eval_const(arg, consts, parent)?);
    }
    Ok(bound)
}
