//! The one IR: a closed set of ops in a typed arena, with types (dtype + symbolic shape) inferred as nodes are added.
//!
//! Every node is added through [`Graph::add`], which runs shape and dtype inference and refuses ill-typed ops, so a
//! `Graph` that exists is well-typed. Spans live in a side table ([`Graph::span`]) so diagnostics can point at the
//! user's code without the IR caring about syntax.

use std::fmt;

/// Index of a node in its [`Graph`]. Nodes are only ever appended, so a handle always points backwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl NodeId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// Element types. Masks (`Bool`) are stored as f32 0.0/1.0 so every kernel computes in f32; `I64` only feeds
/// `embedding` and `to_f32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    I64,
    Bool,
}

impl DType {
    /// Bytes per element in a buffer.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::Bool => 4,
            DType::I64 => 8,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::I64 => "i64",
            DType::Bool => "bool",
        }
    }
}

/// A dimension: `coeff × product of dynamic symbols`. A static dim has no symbols; `batch` is `1 × batch`; a
/// reshape to `[batch * seq, 384]` gives `1 × batch·seq`. Symbols index [`Graph::dyn_dims`], kept sorted.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Dim {
    pub coeff: usize,
    pub syms: Vec<u16>,
}

impl Dim {
    pub fn fixed(n: usize) -> Dim {
        Dim {
            coeff: n,
            syms: Vec::new(),
        }
    }

    pub fn symbol(sym: u16) -> Dim {
        Dim {
            coeff: 1,
            syms: vec![sym],
        }
    }

    pub fn as_static(&self) -> Option<usize> {
        self.syms.is_empty().then_some(self.coeff)
    }

    pub fn is_one(&self) -> bool {
        self.as_static() == Some(1)
    }

    pub fn mul(&self, other: &Dim) -> Dim {
        let mut syms = self.syms.clone();
        syms.extend_from_slice(&other.syms);
        syms.sort_unstable();
        Dim {
            coeff: self.coeff * other.coeff,
            syms,
        }
    }

    /// `self / part` when `part` divides it as a monomial (its coefficient divides, its symbols are among
    /// `self`'s), else `None`.
    pub fn divide(&self, part: &Dim) -> Option<Dim> {
        if part.coeff == 0 || !self.coeff.is_multiple_of(part.coeff) {
            return None;
        }
        let mut syms = self.syms.clone();
        for s in &part.syms {
            let i = syms.iter().position(|t| t == s)?;
            syms.remove(i);
        }
        Some(Dim {
            coeff: self.coeff / part.coeff,
            syms,
        })
    }

    /// Value of this dim once the dynamic dims are known.
    pub fn eval(&self, dyn_values: &[usize]) -> usize {
        self.syms
            .iter()
            .fold(self.coeff, |acc, &s| acc * dyn_values[s as usize])
    }
}

/// A shape: a list of dims, outermost first. A scalar has no dims.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Shape(pub Vec<Dim>);

impl Shape {
    pub fn scalar() -> Shape {
        Shape(Vec::new())
    }

    pub fn rank(&self) -> usize {
        self.0.len()
    }

    pub fn dims(&self) -> &[Dim] {
        &self.0
    }

    /// The element count as one monomial.
    pub fn numel(&self) -> Dim {
        self.0.iter().fold(Dim::fixed(1), |acc, d| acc.mul(d))
    }

    pub fn eval(&self, dyn_values: &[usize]) -> Vec<usize> {
        self.0.iter().map(|d| d.eval(dyn_values)).collect()
    }

    pub fn last(&self) -> Option<&Dim> {
        self.0.last()
    }
}

