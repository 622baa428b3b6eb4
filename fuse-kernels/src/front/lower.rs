//! Lowers a root model's `forward` to a [`Graph`] by symbolic evaluation: sub-model calls are inlined, `for` loops
//! over constant ranges and model arrays are unrolled, `if`/`match` on constants pick their branch. Anything that
//! would need data at run time is a spanned error.

use std::collections::BTreeMap;

use proc_macro2::Span;
use syn::spanned::Spanned;

use super::consts::{eval_const, lit_value, ConstVal};
use super::diag::Diagnostics;
use super::model::{bind_generics, parse_shape_attr, tensor_dtype, FieldKind, ModelSource};
use crate::ir::{
    BinaryOp, DType, Dim, Graph, InputInfo, Node, NodeId, Op, ParamInfo, Shape, TensorType,
    UnaryOp,
};

/// Deepest chain of inlined calls before we call it recursion.
const MAX_CALL_DEPTH: usize = 48;

/// A model struct instantiated at a checkpoint path with its const generics bound.
#[derive(Clone, Debug)]
pub struct Instance {
    pub def: usize,
    pub path: String,
    pub generics: BTreeMap<String, ConstVal>,
}

/// What an expression evaluates to while lowering.
#[derive(Clone, Debug)]
enum Value {
    Tensor(NodeId),
    Const(ConstVal),
    Dim(Dim),
    Model(Instance),
    Models(Vec<Instance>),
    Tuple(Vec<Value>),
    Unit,
    /// An error was already reported for this value; uses of it stay silent.
    Poison,
}

struct Scope {
    vars: Vec<(String, Value)>,
}

pub struct Lowerer<'a> {
    src: &'a ModelSource,
    pub g: Graph,
    diags: &'a mut Diagnostics,
    param_index: BTreeMap<String, u32>,
    param_nodes: BTreeMap<u32, NodeId>,
    scopes: Vec<Scope>,
    call_stack: Vec<String>,
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

impl<'a> Lowerer<'a> {
    pub fn new(src: &'a ModelSource, diags: &'a mut Diagnostics) -> Self {
        Lowerer {
            src,
            g: Graph::new(),
            diags,
            param_index: BTreeMap::new(),
            param_nodes: BTreeMap::new(),
            scopes: Vec::new(),
            call_stack: Vec::new(),
        }
    }

    /// Declares every parameter of the instance tree, in field order, so the parameter list does not depend on
    /// which ones `forward` happens to use first.
    fn declare_params(&mut self, inst: &Instance) {
        let def = &self.src.structs[inst.def];
        for field in &def.fields {
            let path = join(&inst.path, &field.checkpoint_name);
            match &field.kind {
                FieldKind::Tensor { dtype, shape, .. } => {
                    let mut dims = Vec::new();
                    for d in shape {
                        match eval_const(d, &self.src.consts, &inst.generics) {
                            Ok(ConstVal::Int(n)) if n > 0 => dims.push(Dim::fixed(n as usize)),
                            Ok(_) => self.diags.error(
                                d.span(),
                                "a parameter dim must be a positive integer constant",
                            ),
                            Err(e) => self.diags.push(e),
                        }
                    }
                    if dims.len() != shape.len() {
                        continue;
                    }
                    self.param_index
                        .insert(path.clone(), self.g.params.len() as u32);
                    self.g.params.push(ParamInfo {
                        name: path,
                        ty: TensorType {
                            dtype: *dtype,
                            shape: Shape(dims),
                        },
                    });
                }
                FieldKind::Model { .. } | FieldKind::Models { .. } => {
                    for child in self.children(inst, &field.name.to_string()) {
                        self.declare_params(&child);
                    }
                }
            }
        }
    }

