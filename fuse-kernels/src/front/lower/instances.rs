//! The tree of model instances under the root: each sub-model field bound to its const generics at its
//! checkpoint path, and the parameters that tree declares.

use std::collections::BTreeMap;

use super::{join, Instance, Lowerer, MAX_MODEL_ARRAY, MAX_PARAMS};
use crate::front::consts::{eval_const, ConstError, ConstVal};
use crate::front::diag::At;
use crate::front::model::{bind_generics, FieldKind};
use crate::ir::{Dim, Shape, TensorType};

/// The sub-models of one field: `len` instances of a struct at `path.0`, `path.1`, ... for an array, or the one
/// instance at `path` for a plain field. Made on demand, so indexing one layer of a long array stays cheap.
#[derive(Clone, Debug)]
pub(super) struct Children {
    def: usize,
    path: String,
    generics: BTreeMap<String, ConstVal>,
    pub(super) len: usize,
    is_array: bool,
}

impl Children {
    pub(super) fn get(&self, i: usize) -> Option<Instance> {
        (i < self.len).then(|| Instance {
            def: self.def,
            path: if self.is_array {
                join(&self.path, &i.to_string())
            } else {
                self.path.clone()
            },
            generics: self.generics.clone(),
        })
    }

    pub(super) fn all(&self) -> impl Iterator<Item = Instance> + '_ {
        (0..self.len).filter_map(|i| self.get(i))
    }
}