/// The type of a node's value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Shape,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Abs,
    Exp,
    Log,
    Sqrt,
    Rsqrt,
    Tanh,
    Sigmoid,
    Relu,
    /// GELU, erf form: `x/2 · (1 + erf(x/√2))`.
    Gelu,
    /// GELU, tanh approximation: `x/2 · (1 + tanh(√(2/π)(x + 0.044715x³)))`.
    GeluTanh,
    Silu,
    /// The error function, `2/√π ∫₀ˣ e^(−t²) dt` (PyTorch's `erf`; GELU written out by hand uses it).
    Erf,
    /// Sine and cosine in radians, accurate over every finite f32 (rotary embeddings reach 10⁵ and beyond).
    Sin,
    Cos,
    /// Rounding to an integral value, as PyTorch's `floor`, `ceil`, `round` (half to even) and `trunc` (toward
    /// zero); NaN and ±∞ pass through. With comparisons, they make integer-valued f32 (bucket indices from
    /// positions, as T5's and MPNet's relative position biases compute them).
    Floor,
    Ceil,
    Round,
    Trunc,
}

impl UnaryOp {
    pub const ALL: [UnaryOp; 19] = [
        UnaryOp::Neg,
        UnaryOp::Abs,
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Rsqrt,
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Relu,
        UnaryOp::Gelu,
        UnaryOp::GeluTanh,
        UnaryOp::Silu,
        UnaryOp::Erf,
        UnaryOp::Sin,
        UnaryOp::Cos,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Round,
        UnaryOp::Trunc,
    ];

    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Relu => "relu",
            UnaryOp::Gelu => "gelu",
            UnaryOp::GeluTanh => "gelu_tanh",
            UnaryOp::Silu => "silu",
            UnaryOp::Erf => "erf",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Floor => "floor",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Round => "round",
            UnaryOp::Trunc => "trunc",
        }
    }

    pub fn from_name(name: &str) -> Option<UnaryOp> {
        UnaryOp::ALL.into_iter().find(|op| op.name() == name)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    Pow,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl BinaryOp {
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge | BinaryOp::Eq | BinaryOp::Ne
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Max => "max",
            BinaryOp::Min => "min",
            BinaryOp::Pow => "pow",
            BinaryOp::Lt => "lt",
            BinaryOp::Le => "le",
            BinaryOp::Gt => "gt",
            BinaryOp::Ge => "ge",
            BinaryOp::Eq => "eq",
            BinaryOp::Ne => "ne",
        }
    }

    /// The method names users write for the non-operator binaries.
    pub fn from_method(name: &str) -> Option<BinaryOp> {
        Some(match name {
            "add" => BinaryOp::Add,
            "sub" => BinaryOp::Sub,
            "mul" => BinaryOp::Mul,
            "div" => BinaryOp::Div,
            "max" => BinaryOp::Max,
            "min" => BinaryOp::Min,
            "pow" => BinaryOp::Pow,
            "lt" => BinaryOp::Lt,
            "le" => BinaryOp::Le,
            "gt" => BinaryOp::Gt,
            "ge" => BinaryOp::Ge,
            "eq" => BinaryOp::Eq,
            "ne" => BinaryOp::Ne,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    Sum,
    Mean,
    Max,
}

impl ReduceOp {
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
        }
    }
}