    /// The sub-model instances of a model field (one for a plain field, N for an array).
    fn children(&mut self, inst: &Instance, field_name: &str) -> Vec<Instance> {
        let def = &self.src.structs[inst.def];
        let Some(field) = def.fields.iter().find(|f| f.name == field_name) else {
            return Vec::new();
        };
        let path = join(&inst.path, &field.checkpoint_name);
        let (ty, args, len) = match &field.kind {
            FieldKind::Model { ty, args } => (ty, args, None),
            FieldKind::Models { ty, args, len } => (ty, args, Some(len)),
            FieldKind::Tensor { .. } => return Vec::new(),
        };
        let Some((child_def, child)) = self.src.struct_def(&ty.to_string()) else {
            self.diags.error(
                ty.span(),
                format!("`{ty}` is not a model struct of this module"),
            );
            return Vec::new();
        };
        let generics =
            match bind_generics(child, args, ty.span(), &self.src.consts, &inst.generics) {
                Ok(g) => g,
                Err(e) => {
                    self.diags.push(e);
                    return Vec::new();
                }
            };
        match len {
            None => vec![Instance {
                def: child_def,
                path,
                generics,
            }],
            Some(len) => match eval_const(len, &self.src.consts, &inst.generics) {
                Ok(ConstVal::Int(n)) if n >= 0 => (0..n)
                    .map(|i| Instance {
                        def: child_def,
                        path: join(&path, &i.to_string()),
                        generics: generics.clone(),
                    })
                    .collect(),
                Ok(_) => {
                    self.diags
                        .error(len.span(), "an array length must be an integer constant");
                    Vec::new()
                }
                Err(e) => {
                    self.diags.push(e);
                    Vec::new()
                }
            },
        }
    }

    /// Lowers the root struct `def`'s `forward` into `self.g`.
    pub fn lower_root(&mut self, def: usize) {
        let root = Instance {
            def,
            path: String::new(),
            generics: BTreeMap::new(),
        };
        let name = self.src.structs[def].name.clone();
        if !self.src.structs[def].const_generics.is_empty() {
            self.diags.error(
                name.span(),
                format!("the root model `{name}` cannot have generics: nothing binds them"),
            );
            return;
        }
        self.declare_params(&root);
        let Some(forward) = self
            .src
            .methods
            .get(&(name.to_string(), "forward".to_string()))
        else {
            self.diags.error(
                name.span(),
                format!("model `{name}` has no `forward`; add `impl {name} {{ pub fn forward(&self, ...) -> Tensor {{ ... }} }}`"),
            );
            return;
        };
        let forward = forward.clone();
        let mut vars = vec![("self".to_string(), Value::Model(root))];
        let mut inputs_ok = true;
        for arg in forward.sig.inputs.iter() {
            let syn::FnArg::Typed(pt) = arg else { continue };
            match self.root_input(pt) {
                Some((name, id)) => vars.push((name, Value::Tensor(id))),
                None => inputs_ok = false,
            }
        }
        if !matches!(forward.sig.inputs.first(), Some(syn::FnArg::Receiver(_))) {
            self.diags
                .error(forward.sig.ident.span(), "`forward` must take `&self` first");
            return;
        }
        self.check_signature(&forward.sig);
        if !inputs_ok {
            return;
        }
        self.scopes.push(Scope { vars });
        let out = self.eval_fn_body(&forward.block);
        self.scopes.pop();
        self.set_outputs(out, forward.sig.output.span());
    }

    fn check_signature(&mut self, sig: &syn::Signature) {
        if let Some(a) = &sig.asyncness {
            self.diags
                .error(a.span(), "`async` is not supported: `forward` is compiled into a static graph");
        }
        if let Some(u) = &sig.unsafety {
            self.diags
                .error(u.span(), "`unsafe` is not supported in a model");
        }
        if !sig.generics.params.is_empty() {
            self.diags.error(
                sig.generics.span(),
                "`forward` cannot be generic: the compiler cannot resolve generic parameters; use consts",
            );
        }
        let returns_tensors = match &sig.output {
            syn::ReturnType::Default => false,
            syn::ReturnType::Type(_, ty) => is_tensor_or_tuple(ty),
        };
        if !returns_tensors {
            self.diags.error(
                sig.output.span(),
                "`forward` must return `Tensor` or a tuple of `Tensor`s",
            );
        }
    }

