//! Lowers a root model's `forward` to a [`Graph`] by symbolic evaluation: sub-model calls are inlined, `for` loops
//! over constant ranges and model arrays are unrolled, `if`/`match` on constants pick their branch. Anything that
//! would need data at run time is a spanned error that says what to write instead.
//!
//! The phases live in their own files: `entry` (the root `forward`'s signature, inputs and outputs), `instances`
//! (the tree of sub-models and its parameters), `stmts` (bodies, patterns, static control flow), `exprs` (names,
//! fields, operators, casts), `unsupported` (what cannot be compiled, and what to write instead), `calls` (model
//! methods and built-in functions), `ops` (tensor methods) and `views` (the array arguments of views).
//!
//! Errors are collected, never thrown: a failed expression evaluates to [`Value::Poison`], which every consumer
//! passes on silently, so each mistake is reported once, on its own tokens, and lowering goes on to find the next.

use std::collections::BTreeMap;

use proc_macro2::Span;

use super::consts::ConstVal;
use super::diag::{At, Diagnostics};
use super::model::ModelSource;
use crate::ir::{DType, Dim, Graph, Node, NodeId, Op, Shape, TensorType};

mod calls;
mod entry;
mod exprs;
mod instances;
mod ops;
mod stmts;
mod unsupported;
mod views;