/// The closed op set. Semantics of each op are written in `ARCHITECTURE.md` ("Op semantics").
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// The `index`-th input of `forward`.
    Input(u32),
    /// The `index`-th parameter of the model (see [`Graph::params`]).
    Param(u32),
    /// The value the `index`-th state (see [`Graph::states`]) holds when the call starts.
    State(u32),
    /// `self.cache.write(axis, start, value)`: the state with elements `[start, start + len)` of `axis` replaced
    /// by `value` (`len` its length there). Functional in the graph; in the plan a kernel that writes `value`
    /// into the state's buffer in place, which every reader of the result then reads.
    Write {
        state: NodeId,
        axis: usize,
        start: Dim,
        value: NodeId,
    },
    /// `arange(start, len)`: the i64 values `start, start + 1, .., start + len - 1` (shape `[len]`), both bounds
    /// dims (constants or dims bound at run time, such as `past`). A leaf: its values depend only on the dims, so
    /// the runtime writes them into a buffer of their own when the dims are bound, and kernels read it as any
    /// other leaf (positions and causal masks made inside a model).
    Arange {
        start: Dim,
        len: Dim,
    },
    /// A scalar f32 constant (shape `[]`), broadcast wherever it is used.
    Scalar(f64),
    Unary(UnaryOp, NodeId),
    /// NumPy broadcasting of both operands; comparisons give `Bool`.
    Binary(BinaryOp, NodeId, NodeId),
    /// `where_(mask, a, b)`: `a` where mask is true (non-zero), else `b`; all three broadcast.
    Where(NodeId, NodeId, NodeId),
    /// `to_f32()`: ids or masks to f32.
    Cast(NodeId, DType),
    Reduce {
        op: ReduceOp,
        input: NodeId,
        axis: usize,
        keepdim: bool,
    },
    /// Numerically stable softmax along `axis`.
    Softmax {
        input: NodeId,
        axis: usize,
    },
    /// `x.cumsum(axis)`: the running sum along `axis` (element `j` is the sum of elements `0..=j`), same shape.
    /// Summed in f64 on the CPU, as PyTorch's CPU kernel does, and in f32 on the GPU, as PyTorch's CUDA one does.
    Cumsum {
        input: NodeId,
        axis: usize,
    },
    /// Layer norm over the last axis: `(x - mean) / sqrt(var + eps) * gamma + beta`, biased variance.
    LayerNorm {
        input: NodeId,
        gamma: NodeId,
        beta: NodeId,
        eps: f64,
    },
    /// RMS norm over the last axis: `x / sqrt(mean(x²) + eps) * gamma`.
    RmsNorm {
        input: NodeId,
        gamma: NodeId,
        eps: f64,
    },
    /// Matrix product over the last two axes, broadcasting the leading ones. Transposed operands are `Permute`s.
    MatMul(NodeId, NodeId),
    /// `out.dims[i] = in.dims[perm[i]]`. A view: no data moves unless a consumer needs it contiguous.
    Permute {
        input: NodeId,
        perm: Vec<usize>,
    },
    /// Same elements, row-major order kept, new shape (equal element count).
    Reshape {
        input: NodeId,
        shape: Shape,
    },
    /// Elements `start..start + len` of `axis` (`slice(axis, start, end)` and `narrow(axis, start, len)`). Both
    /// are monomials, so a slice may start at a dim bound at run time (`past`); a bound that cannot be proved at
    /// build time is checked when the dims are bound ([`crate::plan::bounds`]).
    Slice {
        input: NodeId,
        axis: usize,
        start: Dim,
        len: Dim,
    },
    /// Concatenation along `axis`; all other dims equal.
    Concat {
        inputs: Vec<NodeId>,
        axis: usize,
    },
    /// Rows of `table` (`[V, D]`) picked by integer `ids` (any shape; i64, or f32 whole numbers the model computed
    /// and [`crate::id_range`] bounds) → `ids.shape + [D]`. Out-of-range ids give
    /// zeros in the CPU kernels and an error in the reference; ids come from users, so inputs are validated at run
    /// time before launch.
    Embedding {
        table: NodeId,
        ids: NodeId,
    },
}

impl Op {
    /// The nodes this op reads, in a fixed order.
    pub fn operands(&self) -> Vec<NodeId> {
        match self {
            Op::Input(_) | Op::Param(_) | Op::State(_) | Op::Arange { .. } | Op::Scalar(_) => {
                Vec::new()
            }
            Op::Write { state, value, .. } => vec![*state, *value],
            Op::Unary(_, a) | Op::Cast(a, _) => vec![*a],
            Op::Binary(_, a, b) | Op::MatMul(a, b) => vec![*a, *b],
            Op::Where(m, a, b) => vec![*m, *a, *b],
            Op::Reduce { input, .. }
            | Op::Softmax { input, .. }
            | Op::Cumsum { input, .. }
            | Op::Permute { input, .. }
            | Op::Reshape { input, .. }
            | Op::Slice { input, .. } => vec![*input],
            Op::LayerNorm {
                input, gamma, beta, ..
            } => vec![*input, *gamma, *beta],
            Op::RmsNorm { input, gamma, .. } => vec![*input, *gamma],
            Op::Concat { inputs, .. } => inputs.clone(),
            Op::Embedding { table, ids } => vec![*table, *ids],
        }
    }

    /// Ops computed one element at a time from the same element of their (broadcast) operands.
    pub fn is_elementwise(&self) -> bool {
        matches!(
            self,
            Op::Unary(..) | Op::Binary(..) | Op::Where(..) | Op::Cast(..) | Op::Scalar(_)
        )
    }