    fn set_outputs(&mut self, out: Value, span: Span) {
        let values = match out {
            Value::Tuple(vs) => vs,
            v => vec![v],
        };
        for v in values {
            match v {
                Value::Tensor(id) => self.g.outputs.push(id),
                Value::Poison => {}
                _ => self.diags.error(span, "`forward` must return tensors"),
            }
        }
    }

    /// `#[shape(batch, seq, HIDDEN)] x: Tensor` → an input node.
    fn root_input(&mut self, pt: &syn::PatType) -> Option<(String, NodeId)> {
        let syn::Pat::Ident(ident) = pt.pat.as_ref() else {
            self.diags
                .error(pt.pat.span(), "name each `forward` input with a plain identifier");
            return None;
        };
        let name = ident.ident.to_string();
        let dtype = tensor_dtype(&pt.ty, self.diags)?;
        let Some(attr) = pt.attrs.iter().find(|a| a.path().is_ident("shape")) else {
            self.diags.error(
                pt.span(),
                format!("input `{name}` needs a shape: write #[shape(batch, seq, 384)] before it (lowercase names are dynamic dims)"),
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
            shape.push(self.input_dim(d)?);
        }
        let index = self.g.inputs.len() as u32;
        let ty = TensorType {
            dtype,
            shape: Shape(shape),
        };
        self.g.inputs.push(InputInfo {
            name: name.clone(),
            ty: ty.clone(),
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

    fn input_dim(&mut self, d: &syn::Expr) -> Option<Dim> {
        if let syn::Expr::Path(p) = d {
            if let Some(ident) = p.path.get_ident() {
                let name = ident.to_string();
                if !self.src.consts.contains_key(&name) {
                    if name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
                        return Some(Dim::symbol(self.g.dyn_dim(&name)));
                    }
                    self.diags.error(
                        d.span(),
                        format!("`{name}` is not a constant of this module (dynamic dims are lowercase names)"),
                    );
                    return None;
                }
            }
        }
        match eval_const(d, &self.src.consts, &BTreeMap::new()) {
            Ok(ConstVal::Int(n)) if n > 0 => Some(Dim::fixed(n as usize)),
            Ok(_) => {
                self.diags
                    .error(d.span(), "an input dim must be a positive integer or a dynamic dim name");
                None
            }
            Err(e) => {
                self.diags.push(e);
                None
            }
        }
    }

    // ---- environment ----

    fn lookup(&self, name: &str) -> Option<Value> {
        self.scopes
            .last()?
            .vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    fn bind(&mut self, name: String, v: Value) {
        if let Some(scope) = self.scopes.last_mut() {
            scope.vars.push((name, v));
        }
    }

    fn assign(&mut self, name: &str, v: Value) -> bool {
        let Some(scope) = self.scopes.last_mut() else {
            return false;
        };
        match scope.vars.iter_mut().rev().find(|(n, _)| n == name) {
            Some(slot) => {
                slot.1 = v;
                true
            }
            None => false,
        }
    }

    fn instance_generics(&self) -> BTreeMap<String, ConstVal> {
        match self.lookup("self") {
            Some(Value::Model(inst)) => inst.generics,
            _ => BTreeMap::new(),
        }
    }

    // ---- nodes ----

    fn add(&mut self, op: Op, span: Span) -> Value {
        match self.g.add(op, span) {
            Ok(id) => Value::Tensor(id),
            Err(e) => {
                self.diags.error(span, e);
                Value::Poison
            }
        }
    }

    fn scalar(&mut self, v: f64, span: Span) -> NodeId {
        self.g.push(
            Node {
                op: Op::Scalar(v),
                ty: TensorType {
                    dtype: DType::F32,
                    shape: Shape::scalar(),
                },
            },
            span,
        )
    }

    /// A tensor operand: a tensor, or a numeric constant that becomes a scalar node.
    fn operand(&mut self, v: &Value, span: Span) -> Option<NodeId> {
        match v {
            Value::Tensor(id) => Some(*id),
            Value::Const(c) => match c.as_f64() {
                Some(f) => Some(self.scalar(f, span)),
                None => {
                    self.diags.error(span, "a bool constant cannot be used as a tensor");
                    None
                }
            },
            Value::Poison => None,
            _ => {
                self.diags.error(span, "expected a tensor here");
                None
            }
        }
    }

    fn param(&mut self, path: &str, span: Span) -> Value {
        let Some(&index) = self.param_index.get(path) else {
            return Value::Poison;
        };
        if let Some(&id) = self.param_nodes.get(&index) {
            return Value::Tensor(id);
        }
        let ty = self.g.params[index as usize].ty.clone();
        let id = self.g.push(
            Node {
                op: Op::Param(index),
                ty,
            },
            span,
        );
        self.param_nodes.insert(index, id);
        Value::Tensor(id)
    }

    // ---- bodies ----

    fn eval_fn_body(&mut self, block: &syn::Block) -> Value {
        let n = block.stmts.len();
        let mut last = Value::Unit;
        for (i, stmt) in block.stmts.iter().enumerate() {
            let is_last = i + 1 == n;
            if let syn::Stmt::Expr(syn::Expr::Return(r), _) = stmt {
                if !is_last {
                    self.diags.error(r.span(), "code after `return` is never compiled; make the `return` the last statement");
                }
                return match &r.expr {
                    Some(e) => self.eval(e),
                    None => Value::Unit,
                };
            }
            last = self.eval_stmt(stmt, is_last);
        }
        last
    }

    /// A nested block: its `let`s end with it, assignments to outer names stay.
    fn eval_block(&mut self, block: &syn::Block) -> Value {
        let mark = self.scopes.last().map_or(0, |s| s.vars.len());
        let n = block.stmts.len();
        let mut last = Value::Unit;
        for (i, stmt) in block.stmts.iter().enumerate() {
            last = self.eval_stmt(stmt, i + 1 == n);
        }
        if let Some(scope) = self.scopes.last_mut() {
            scope.vars.truncate(mark);
        }
        last
    }

    fn eval_stmt(&mut self, stmt: &syn::Stmt, is_last: bool) -> Value {
        match stmt {
            syn::Stmt::Local(local) => {
                let Some(init) = &local.init else {
                    self.diags
                        .error(local.span(), "declare and initialise together: `let x = ...;`");
                    return Value::Unit;
                };
                if let Some((_, diverge)) = &init.diverge {
                    self.diags
                        .error(diverge.span(), "`let ... else` depends on data; it cannot be compiled");
                }
                let v = self.eval(&init.expr);
                self.bind_pat(&local.pat, v);
                Value::Unit
            }
            syn::Stmt::Expr(e, semi) => {
                let v = self.eval(e);
                if semi.is_none() && is_last {
                    v
                } else {
                    Value::Unit
                }
            }
            syn::Stmt::Macro(m) => {
                self.diags.error(
                    m.mac.path.span(),
                    "macros are not supported in `forward` (nothing runs at capture time); remove it",
                );
                Value::Unit
            }
            syn::Stmt::Item(item) => {
                self.diags
                    .error(item.span(), "items inside `forward` are not supported; move them to the module");
                Value::Unit
            }
        }
    }

    fn bind_pat(&mut self, pat: &syn::Pat, v: Value) {
        match pat {
            syn::Pat::Ident(p) => self.bind(p.ident.to_string(), v),
            syn::Pat::Type(t) => self.bind_pat(&t.pat, v),
            syn::Pat::Wild(_) => {}
            syn::Pat::Tuple(t) => match v {
                Value::Tuple(vs) if vs.len() == t.elems.len() => {
                    for (p, v) in t.elems.iter().zip(vs) {
                        self.bind_pat(p, v);
                    }
                }
                Value::Poison => {
                    for p in &t.elems {
                        self.bind_pat(p, Value::Poison);
                    }
                }
                _ => self.diags.error(t.span(), "the tuple pattern does not match the value"),
            },
            other => self
                .diags
                .error(other.span(), "only `let name`, `let (a, b)` and `let _` patterns are supported"),
        }
    }

    // ---- expressions ----

    fn eval(&mut self, e: &syn::Expr) -> Value {
        match e {
            syn::Expr::Lit(l) => match lit_value(&l.lit) {
                Ok(c) => Value::Const(c),
                Err(err) => {
                    self.diags.push(err);
                    Value::Poison
                }
            },
            syn::Expr::Path(p) => self.eval_path(p),
            syn::Expr::Paren(p) => self.eval(&p.expr),
            syn::Expr::Group(g) => self.eval(&g.expr),
            syn::Expr::Reference(r) => {
                if let Some(m) = &r.mutability {
                    self.diags.error(m.span(), "`&mut` is not supported: model values are immutable");
                }
                self.eval(&r.expr)
            }
            syn::Expr::Block(b) => {
                if let Some(label) = &b.label {
                    self.diags.error(label.span(), "labelled blocks are not supported");
                }
                self.eval_block(&b.block)
            }
            syn::Expr::Tuple(t) => Value::Tuple(t.elems.iter().map(|e| self.eval(e)).collect()),
            syn::Expr::Field(f) => self.eval_field(f),
            syn::Expr::Index(i) => self.eval_index(i),
            syn::Expr::Binary(b) => self.eval_binary(b),
            syn::Expr::Unary(u) => self.eval_unary(u),
            syn::Expr::Cast(c) => match eval_const(e, &self.src.consts, &self.instance_generics()) {
                Ok(v) => Value::Const(v),
                Err(_) => {
                    self.diags.error(
                        c.span(),
                        "`as` casts work on constants only; convert tensors with `.to_f32()`",
                    );
                    Value::Poison
                }
            },
            syn::Expr::MethodCall(m) => self.eval_method(m),
            syn::Expr::Call(c) => self.eval_call(c),
            syn::Expr::Assign(a) => {
                let v = self.eval(&a.right);
                match a.left.as_ref() {
                    syn::Expr::Path(p) if p.path.get_ident().is_some() => {
                        let name = p.path.get_ident().map(|i| i.to_string()).unwrap_or_default();
                        if !self.assign(&name, v) {
                            self.diags.error(p.span(), format!("`{name}` is not declared; write `let {name} = ...`"));
                        }
                    }
                    syn::Expr::Field(f) if is_self(&f.base) => self.diags.error(
                        f.span(),
                        "`forward` cannot mutate `self`: parameters are fixed; bind a new name with `let`",
                    ),
                    other => self
                        .diags
                        .error(other.span(), "only a local name can be assigned"),
                }
                Value::Unit
            }
            syn::Expr::ForLoop(f) => {
                self.eval_for(f);
                Value::Unit
            }
            syn::Expr::If(i) => self.eval_if(i),
            syn::Expr::Match(m) => self.eval_match(m),
            syn::Expr::While(w) => {
                self.diags.error(
                    w.while_token.span(),
                    "`while` loops depend on run-time data and cannot be compiled into a static graph; use `for i in 0..N` with a constant N",
                );
                Value::Poison
            }
            syn::Expr::Loop(l) => {
                self.diags.error(
                    l.loop_token.span(),
                    "`loop` cannot be compiled into a static graph; use `for i in 0..N` with a constant N",
                );
                Value::Poison
            }
            syn::Expr::Break(b) => {
                self.diags.error(b.span(), "`break` is data-dependent control flow; loops are unrolled in full");
                Value::Poison
            }
            syn::Expr::Continue(c) => {
                self.diags.error(c.span(), "`continue` is data-dependent control flow; loops are unrolled in full");
                Value::Poison
            }
            syn::Expr::Return(r) => {
                self.diags.error(
                    r.span(),
                    "early `return` inside a branch cannot be compiled; compute both values and pick one with `where_(mask, a, b)`",
                );
                Value::Poison
            }
            syn::Expr::Closure(c) => {
                self.diags.error(c.or1_token.span(), "closures are not supported in a model; write a method on the model instead");
                Value::Poison
            }
            syn::Expr::Macro(m) => {
                self.diags.error(
                    m.mac.path.span(),
                    "macros are not supported in `forward` (nothing runs at capture time); remove it",
                );
                Value::Poison
            }
            syn::Expr::Unsafe(u) => {
                self.diags.error(u.unsafe_token.span(), "`unsafe` is not supported in a model");
                Value::Poison
            }
            syn::Expr::Async(a) => {
                self.diags.error(a.async_token.span(), "`async` is not supported in a model");
                Value::Poison
            }
            syn::Expr::Await(a) => {
                self.diags.error(a.await_token.span(), "`.await` is not supported in a model");
                Value::Poison
            }
            syn::Expr::Array(a) => {
                self.diags.error(a.span(), "an array is only allowed as an argument of `permute`, `reshape` or `concat`");
                Value::Poison
            }
            other => {
                self.diags.error(other.span(), "this expression is not supported in a model");
                Value::Poison
            }
        }
    }

    fn eval_path(&mut self, p: &syn::ExprPath) -> Value {
        let Some(ident) = p.path.get_ident() else {
            self.diags.error(p.span(), "paths are not supported here; use a local name or a constant of the module");
            return Value::Poison;
        };
        let name = ident.to_string();
        if let Some(v) = self.lookup(&name) {
            return v;
        }
        if let Some(sym) = self.g.dyn_dims.iter().position(|d| *d == name) {
            return Value::Dim(Dim::symbol(sym as u16));
        }
        if let Some(c) = self.instance_generics().get(&name).or_else(|| self.src.consts.get(&name)) {
            return Value::Const(c.clone());
        }
        let hint = if name.chars().next().is_some_and(|c| c.is_ascii_uppercase()) {
            " (a static, a function or a constant outside the model cannot be used; declare a `const` in the module)"
        } else {
            ""
        };
        self.diags.error(ident.span(), format!("cannot find `{name}` in this model{hint}"));
        Value::Poison
    }

    fn eval_field(&mut self, f: &syn::ExprField) -> Value {
        let base = self.eval(&f.base);
        let Value::Model(inst) = base else {
            if !matches!(base, Value::Poison) {
                self.diags.error(f.span(), "field access works on the model (`self.weight`) only");
            }
            return Value::Poison;
        };
        let syn::Member::Named(name) = &f.member else {
            self.diags.error(f.member.span(), "model fields are named");
            return Value::Poison;
        };
        let def = &self.src.structs[inst.def];
        let Some(field) = def.fields.iter().find(|fd| fd.name == *name) else {
            self.diags.error(name.span(), format!("model `{}` has no field `{name}`", def.name));
            return Value::Poison;
        };
        match &field.kind {
            FieldKind::Tensor { .. } => {
                let path = join(&inst.path, &field.checkpoint_name);
                self.param(&path, f.span())
            }
            FieldKind::Model { .. } => match self.children(&inst, &name.to_string()).pop() {
                Some(child) => Value::Model(child),
                None => Value::Poison,
            },
            FieldKind::Models { .. } => Value::Models(self.children(&inst, &name.to_string())),
        }
    }

    fn eval_index(&mut self, i: &syn::ExprIndex) -> Value {
        let base = self.eval(&i.expr);
        let index = self.eval(&i.index);
        match (base, index) {
            (Value::Models(ms), Value::Const(ConstVal::Int(k))) => {
                match usize::try_from(k).ok().and_then(|k| ms.get(k)) {
                    Some(m) => Value::Model(m.clone()),
                    None => {
                        self.diags.error(i.index.span(), format!("index {k} is out of range for an array of {} models", ms.len()));
                        Value::Poison
                    }
                }
            }
            (Value::Models(_), Value::Poison) | (Value::Poison, _) => Value::Poison,
            (Value::Models(_), _) => {
                self.diags.error(i.index.span(), "a model array index must be a constant (e.g. the variable of `for i in 0..N`)");
                Value::Poison
            }
            _ => {
                self.diags.error(i.span(), "indexing works on arrays of sub-models; use `.slice(axis, start, end)` on tensors");
                Value::Poison
            }
        }
    }

    fn eval_binary(&mut self, b: &syn::ExprBinary) -> Value {
        let l = self.eval(&b.left);
        let r = self.eval(&b.right);
        let op = match &b.op {
            syn::BinOp::Add(_) => BinaryOp::Add,
            syn::BinOp::Sub(_) => BinaryOp::Sub,
            syn::BinOp::Mul(_) => BinaryOp::Mul,
            syn::BinOp::Div(_) => BinaryOp::Div,
            syn::BinOp::AddAssign(_) | syn::BinOp::SubAssign(_) | syn::BinOp::MulAssign(_) | syn::BinOp::DivAssign(_) => {
                self.diags.error(b.op.span(), "compound assignment is not supported; write `x = x + y`");
                return Value::Poison;
            }
            _ => BinaryOp::Eq, // placeholder: only constants reach the other operators
        };
        match (&l, &r) {
            (Value::Poison, _) | (_, Value::Poison) => Value::Poison,
            (Value::Const(_), Value::Const(_)) => {
                match eval_const(&syn::Expr::Binary(b.clone()), &self.src.consts, &self.instance_generics()) {
                    Ok(c) => Value::Const(c),
                    Err(e) => {
                        self.diags.push(e);
                        Value::Poison
                    }
                }
            }
            (Value::Dim(_) | Value::Const(ConstVal::Int(_)), Value::Dim(_) | Value::Const(ConstVal::Int(_)))
                if op == BinaryOp::Mul =>
            {
                match (dim_of(&l), dim_of(&r)) {
                    (Some(a), Some(b)) => Value::Dim(a.mul(&b)),
                    _ => Value::Poison,
                }
            }
            _ if !matches!(b.op, syn::BinOp::Add(_) | syn::BinOp::Sub(_) | syn::BinOp::Mul(_) | syn::BinOp::Div(_)) => {
                self.diags.error(
                    b.op.span(),
                    "this operator does not apply to tensors; comparisons are methods (`x.gt(&y)`), which give masks for `where_`",
                );
                Value::Poison
            }
            _ => {
                let (Some(x), Some(y)) = (self.operand(&l, b.left.span()), self.operand(&r, b.right.span())) else {
                    return Value::Poison;
                };
                self.add(Op::Binary(op, x, y), b.span())
            }
        }
    }

    fn eval_unary(&mut self, u: &syn::ExprUnary) -> Value {
        let v = self.eval(&u.expr);
        match (&u.op, v) {
            (_, Value::Poison) => Value::Poison,
            (syn::UnOp::Neg(_), Value::Tensor(id)) => self.add(Op::Unary(UnaryOp::Neg, id), u.span()),
            (syn::UnOp::Deref(_), v) => v,
            (_, Value::Const(_)) => match eval_const(&syn::Expr::Unary(u.clone()), &self.src.consts, &self.instance_generics()) {
                Ok(c) => Value::Const(c),
                Err(e) => {
                    self.diags.push(e);
                    Value::Poison
                }
            },
            _ => {
                self.diags.error(u.op.span(), "this operator does not apply to tensors here");
                Value::Poison
            }
        }
    }

    fn eval_for(&mut self, f: &syn::ExprForLoop) {
        if let Some(label) = &f.label {
            self.diags.error(label.span(), "labelled loops are not supported");
        }
        let items: Vec<Value> = match f.expr.as_ref() {
            syn::Expr::Range(r) => {
                let generics = self.instance_generics();
                let bound = |e: &Option<Box<syn::Expr>>| e.as_ref().map(|e| eval_const(e, &self.src.consts, &generics));
                match (bound(&r.start), bound(&r.end)) {
                    (Some(Ok(ConstVal::Int(a))), Some(Ok(ConstVal::Int(b)))) => {
                        let end = if matches!(r.limits, syn::RangeLimits::Closed(_)) { b + 1 } else { b };
                        (a..end).map(|i| Value::Const(ConstVal::Int(i))).collect()
                    }
                    _ => {
                        self.diags.error(
                            r.span(),
                            "a `for` range must have constant bounds (module consts or literals) so the loop can be unrolled",
                        );
                        return;
                    }
                }
            }
            other => {
                let target = match other {
                    syn::Expr::MethodCall(m) if m.method == "iter" && m.args.is_empty() => self.eval(&m.receiver),
                    e => self.eval(e),
                };
                match target {
                    Value::Models(ms) => ms.into_iter().map(Value::Model).collect(),
                    Value::Poison => return,
                    _ => {
                        self.diags.error(
                            f.expr.span(),
                            "`for` iterates over a constant range or an array of sub-models (`&self.layers`) only",
                        );
                        return;
                    }
                }
            }
        };
        for item in items {
            let mark = self.scopes.last().map_or(0, |s| s.vars.len());
            self.bind_pat(&f.pat, item);
            self.eval_block(&f.body);
            if let Some(scope) = self.scopes.last_mut() {
                scope.vars.truncate(mark);
            }
        }
    }

    fn const_condition(&mut self, cond: &syn::Expr, what: &str) -> Option<bool> {
        match self.eval(cond) {
            Value::Const(ConstVal::Bool(b)) => Some(b),
            Value::Poison => None,
            Value::Tensor(_) => {
                self.diags.error(
                    cond.span(),
                    format!("`{what}` on a tensor value depends on run-time data; compute both branches and pick with `where_(mask, a, b)`"),
                );
                None
            }
            _ => {
                self.diags.error(cond.span(), format!("the condition of `{what}` must be a constant bool"));
                None
            }
        }
    }

    fn eval_if(&mut self, i: &syn::ExprIf) -> Value {
        let Some(cond) = self.const_condition(&i.cond, "if") else {
            return Value::Poison;
        };
        if cond {
            self.eval_block(&i.then_branch)
        } else if let Some((_, els)) = &i.else_branch {
            self.eval(els)
        } else {
            Value::Unit
        }
    }

    fn eval_match(&mut self, m: &syn::ExprMatch) -> Value {
        let scrutinee = match self.eval(&m.expr) {
            Value::Const(c) => c,
            Value::Poison => return Value::Poison,
            _ => {
                self.diags.error(
                    m.expr.span(),
                    "`match` on a tensor or input depends on run-time data; match on a constant, or use `where_(mask, a, b)`",
                );
                return Value::Poison;
            }
        };
        for arm in &m.arms {
            if arm.guard.is_some() {
                self.diags.error(arm.pat.span(), "match guards are not supported");
                return Value::Poison;
            }
            let hit = match &arm.pat {
                syn::Pat::Wild(_) => true,
                syn::Pat::Lit(l) => lit_value(&l.lit).is_ok_and(|v| v == scrutinee),
                syn::Pat::Ident(p) => self.src.consts.get(&p.ident.to_string()) == Some(&scrutinee),
                other => {
                    self.diags.error(other.span(), "match arms on constants use literals, constant names or `_`");
                    return Value::Poison;
                }
            };
            if hit {
                return self.eval(&arm.body);
            }
        }
        self.diags.error(m.span(), "no arm of this `match` matches the constant");
        Value::Poison
    }
}

fn dim_of(v: &Value) -> Option<Dim> {
    match v {
        Value::Dim(d) => Some(d.clone()),
        Value::Const(ConstVal::Int(n)) if *n > 0 => Some(Dim::fixed(*n as usize)),
        _ => None,
    }
}

fn is_self(e: &syn::Expr) -> bool {
    matches!(e, syn::Expr::Path(p) if p.path.is_ident("self"))
}

fn is_tensor_or_tuple(ty: &syn::Type) -> bool {
    match ty {
        syn::Type::Path(p) => p.path.segments.last().is_some_and(|s| s.ident == "Tensor"),
        syn::Type::Tuple(t) => !t.elems.is_empty() && t.elems.iter().all(is_tensor_or_tuple),
        syn::Type::Paren(p) => is_tensor_or_tuple(&p.elem),
        _ => false,
    }
}

mod calls;