impl Lowerer<'_> {
    /// Declares every parameter of the instance tree, in field order, so the parameter list does not depend on
    /// which ones `forward` happens to use first.
    pub(super) fn declare_params(&mut self, inst: &Instance) {
        let def = &self.src.structs[inst.def];
        for field in &def.fields {
            let path = join(&inst.path, &field.checkpoint_name);
            match &field.kind {
                FieldKind::Tensor {
                    dtype,
                    shape,
                    state: true,
                } => {
                    let Some(shape) = self.state_shape(shape, inst) else {
                        continue;
                    };
                    self.state_index
                        .insert(path.clone(), self.g.states.len() as u32);
                    self.g.states.push(crate::ir::ParamInfo {
                        name: path,
                        ty: TensorType {
                            dtype: *dtype,
                            shape,
                        },
                    });
                }
                FieldKind::Tensor { dtype, shape, .. } => {
                    if self.g.params.len() >= MAX_PARAMS {
                        self.diags.error_at(
                            &field.name,
                            format!("the model has more than {MAX_PARAMS} parameter tensors; is a model array \
                                     length larger than intended?"),
                        );
                        self.gave_up = true;
                        return;
                    }
                    let Some(shape) = self.param_shape(shape, inst) else {
                        continue;
                    };
                    self.param_index
                        .insert(path.clone(), self.g.params.len() as u32);
                    self.g.params.push(crate::ir::ParamInfo {
                        name: path,
                        ty: TensorType {
                            dtype: *dtype,
                            shape,
                        },
                    });
                }
                FieldKind::Model { .. } | FieldKind::Models { .. } => {
                    let Some(children) = self.children(inst, &field.name.to_string()) else {
                        continue;
                    };
                    for child in children.all() {
                        if self.gave_up {
                            return;
                        }
                        self.declare_params(&child);
                    }
                }
            }
        }
    }

    /// A state's shape: constants, or lowercase names for the dynamic dims a session binds (`batch`).
    fn state_shape(&mut self, dims: &[syn::Expr], inst: &Instance) -> Option<Shape> {
        let mut out = Vec::new();
        for d in dims {
            let lowercase = matches!(d, syn::Expr::Path(p)
            if p.path.get_ident().is_some_and(|i| {
                let n = i.to_string();
                n.starts_with(|c: char| c.is_ascii_lowercase()) && !inst.generics.contains_key(&n)
            }));
            if lowercase {
                out.push(self.input_dim(d)?);
                continue;
            }
            match eval_const(d, self.src.module_consts(), &inst.generics) {
                Ok(ConstVal::Int(n)) if n > 0 => out.push(Dim::fixed(n as usize)),
                Ok(v) => self.diags.error_at(
                    d,
                    format!("a state dim must be a positive integer constant or a dynamic dim, but this is {v}"),
                ),
                Err(ConstError::Invalid(e)) => self.diags.push(e),
                Err(ConstError::UsesRejected) => {}
            }
        }
        if out.len() != dims.len() {
            return None;
        }
        Some(Shape(out))
    }

    fn param_shape(&mut self, dims: &[syn::Expr], inst: &Instance) -> Option<Shape> {
        let mut out = Vec::new();
        for d in dims {
            match eval_const(d, self.src.module_consts(), &inst.generics) {
                Ok(ConstVal::Int(n)) if n > 0 => out.push(Dim::fixed(n as usize)),
                Ok(v) => self.diags.error_at(
                    d,
                    format!("a parameter dim must be a positive integer constant, but this is {v}"),
                ),
                Err(ConstError::Invalid(e)) => self.diags.push(parameter_dim_hint(e, d)),
                Err(ConstError::UsesRejected) => {}
            }
        }
        if out.len() != dims.len() {
            return None;
        }
        let shape = Shape(out);
        if let Err(e) = crate::infer::check_size(&self.g, &shape) {
            if let (Some(first), Some(last)) = (dims.first(), dims.last()) {
                self.diags.error(At::range(first, last), e);
            }
            return None;
        }
        Some(shape)
    }

    /// The sub-model instances of a model field (one for a plain field, N for an array).
    pub(super) fn children(&mut self, inst: &Instance, field_name: &str) -> Option<Children> {
        let def = &self.src.structs[inst.def];
        let field = def.fields.iter().find(|f| f.name == field_name)?;
        let path = join(&inst.path, &field.checkpoint_name);
        let (ty, args, len) = match &field.kind {
            FieldKind::Model { ty, args } => (ty, args, None),
            FieldKind::Models { ty, args, len } => (ty, args, Some(len)),
            FieldKind::Tensor { .. } => return None,
        };
        // An unknown field type was reported when the module was read.
        let (child_def, child) = self.src.struct_def(&ty.to_string())?;
        let generics =
            match bind_generics(child, args, ty, self.src.module_consts(), &inst.generics) {
                Ok(g) => g,
                Err(e) => {
                    e.report(self.diags);
                    return None;
                }
            };
        let Some(len) = len else {
            return Some(Children {
                def: child_def,
                path,
                generics,
                len: 1,
                is_array: false,
            });
        };
        match eval_const(len, self.src.module_consts(), &inst.generics) {
            Ok(ConstVal::Int(n)) if (0..=MAX_MODEL_ARRAY).contains(&n) => Some(Children {
                def: child_def,
                path,
                generics,
                len: n as usize,
                is_array: true,
            }),
            Ok(ConstVal::Int(n)) if n > MAX_MODEL_ARRAY => {
                self.diags.error_at(
                    len,
                    format!("an array of {n} sub-models is more than the {MAX_MODEL_ARRAY} the compiler unrolls"),
                );
                None
            }
            Ok(v) => {
                self.diags.error_at(
                    len,
                    format!(
                        "an array length must be a non-negative integer constant, but this is {v}"
                    ),
                );
                None
            }
            Err(e) => {
                e.report(self.diags);
                None
            }
        }
    }
}

/// A lowercase name in a parameter's `#[shape]` was probably meant as a dynamic dim: say why it cannot be one.
fn parameter_dim_hint(e: syn::Error, d: &syn::Expr) -> syn::Error {
    let lowercase_name = match d {
        syn::Expr::Path(p) => p
            .path
            .get_ident()
            .map(|i| i.to_string())
            .filter(|n| n.starts_with(|c: char| c.is_ascii_lowercase())),
        _ => None,
    };
    let Some(name) = lowercase_name else {
        return e;
    };
    syn::Error::new_spanned(
        d,
        format!(
            "`{name}` is not a constant of this module, and a parameter's shape is static: dynamic dims like \
             `batch` exist only on `forward`'s inputs; declare `const {}: usize = ...;` in the module",
            name.to_uppercase()
        ),
    )
}
