//! The root model's `forward`: its signature, its inputs (with their `#[shape]`s) and its outputs.

use std::collections::BTreeMap;

use super::{Instance, Lowerer, Scope, Value};
use crate::front::consts::{eval_const, ConstVal};
use crate::front::diag::At;
use crate::front::model::{parse_shape_attr, tensor_dtype};
use crate::ir::{DType, Dim, InputInfo, Node, NodeId, Op, Shape, TensorType};

impl Lowerer<'_> {
    /// Lowers the root struct `def`'s `forward` into `self.g`.
    pub fn lower_root(&mut self, def: usize) {
        let root = Instance {
            def,
            path: String::new(),
            generics: BTreeMap::new(),
        };
        let name = self.src.structs[def].name.clone();
        if !self.src.structs[def].const_generics.is_empty() {
            self.diags.error_at(
                &name,
                format!(
                    "the root model `{name}` cannot have const generics: nothing binds them; use module consts, or \
                     make `{name}` a field of a model that names its arguments"
                ),
            );
            return;
        }
        self.declare_params(&root);
        let Some(forward) = self
            .src
            .methods
            .get(&(name.to_string(), "forward".to_string()))
        else {
            self.diags.error_at(
                &name,
                format!(
                    "model `{name}` has no `forward`; add `impl {name} {{ pub fn forward(&self, #[shape(batch, 8)] x: \
                     Tensor) -> Tensor {{ ... }} }}`"
                ),
            );
            return;
        };
        let forward = forward.clone();
        let signature_ok = self.check_signature(&forward.sig);
        let mut vars = vec![("self".to_string(), Value::Model(root))];
        let mut inputs_ok = true;
        for arg in forward.sig.inputs.iter() {
            let syn::FnArg::Typed(pt) = arg else { continue };
            let input = if pt.attrs.iter().any(|a| a.path().is_ident("dim")) {
                self.root_dim_arg(pt)
            } else {
                self.root_input(pt)
                    .map(|(name, id)| (name, Value::Tensor(id)))
            };
            match input {
                Some(var) => vars.push(var),
                None => inputs_ok = false,
            }
        }
        if !signature_ok || !inputs_ok || self.gave_up {
            return;
        }
        self.scopes.push(Scope { vars });
        // The root is on the call stack too, so `self.forward(..)` inside it is caught as recursion at once.
        self.call_stack.push(format!("{name}::forward"));
        let out = self.eval_fn_body(&forward.block);
        self.call_stack.pop();
        self.scopes.pop();
        self.set_outputs(out, &forward);
        self.check_state_reads();
    }

    /// In a call that writes a state, nothing else may read the value it held before: the planner may put such a
    /// read (fused into a later op) after the write, which would see the new contents. Read the value `write`
    /// returns instead.
    fn check_state_reads(&mut self) {
        let g = &self.g;
        let mut errors = Vec::new();
        for w in g.ids() {
            let Op::Write { state, .. } = g.node(w).op else {
                continue;
            };
            let Op::State(index) = g.node(state).op else {
                continue;
            };
            let name = g.states[index as usize].name.clone();
            for reader in g.ids().filter(|&r| r != w) {
                if g.node(reader).op.operands().contains(&state) {
                    errors.push((g.span(reader), name.clone()));
                }
            }
            if g.outputs.contains(&state) {
                errors.push((g.span(state), name.clone()));
            }
        }
        for (span, name) in errors {
            self.diags.error(
                At::token(span),
                format!(
                    "this reads the state `{name}` as it was before this call's `write` to it; in a call that \
                     writes a state, read the value `write` returns (`let all = self.{field}.write(..); \
                     all.narrow(..)`): a read of the old value could run after the write",
                    field = name.rsplit('.').next().unwrap_or(&name)
                ),
            );
        }
    }

    /// False when lowering the body would only produce follow-on errors.
    fn check_signature(&mut self, sig: &syn::Signature) -> bool {
        let mut ok = true;
        match sig.inputs.first() {
            Some(syn::FnArg::Receiver(r))
                if r.mutability.is_some() || (r.reference.is_none() && r.colon_token.is_none()) =>
            {
                self.diags.error_at(
                    r,
                    "`forward` takes `&self`: the model's weights are read-only while it runs",
                );
            }
            Some(syn::FnArg::Receiver(_)) => {}
            _ => {
                self.diags.error(
                    At::until(&sig.ident, sig.paren_token.span.close()),
                    "`forward` must take `&self` first: `fn forward(&self, #[shape(batch, 8)] x: Tensor)`",
                );
                ok = false;
            }
        }
        if let Some(a) = &sig.asyncness {
            self.diags.error_at(
                a,
                "`forward` cannot be `async`: it is compiled into a static graph that runs synchronously; \
                 remove `async`",
            );
        }
        if let Some(u) = &sig.unsafety {
            self.diags
                .error_at(u, "`unsafe` is not supported in a model; remove it");
        }
        if let Some(abi) = &sig.abi {
            self.diags
                .error_at(abi, "`forward` cannot have an ABI; remove it");
        }
        if let Some(v) = &sig.variadic {
            self.diags.error_at(v, "`forward` cannot be variadic");
        }
        let generic = sig
            .generics
            .params
            .iter()
            .any(|p| !matches!(p, syn::GenericParam::Lifetime(_)));
        if generic {
            self.diags.error_at(
                &sig.generics,
                "`forward` cannot be generic: the compiler cannot resolve type or const parameters of `forward`; \
                 use module consts, or const generics on a sub-model struct",
            );
            ok = false;
        }
        match &sig.output {
            syn::ReturnType::Default => {
                self.diags.error(
                    sig.paren_token.span.close(),
                    "`forward` returns nothing; it must return `Tensor` or a tuple of `Tensor`s: add `-> Tensor`",
                );
                ok = false;
            }
            syn::ReturnType::Type(_, ty) if !is_tensor_or_tuple(ty) => {
                self.diags.error_at(
                    ty,
                    "`forward` must return `Tensor` or a tuple of `Tensor`s, e.g. `-> Tensor` or `-> (Tensor, Tensor)`",
                );
                ok = false;
            }
            syn::ReturnType::Type(..) => {}
        }
        ok
    }

    fn set_outputs(&mut self, out: Value, forward: &syn::ImplItemFn) {
        let at = tail_at(forward);
        let values = match out {
            Value::Tuple(vs) => vs,
            v => vec![v],
        };
        for v in values {
            match v {
                // Outputs are f32: an i64 one (ids returned, an `arange` not cast) would be read as floats.
                Value::Tensor(id) if self.g.ty(id).dtype == DType::I64 => self.diags.error(
                    at,
                    "`forward` returns f32 tensors, but one of its results holds i64 ids (a `Tensor<i64>` \
                     input or an `arange`): return it as floats with `.to_f32()`",
                ),
                Value::Tensor(id) => self.g.outputs.push(id),
                Value::Poison => {}
                other => {
                    let what = self.describe(&other);
                    let hint = match other {
                        Value::Unit => {
                            "; the last expression of `forward` is its result: remove the `;` after it"
                        }
                        Value::Tuple(_) => "; return a flat tuple of tensors, e.g. `(a, b)`",
                        _ => "",
                    };
                    self.diags.error(
                        at,
                        format!("`forward` must return tensors, but this is {what}{hint}"),
                    );
                }
            }
        }
    }

    /// `#[shape(batch, seq, HIDDEN)] x: Tensor` → an input node.
    fn root_input(&mut self, pt: &syn::PatType) -> Option<(String, NodeId)> {
        let syn::Pat::Ident(ident) = pt.pat.as_ref() else {
            self.diags.error_at(
                &pt.pat,
                "name each `forward` input with a plain identifier: `#[shape(batch, 8)] x: Tensor`",
            );
            return None;
        };
        let name = ident.ident.to_string();
        if !self.fresh_input_name(&ident.ident) {
            return None;
        }
        if !is_tensor_type(&pt.ty) {
            self.diags.error_at(
                &pt.ty,
                format!(
                    "`forward`'s inputs are tensors: write `#[shape(..)] {name}: Tensor` (or `Tensor<i64>` for ids); \
                     a fixed number belongs in the module as a `const`"
                ),
            );
            return None;
        }
        let dtype = tensor_dtype(&pt.ty, self.diags)?;
        let Some(attr) = pt.attrs.iter().find(|a| a.path().is_ident("shape")) else {
            self.diags.error_at(
                pt,
                format!(
                    "input `{name}` needs a shape: write #[shape(batch, seq, 384)] before it (lowercase names are \
                     dynamic dims, known at run time; numbers and consts are static)"
                ),
            );
            return None;
        };
        let dims = match parse_shape_attr(attr) {
            Ok(d) => d,
            Err(e) => {
                self.diags.push(e);
                return None;
            }
        };
        let mut shape = Vec::new();
        for d in &dims {
            shape.push(self.input_dim(d));
        }
        let shape = Shape(shape.into_iter().collect::<Option<Vec<Dim>>>()?);
        if let Err(e) = crate::infer::check_size(&self.g, &shape) {
            self.diags.error_at(attr, e);
            return None;
        }
        let index = self.g.inputs.len() as u32;
        let ty = TensorType { dtype, shape };
        self.g.inputs.push(InputInfo {
            name: name.clone(),
            ty: ty.clone(),
            binds: None,
        });
        let id = self.g.push(
            Node {
                op: Op::Input(index),
                ty,
            },
            ident.ident.span(),
        );
        Some((name, id))
    }

    fn fresh_input_name(&mut self, ident: &syn::Ident) -> bool {
        let name = ident.to_string();
        if self.g.inputs.iter().any(|i| i.name == name) {
            self.diags.error_at(
                ident,
                format!("`forward` has two inputs named `{name}`; rename one"),
            );
            return false;
        }
        true
    }

    /// `#[dim] past: usize` → the dim `past`, bound at run time from the argument's value (not from a shape), for
    /// view arguments such as `narrow`'s start and length and for shapes.
    fn root_dim_arg(&mut self, pt: &syn::PatType) -> Option<(String, Value)> {
        let syn::Pat::Ident(ident) = pt.pat.as_ref() else {
            self.diags.error_at(
                &pt.pat,
                "name each `forward` input with a plain identifier: `#[dim] past: usize`",
            );
            return None;
        };
        let name = ident.ident.to_string();
        if !self.fresh_input_name(&ident.ident) {
            return None;
        }
        let is_usize = matches!(pt.ty.as_ref(), syn::Type::Path(p) if p.path.is_ident("usize"));
        if !is_usize {
            self.diags.error_at(
                &pt.ty,
                format!("a `#[dim]` argument is a size or an offset: write `#[dim] {name}: usize`"),
            );
            return None;
        }
        if self.src.consts.contains_key(&name)
            || !name.starts_with(|c: char| c.is_ascii_lowercase())
        {
            self.diags.error_at(
                &ident.ident,
                format!(
                    "`{name}` names a dim bound at run time, so it must be a lowercase name that is not a constant \
                     of this module (`past`)"
                ),
            );
            return None;
        }
        let sym = self.g.dyn_dim(&name);
        self.g.inputs.push(InputInfo {
            name: name.clone(),
            ty: TensorType {
                dtype: crate::ir::DType::I64,
                shape: Shape::scalar(),
            },
            binds: Some(sym),
        });
        Some((name, Value::Dim(Dim::symbol(sym))))
    }

    pub(super) fn input_dim(&mut self, d: &syn::Expr) -> Option<Dim> {
        // `past + seq`: a sum of dims (a mask over the cached and the new positions).
        if let syn::Expr::Binary(b) = d {
            if matches!(b.op, syn::BinOp::Add(_)) {
                let (l, r) = (self.input_dim(&b.left), self.input_dim(&b.right));
                let (l, r) = (l?, r?);
                if l.as_static().is_none() || r.as_static().is_none() {
                    return self.g.sum(&[&l, &r]);
                }
            }
        }
        if let syn::Expr::Paren(p) = d {
            return self.input_dim(&p.expr);
        }
        if let syn::Expr::Path(p) = d {
            if let Some(ident) = p.path.get_ident() {
                let name = ident.to_string();
                if self.src.rejected.contains(&name) {
                    return None; // reported where the const is declared
                }
                if !self.src.consts.contains_key(&name) {
                    if name.starts_with(|c: char| c.is_ascii_lowercase()) {
                        return Some(Dim::symbol(self.g.dyn_dim(&name)));
                    }
                    self.diags.error_at(
                        d,
                        format!(
                            "`{name}` is not a constant of this module; a dim is a number, a module const, or a \
                             lowercase name for a dynamic dim (`batch`)"
                        ),
                    );
                    return None;
                }
            }
        }
        match eval_const(d, self.src.module_consts(), &BTreeMap::new()) {
            Ok(ConstVal::Int(n)) if n > 0 => Some(Dim::fixed(n as usize)),
            Ok(v) => {
                self.diags.error_at(
                    d,
                    format!("an input dim must be a positive integer or a dynamic dim name, but this is {v}"),
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

/// Where `forward`'s result is written: its tail expression, or the end of the body when there is none.
fn tail_at(forward: &syn::ImplItemFn) -> At {
    match forward.block.stmts.last() {
        Some(syn::Stmt::Expr(syn::Expr::Return(r), _)) => match &r.expr {
            Some(e) => At::of(e),
            None => At::of(r),
        },
        Some(syn::Stmt::Expr(e, None)) => At::of(e),
        Some(stmt) => At::of(stmt),
        None => At::token(forward.block.brace_token.span.join()),
    }
}

/// `Tensor`, `Tensor<i64>`, `&Tensor`.
fn is_tensor_type(ty: &syn::Type) -> bool {
    match ty {
        syn::Type::Reference(r) => is_tensor_path(&r.elem),
        other => is_tensor_path(other),
    }
}

fn is_tensor_path(ty: &syn::Type) -> bool {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == "Tensor"),
        syn::Type::Paren(p) => is_tensor_path(&p.elem),
        syn::Type::Group(g) => is_tensor_path(&g.elem),
        _ => false,
    }
}

/// `Tensor` or a flat tuple of them: the result types the runtime can hand back.
fn is_tensor_or_tuple(ty: &syn::Type) -> bool {
    match ty {
        syn::Type::Tuple(t) => !t.elems.is_empty() && t.elems.iter().all(is_tensor_path),
        syn::Type::Paren(p) => is_tensor_or_tuple(&p.elem),
        other => is_tensor_path(other),
    }
}