/// Deepest chain of inlined calls before we call it recursion.
const MAX_CALL_DEPTH: usize = 48;
/// Work limits. The macro runs inside rustc, so a loop bound or array length typed a few digits too long must
/// become an error, not a build that hangs or exhausts memory. Real models stay far below these (an encoder layer
/// is ~60 nodes and a few hundred evaluation steps).
const MAX_STEPS: usize = 500_000;
const MAX_NODES: usize = 50_000;
const MAX_PARAMS: usize = 50_000;
const MAX_MODEL_ARRAY: i64 = 4096;

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
    /// A dim that involves a dynamic dim (`batch`, `batch * seq`); static dims are `Const(Int)`.
    Dim(Dim),
    Model(Instance),
    Models(instances::Children),
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
    /// `#[state]` fields by checkpoint path, their nodes, and where each was written (once per call at most).
    state_index: BTreeMap<String, u32>,
    state_nodes: BTreeMap<u32, NodeId>,
    state_writes: BTreeMap<u32, At>,
    scopes: Vec<Scope>,
    call_stack: Vec<String>,
    /// Evaluation steps so far, against [`MAX_STEPS`].
    steps: usize,
    /// The work limit was hit and reported; everything after evaluates to `Poison` at once.
    gave_up: bool,
    /// The `for` loops being unrolled, outermost first: a blown work limit is reported on the outermost one.
    loops: Vec<At>,
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
            state_index: BTreeMap::new(),
            state_nodes: BTreeMap::new(),
            state_writes: BTreeMap::new(),
            scopes: Vec::new(),
            call_stack: Vec::new(),
            steps: 0,
            gave_up: false,
            loops: Vec::new(),
        }
    }

    /// Counts one unit of work; false once the limit is hit (reported once, on the outermost loop if any).
    fn step(&mut self, here: &syn::Expr) -> bool {
        if self.gave_up {
            return false;
        }
        self.steps += 1;
        if self.steps <= MAX_STEPS && self.g.nodes.len() <= MAX_NODES {
            return true;
        }
        self.gave_up = true;
        let at = self.loops.first().copied().unwrap_or_else(|| At::of(here));
        self.diags.error(
            at,
            format!(
                "`forward` unrolls into more than {} operations here (loops × calls × ops), more than the compiler \
                 will unroll; is a loop bound or a model array length larger than intended?",
                if self.steps > MAX_STEPS { MAX_STEPS } else { MAX_NODES }
            ),
        );
        false
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

    fn current_instance(&self) -> Option<Instance> {
        match self.lookup("self") {
            Some(Value::Model(inst)) => Some(inst),
            _ => None,
        }
    }

    fn instance_generics(&self) -> BTreeMap<String, ConstVal> {
        self.current_instance()
            .map(|i| i.generics)
            .unwrap_or_default()
    }

    // ---- nodes ----

    /// Adds an op; a type error is reported on `at`, with the instance it happened in when that is not the root.
    fn add(&mut self, op: Op, at: At) -> Value {
        match self.g.add(op, at.start) {
            Ok(id) => Value::Tensor(id),
            Err(e) => {
                let context = match self.current_instance() {
                    Some(inst) if !inst.path.is_empty() => {
                        format!(" (in `{}`{})", inst.path, fmt_generics(&inst.generics))
                    }
                    _ => String::new(),
                };
                self.diags.error(at, format!("{e}{context}"));
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
    fn operand(&mut self, v: &Value, at: At) -> Option<NodeId> {
        match v {
            Value::Tensor(id) => Some(*id),
            Value::Const(c) => match c.as_f64() {
                Some(f) => {
                    let f = self.finite_f32(f, at)?;
                    Some(self.scalar(f, at.start))
                }
                None => {
                    self.diags.error(
                        at,
                        "a bool constant cannot be used as a tensor; pick between tensors with `if` on the constant",
                    );
                    None
                }
            },
            Value::Poison => None,
            other => {
                let what = self.describe(other);
                let hint = match other {
                    Value::Model(_) => "; call it, e.g. `self.layer.forward(&x)`",
                    Value::Models(_) => "; index it with a constant or loop over it with `for layer in &self.layers`",
                    Value::Dim(_) => "; a dynamic dim is only known at run time and can size a `reshape`, not \
                                      be a value",
                    _ => "",
                };
                self.diags
                    .error(at, format!("expected a tensor here, found {what}{hint}"));
                None
            }
        }
    }

    /// Tensors hold f32: a constant that becomes part of the graph must be a finite f32, or the kernels would
    /// compute with inf/NaN (and the writers could not spell it as a literal).
    fn finite_f32(&mut self, v: f64, at: At) -> Option<f64> {
        if v.is_finite() && v.abs() <= f32::MAX as f64 {
            return Some(v);
        }
        self.diags.error(
            at,
            format!("the constant {v:?} does not fit in an f32, the element type of tensors; use a finite value \
                     below 3.4e38"),
        );
        None
    }

    fn param(&mut self, path: &str, span: Span) -> Value {
        let Some(&index) = self.param_index.get(path) else {
            return Value::Poison;
        };
        if let Some(&id) = self.param_nodes.get(&index) {
            return Value::Tensor(id);
        }
        let Some(info) = self.g.params.get(index as usize) else {
            return Value::Poison;
        };
        let ty = info.ty.clone();
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

    /// The value a `#[state]` field holds when the call starts (one node per state).
    fn state(&mut self, path: &str, span: Span) -> Value {
        let Some(&index) = self.state_index.get(path) else {
            return Value::Poison;
        };
        if let Some(&id) = self.state_nodes.get(&index) {
            return Value::Tensor(id);
        }
        let Some(info) = self.g.states.get(index as usize) else {
            return Value::Poison;
        };
        let ty = info.ty.clone();
        let id = self.g.push(
            Node {
                op: Op::State(index),
                ty,
            },
            span,
        );
        self.state_nodes.insert(index, id);
        Value::Tensor(id)
    }

    /// A value as a message names it.
    fn describe(&self, v: &Value) -> String {
        match v {
            Value::Tensor(id) => {
                let ty = self.g.ty(*id);
                let article = if ty.dtype == DType::Bool { "a" } else { "an" };
                format!(
                    "{article} {} tensor {}",
                    ty.dtype.name(),
                    self.g.fmt_shape(&ty.shape)
                )
            }
            Value::Const(c) => format!("the constant `{c}`"),
            Value::Dim(d) => format!("the dynamic dim `{}`", self.g.fmt_dim(d)),
            Value::Model(inst) => format!(
                "the sub-model `{}` ({})",
                inst.path, self.src.structs[inst.def].name
            ),
            Value::Models(ms) => format!("an array of {} sub-models", ms.len),
            Value::Tuple(vs) => format!("a tuple of {} values", vs.len()),
            Value::Unit => "`()` (nothing)".to_string(),
            Value::Poison => "an erroneous value".to_string(),
        }
    }
}

/// `<IN = 8, OUT = 4>` for a message, or nothing.
fn fmt_generics(generics: &BTreeMap<String, ConstVal>) -> String {
    if generics.is_empty() {
        return String::new();
    }
    let parts: Vec<String> = generics.iter().map(|(k, v)| format!("{k} = {v}")).collect();
    format!(", with {}", parts.join(", "))
}

/// A static dim as a constant, any other as a [`Value::Dim`].
fn dim_value(d: &Dim) -> Value {
    match d.as_static() {
        Some(n) => Value::Const(ConstVal::Int(n as i64)),
        None => Value::Dim(d.clone()),
    }
}

/// A value usable as a shape dim: a positive integer constant or a dynamic dim.
fn dim_of(v: &Value) -> Option<Dim> {
    match v {
        Value::Dim(d) => Some(d.clone()),
        Value::Const(ConstVal::Int(n)) if *n > 0 => Some(Dim::fixed(*n as usize)),
        _ => None,
    }
}

fn is_self(e: &syn::Expr) -> bool {
    match e {
        syn::Expr::Path(p) => p.path.is_ident("self"),
        syn::Expr::Paren(p) => is_self(&p.expr),
        _ => false,
    }
}

/// The closest of `candidates` to `name` by edit distance, for "did you mean" hints.
fn closest<'c>(name: &str, candidates: impl IntoIterator<Item = &'c str>) -> Option<&'c str> {
    let limit = (name.len() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(name, c), c))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, &cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// The shape of the first output of a one-struct model whose `forward` is `forward` (its signature and body), or its
/// capture errors: what the lowering's tests check.
#[cfg(test)]
fn output_shape(forward: &str) -> Result<String, String> {
    let source = format!(
        "#[fused_model] mod m {{ pub struct M {{}} impl M {{ pub fn forward{forward} }} }}"
    );
    let capture = crate::front::capture_str(&source).map_err(|e| e.to_string())?;
    if let Some(errors) = capture.errors {
        return Err(errors.to_string());
    }
    let g = &capture.models[0].graph;
    Ok(g.fmt_shape(&g.ty(g.outputs[0]).shape))
}