    /// Ops that only re-index their input (no arithmetic): consumers can read through them with strides.
    pub fn is_view(&self) -> bool {
        matches!(
            self,
            Op::Permute { .. } | Op::Reshape { .. } | Op::Slice { .. }
        )
    }

    /// An elementwise op of a few operations per element, cheap enough to compute again in each kernel that reads
    /// it rather than to store once: casts, selections, comparisons, additive and multiplicative ops, `neg`, `abs`,
    /// `relu`, rounding to an integer. Transcendental ops, divisions and powers are not.
    pub fn is_cheap_to_recompute(&self) -> bool {
        match self {
            Op::Cast(..) | Op::Where(..) => true,
            Op::Unary(u, _) => matches!(
                u,
                UnaryOp::Neg
                    | UnaryOp::Abs
                    | UnaryOp::Relu
                    | UnaryOp::Floor
                    | UnaryOp::Ceil
                    | UnaryOp::Round
                    | UnaryOp::Trunc
            ),
            Op::Binary(b, ..) => !matches!(b, BinaryOp::Div | BinaryOp::Pow),
            _ => false,
        }
    }

    pub fn is_leaf(&self) -> bool {
        matches!(
            self,
            Op::Input(_) | Op::Param(_) | Op::State(_) | Op::Arange { .. }
        )
    }

    /// A short name for dumps and reports.
    pub fn name(&self) -> String {
        match self {
            Op::Input(i) => format!("input{i}"),
            Op::Param(i) => format!("param{i}"),
            Op::State(i) => format!("state{i}"),
            Op::Write { .. } => "write".into(),
            Op::Arange { .. } => "arange".into(),
            Op::Scalar(v) => format!("const({v:?})"),
            Op::Unary(u, _) => u.name().to_string(),
            Op::Binary(b, ..) => b.name().to_string(),
            Op::Where(..) => "where".into(),
            Op::Cast(_, d) => format!("to_{}", d.name()),
            Op::Reduce { op, .. } => op.name().to_string(),
            Op::Softmax { .. } => "softmax".into(),
            Op::Cumsum { .. } => "cumsum".into(),
            Op::LayerNorm { .. } => "layer_norm".into(),
            Op::RmsNorm { .. } => "rms_norm".into(),
            Op::MatMul(..) => "matmul".into(),
            Op::Permute { .. } => "permute".into(),
            Op::Reshape { .. } => "reshape".into(),
            Op::Slice { .. } => "slice".into(),
            Op::Concat { .. } => "concat".into(),
            Op::Embedding { .. } => "embedding".into(),
        }
    }
}

/// A node: an op and its inferred type.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    pub ty: TensorType,
}

/// An input of `forward`, with its declared type.
#[derive(Clone, Debug, PartialEq)]
pub struct InputInfo {
    pub name: String,
    pub ty: TensorType,
    /// For a `#[dim] past: usize` argument, the dim symbol its value binds. Such an input has no node: its value
    /// (an i64 scalar at run time) only sizes and offsets views. `None` for a tensor input.
    pub binds: Option<u16>,
}

/// A model parameter: its checkpoint name (field path, renames applied) and type.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamInfo {
    pub name: String,
    pub ty: TensorType,
}

/// A captured `forward`: nodes in topological order (operands always come first), plus the side tables.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub nodes: Vec<Node>,
    spans: Vec<proc_macro2::Span>,
    /// Names of the dynamic dims, indexed by the symbols in [`Dim`].
    pub dyn_dims: Vec<String>,
    pub inputs: Vec<InputInfo>,
    pub params: Vec<ParamInfo>,
    /// The model's `#[state]` fields: buffers the caller's session owns, which `forward` may read and write.
    pub states: Vec<ParamInfo>,
    pub outputs: Vec<NodeId>,
    /// The `.fused()` promises of `forward`, checked against the fused plan (`crate::contract`).
    pub promises: Vec<FusedPromise>,
    /// Symbols that stand for a sum of dims (`past + seq`), in the order they were made; see [`DerivedDim`].
    pub derived: Vec<DerivedDim>,
}

