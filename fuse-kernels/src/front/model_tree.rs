//! Checks on the tree of model structs once the module is read: every sub-model field names a struct of the
//! module or of a library it uses, and no struct contains itself (which would make lowering recurse forever). Offending fields are
//! reported and dropped, so the rest of the module can still be checked in the same build.

use super::diag::Diagnostics;
use super::model::{FieldKind, ModelSource};

/// A field whose type is not `Tensor`, a struct of this module, or an array of them, is reported once here.
pub fn check_field_types(source: &mut ModelSource, diags: &mut Diagnostics) {
    let names: Vec<String> = source.structs.iter().map(|s| s.name.to_string()).collect();
    for def in &mut source.structs {
        let dropped = &mut def.dropped_fields;
        def.fields.retain(|f| match &f.kind {
            FieldKind::Model { ty, .. } | FieldKind::Models { ty, .. } if !names.contains(&ty.to_string()) => {
                let hint = if ty == "Tensor" {
                    "arrays of tensors are not supported: use one tensor with an extra axis, #[shape(N, ..)]"
                } else {
                    "a model field is a `Tensor` with #[shape(..)], a model struct of this module or of a library \
                     it uses (`#[fused_model(uses(layers))]`), or an array `[Model; N]`; numbers belong in the \
                     module as `const`s"
                };
                diags.error_at(
                    ty,
                    format!("field `{}` has type `{ty}`, which is not a model struct of this module; {hint}", f.name),
                );
                dropped.push(f.name.to_string());
                false
            }
            _ => true,
        });
    }
}

/// A struct that contains itself (directly or through others) would be an infinitely deep model. The field that
/// closes the cycle is reported and dropped, so the rest of the module can still be checked.
pub fn break_cycles(source: &mut ModelSource, diags: &mut Diagnostics) {
    while let Some((s, f)) = find_cycle(source) {
        let def = &mut source.structs[s];
        let field = def.fields.remove(f);
        def.dropped_fields.push(field.name.to_string());
        diags.error_at(
            &field.name,
            format!(
                "`{}` contains itself through field `{}`: a model must be a finite tree of sub-models",
                def.name, field.name
            ),
        );
    }
}

/// (struct, field) of a field that closes a cycle of containment, by depth-first search.
fn find_cycle(source: &ModelSource) -> Option<(usize, usize)> {
    let children: Vec<Vec<Option<usize>>> = source
        .structs
        .iter()
        .map(|s| {
            s.fields
                .iter()
                .map(|f| match &f.kind {
                    FieldKind::Model { ty, .. } | FieldKind::Models { ty, .. } => {
                        source.struct_def(&ty.to_string()).map(|(i, _)| i)
                    }
                    FieldKind::Tensor { .. } => None,
                })
                .collect()
        })
        .collect();
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let mut mark = vec![Mark::New; children.len()];
    for start in 0..children.len() {
        if mark[start] != Mark::New {
            continue;
        }
        mark[start] = Mark::OnPath;
        let mut stack = vec![(start, 0usize)];
        while let Some(top) = stack.last_mut() {
            let (s, i) = *top;
            let Some(&child) = children[s].get(i) else {
                mark[s] = Mark::Done;
                stack.pop();
                continue;
            };
            top.1 += 1;
            match child.map(|c| (c, mark[c])) {
                Some((_, Mark::OnPath)) => return Some((s, i)),
                Some((c, Mark::New)) => {
                    mark[c] = Mark::OnPath;
                    stack.push((c, 0));
                }
                _ => {}
            }
        }
    }
    None
}