/// A dynamic dim defined as a sum of monomials over the free symbols, less a constant (`past + seq`, `seq - 1`). A
/// `Dim` stays a monomial, so a sum is a symbol of its own, named by its definition: slot sizes, offsets and kernels
/// treat it like any symbol, and the runtime computes its value from the free ones after binding them (refusing a
/// call where the constant exceeds the sum). Sums are interned in the canonical form of [`Terms`], so `past + seq`
/// written twice, or made by a concat of a `past`-long and a `seq`-long tensor, is the same symbol and inference
/// compares it structurally.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DerivedDim {
    pub sym: u16,
    /// Monomials over free symbols only, sorted by symbols, each symbol set once: at least two, or one with a
    /// `less`.
    pub terms: Vec<Dim>,
    /// The constant subtracted (`seq - 1`: 1); 0 for a plain sum.
    pub less: usize,
}

/// `Σ terms − less` in canonical form: monomials over free symbols with like ones merged, sorted by their symbols
/// (a positive constant first), and a negative constant kept apart as `less`.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Terms {
    pub terms: Vec<Dim>,
    pub less: usize,
}

/// `expr.fused()`: every computing op the front end added while evaluating `expr` (the nodes `first..end`) must
/// end up in one kernel of the fused plan. Captures to nothing: it only constrains the plan.
#[derive(Clone, Debug)]
pub struct FusedPromise {
    pub first: NodeId,
    pub end: NodeId,
    /// From `fused` to the closing parenthesis of `.fused()`.
    pub start_span: proc_macro2::Span,
    pub end_span: proc_macro2::Span,
}

impl Graph {
    pub fn new() -> Graph {
        Graph::default()
    }

    /// A graph with this one's dims, inputs, parameters and states, and no nodes: for a pass that rebuilds the
    /// nodes (and then sets the outputs and promises).
    pub fn empty_like(&self) -> Graph {
        Graph {
            dyn_dims: self.dyn_dims.clone(),
            inputs: self.inputs.clone(),
            params: self.params.clone(),
            states: self.states.clone(),
            derived: self.derived.clone(),
            ..Graph::default()
        }
    }

    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    pub fn ty(&self, id: NodeId) -> &TensorType {
        &self.nodes[id.index()].ty
    }

    pub fn span(&self, id: NodeId) -> proc_macro2::Span {
        self.spans[id.index()]
    }

    /// The bounds `(start, len)` of the `arange` that `node` is, or is a view of: the positions an embedding reads
    /// when `node` holds its ids.
    pub fn arange_behind(&self, mut node: NodeId) -> Option<(Dim, Dim)> {
        loop {
            match &self.node(node).op {
                Op::Arange { start, len } => return Some((start.clone(), len.clone())),
                Op::Permute { input, .. } | Op::Reshape { input, .. } | Op::Slice { input, .. } => {
                    node = *input
                }
                _ => return None,
            }
        }
    }

    pub fn ids(&self) -> impl Iterator<Item = NodeId> {
        (0..self.nodes.len() as u32).map(NodeId)
    }

    /// Adds a node after inferring its type; the error says what is wrong with the operands.
    pub fn add(
        &mut self,
        op: Op,
        span: proc_macro2::Span,
    ) -> Result<NodeId, crate::infer::TypeError> {
        if let Op::Concat { inputs, axis } = &op {
            // A concat along a dynamic axis has the sum of its inputs' lengths: intern it first, so inference
            // (which only reads the graph) finds it.
            let lens: Vec<Dim> = inputs
                .iter()
                .filter_map(|i| self.nodes.get(i.index())?.ty.shape.0.get(*axis).cloned())
                .collect();
            if lens.len() == inputs.len() && lens.iter().any(|d| d.as_static().is_none()) {
                let refs: Vec<&Dim> = lens.iter().collect();
                // A length no dim can stand for is left to inference, which reports it.
                let _ = self.sum(&refs);
            }
        }
        let ty = crate::infer::infer(self, &op)?;
        Ok(self.push(Node { op, ty }, span))
    }

    /// Appends a node whose type is already known (inputs and params are typed by their declarations).
    pub fn push(&mut self, node: Node, span: proc_macro2::Span) -> NodeId {
        let id = NodeId(self.nodes.len() as u32);
        self.nodes.push(node);
        self.spans.push(span);
        id
    }

    pub fn dyn_dim(&mut self, name: &str) -> u16 {
        if let Some(i) = self.dyn_dims.iter().position(|d| d == name) {
            return i as u16;
        }
        self.dyn_dims.push(name.to_string());
        (self.dyn_dims.len() - 1) as u16
    }

    /// The definition of `sym` when it is a sum of dims.
    pub fn derived_of(&self, sym: u16) -> Option<&DerivedDim> {
        self.derived.iter().find(|d| d.sym == sym)
    }

    /// `dim` as signed monomials over free symbols: a derived symbol in it is replaced by its definition
    /// (multiplied out), so sums of sums flatten.
    fn expand(&self, dim: &Dim) -> Vec<(i128, Vec<u16>)> {
        let mut terms = vec![(dim.coeff as i128, Vec::new())];
        for &s in &dim.syms {
            let factor: Vec<(i128, Vec<u16>)> = match self.derived_of(s) {
                Some(d) => d
                    .terms
                    .iter()
                    .map(|t| (t.coeff as i128, t.syms.clone()))
                    .chain((d.less > 0).then(|| (-(d.less as i128), Vec::new())))
                    .collect(),
                None => vec![(1, vec![s])],
            };
            terms = terms
                .iter()
                .flat_map(|(c, syms)| {
                    factor.iter().map(move |(f, fs)| {
                        let mut syms = syms.clone();
                        syms.extend_from_slice(fs);
                        syms.sort_unstable();
                        (c.saturating_mul(*f), syms)
                    })
                })
                .collect();
        }
        terms
    }

    /// `Σ plus − Σ minus` in canonical form; `None` when a monomial over dims is left negative (`seq - past`),
    /// which no dim can stand for.
    pub fn sum_terms(&self, plus: &[&Dim], minus: &[&Dim]) -> Option<Terms> {
        let mut merged: Vec<(i128, Vec<u16>)> = Vec::new();
        for (sign, dims) in [(1i128, plus), (-1, minus)] {
            for (c, syms) in dims.iter().flat_map(|d| self.expand(d)) {
                match merged.iter_mut().find(|(_, s)| *s == syms) {
                    Some(m) => m.0 = m.0.saturating_add(sign * c),
                    None => merged.push((sign * c, syms)),
                }
            }
        }
        merged.retain(|(c, _)| *c != 0);
        merged.sort_by(|a, b| a.1.cmp(&b.1));
        let mut out = Terms::default();
        for (c, syms) in merged {
            if c > 0 {
                let coeff = usize::try_from(c).unwrap_or(usize::MAX);
                out.terms.push(Dim { coeff, syms });
            } else if syms.is_empty() {
                out.less = usize::try_from(-c).unwrap_or(usize::MAX);
            } else {
                return None;
            }
        }
        Some(out)
    }

    /// The dim equal to `t` if it exists without a new symbol: a monomial, or a sum interned before. `None` also
    /// for a negative constant. Inference uses this; [`Graph::sum`] and [`Graph::difference`] make the symbol.
    pub fn find_sum(&self, t: &Terms) -> Option<Dim> {
        match (t.terms.as_slice(), t.less) {
            ([], 0) => Some(Dim::fixed(0)),
            ([one], 0) => Some(one.clone()),
            ([], _) => None,
            _ => self
                .derived
                .iter()
                .find(|d| d.terms == t.terms && d.less == t.less)
                .map(|d| Dim::symbol(d.sym)),
        }
    }

    /// `a + b + ..` as a dim, interning a derived symbol for it when it is not a monomial; `None` when it cannot
    /// be one (see [`Graph::sum_terms`]).
    pub fn sum(&mut self, dims: &[&Dim]) -> Option<Dim> {
        let terms = self.sum_terms(dims, &[])?;
        self.intern(terms)
    }

    /// `a - b` as a dim (`seq - 1`, `past + seq - past`), interned like [`Graph::sum`]; `None` when no dim can
    /// stand for it: a monomial left negative (`seq - past`) or a negative constant (`seq - seq - 1`).
    pub fn difference(&mut self, a: &Dim, b: &Dim) -> Option<Dim> {
        let terms = self.sum_terms(&[a], &[b])?;
        self.intern(terms)
    }

    fn intern(&mut self, terms: Terms) -> Option<Dim> {
        if let Some(d) = self.find_sum(&terms) {
            return Some(d);
        }
        if terms.terms.is_empty() {
            return None;
        }
        let mut name = terms
            .terms
            .iter()
            .map(|t| self.fmt_dim(t))
            .collect::<Vec<_>>()
            .join(" + ");
        if terms.less > 0 {
            name = format!("{name} - {}", terms.less);
        }
        let sym = self.dyn_dim(&name);
        self.derived.push(DerivedDim {
            sym,
            terms: terms.terms,
            less: terms.less,
        });
        Some(Dim::symbol(sym))
    }

    /// Number of nodes that read each node, outputs counted as readers.
    pub fn use_counts(&self) -> Vec<usize> {
        let mut counts = vec![0; self.nodes.len()];
        for node in &self.nodes {
            for operand in node.op.operands() {
                counts[operand.index()] += 1;
            }
        }
        for out in &self.outputs {
            counts[out.index()] += 1;
        }
        counts
    }

    /// Formats a shape with dynamic dims by name, e.g. `[batch, seq, 384]`.
    pub fn fmt_shape(&self, shape: &Shape) -> String {
        let dims: Vec<String> = shape.0.iter().map(|d| self.fmt_dim(d)).collect();
        format!("[{}]", dims.join(", "))
    }

    pub fn fmt_dim(&self, dim: &Dim) -> String {
        let mut parts: Vec<String> = Vec::new();
        if dim.coeff != 1 || dim.syms.is_empty() {
            parts.push(dim.coeff.to_string());
        }
        let alone = parts.is_empty() && dim.syms.len() == 1;
        parts.extend(dim.syms.iter().map(|&s| {
            let name = self.dyn_dims[s as usize].clone();
            // A sum inside a product needs its parentheses: `2*(past + seq)`.
            match self.derived_of(s) {
                Some(_) if !alone => format!("({name})"),
                _ => name,
            }
        }));
        parts.join("*")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sums and differences of dims: canonical, interned once, and refused where no dim can stand for them.
    #[test]
    fn differences_of_dims_are_sums_less_a_constant() {
        let mut g = Graph::new();
        let (seq, past) = (
            Dim::symbol(g.dyn_dim("seq")),
            Dim::symbol(g.dyn_dim("past")),
        );
        let one = Dim::fixed(1);
        let last = g.difference(&seq, &one).expect("seq - 1");
        assert_eq!(g.fmt_dim(&last), "seq - 1");
        assert_eq!(
            g.difference(&seq, &one),
            Some(last.clone()),
            "interned once"
        );
        // Back to a monomial: no new symbol.
        assert_eq!(g.sum(&[&last, &one]), Some(seq.clone()));
        let total = g.sum(&[&past, &seq]).expect("past + seq");
        assert_eq!(g.difference(&total, &past), Some(seq.clone()));
        // A sum less a constant flattens into one symbol: `past + seq - 1`, whichever way it is made.
        let a = g.difference(&total, &one).expect("past + seq - 1");
        assert_eq!(g.sum(&[&past, &last]), Some(a.clone()));
        assert_eq!(g.derived_of(a.syms[0]).map(|d| d.less), Some(1));
        // A monomial left negative, or a negative constant: no dim.
        assert_eq!(g.difference(&seq, &past), None);
        assert_eq!(g.difference(&last, &seq), None);
        // `2 * (seq - 1)` multiplies out to `2*seq - 2`.
        let twice = Dim {
            coeff: 2,
            syms: last.syms.clone(),
        };
        let expanded = g.sum_terms(&[&twice], &[]).expect("a sum");
        assert_eq!(
            (expanded.terms, expanded.less),
            (
                vec![Dim {
                    coeff: 2,
                    syms: seq.syms.clone()
                }],
                2
            )
        );
    }
}
