//! The random-view models: seeded random chains of views (transposes, permutes, narrows and slices, at constant
//! starts and at a run-time `past`, reshapes and broadcasts) of inputs, weights, gathered table rows and computed
//! values, read by each kind of kernel (elementwise, `where_` and comparisons, softmax, reductions, norms,
//! products with a weight or two computed operands, attention plain, grouped, with heads merged back, with
//! rotated or concatenated Q and K, or over a cache passed in; concats along inner and outer axes), written into a
//! cache and read back, or returned as views.
//! `build.rs` writes them as one `#[fused_model]` module; `tests/random_views.rs` checks each against the f64
//! reference (and in the reduced CPU precisions against f32), and `tests/gpu.rs` each on the GPU against the
//! CPU.
//!
//! Shapes are generated backwards: each operand starts as the shape its reader needs, and each view step added in
//! front of it says what its own input must have been, so every chain is valid by construction and no model is
//! thrown away. The generator is plain code with its own PRNG so that the same seed writes the same text on every
//! machine.

use std::fmt::Write;

/// SplitMix64: small, seedable and the same everywhere.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5DEE_CE66_D1CE_F00D)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<T: Clone>(&mut self, items: &[T]) -> T {
        items[self.range(0, items.len() - 1)].clone()
    }
}

/// One axis of a shape: a dynamic dim or a constant.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Dim {
    Batch,
    Seq,
    /// The positions a cache passed in as an input already holds (its keys, before this call's are
    /// concatenated on).
    Past,
    Fixed(usize),
}

impl Dim {
    /// As written in `#[shape(..)]`.
    fn decl(self) -> String {
        match self {
            Dim::Batch => "batch".into(),
            Dim::Seq => "seq".into(),
            Dim::Past => "past".into(),
            Dim::Fixed(n) => n.to_string(),
        }
    }

    /// As written in a `reshape([..])` (the dims are bound to `b` and `s` at the top of `forward`).
    fn expr(self) -> String {
        match self {
            Dim::Batch => "b".into(),
            Dim::Seq => "s".into(),
            Dim::Past => "past".into(),
            Dim::Fixed(n) => n.to_string(),
        }
    }

    fn fixed(self) -> Option<usize> {
        match self {
            Dim::Fixed(n) => Some(n),
            _ => None,
        }
    }
}

type Shape = Vec<Dim>;

fn decl(shape: &[Dim]) -> String {
    shape
        .iter()
        .map(|d| d.decl())
        .collect::<Vec<_>>()
        .join(", ")
}

/// One view, as applied forwards.
#[derive(Clone, Debug)]
enum Step {
    Transpose(usize, usize),
    /// `.t()`: the last two axes swapped.
    T,
    Permute(Vec<usize>),
    Narrow {
        axis: usize,
        start: i64,
        len: usize,
    },
    Slice {
        axis: usize,
        start: usize,
        end: usize,
    },
    Reshape(Shape),
    /// `narrow(axis, past, s)`: the `seq` rows at a run-time start of a longer constant axis, as a decoder reads
    /// a cache.
    AtPast(usize),
}

impl Step {
    /// The kind of view, as [`KINDS`] names it.
    fn kind(&self) -> &'static str {
        match self {
            Step::Transpose(..) => "transpose",
            Step::T => "t()",
            Step::Permute(_) => "permute",
            Step::Narrow { start, .. } if *start < 0 => "narrow from the end",
            Step::Narrow { .. } => "narrow",
            Step::Slice { .. } => "slice",
            Step::Reshape(_) => "reshape",
            Step::AtPast(_) => "narrow at past",
        }
    }
}

/// What a set of models can cover, each counted per model by [`write`] into `COVERAGE`: the test of the default
/// set fails when one is missing, so that a change to the generator cannot drop a case unnoticed.
const KINDS: &[&str] = &[
    // Views.
    "transpose",
    "t()",
    "permute",
    "narrow",
    "narrow from the end",
    "slice",
    "narrow at past",
    "reshape",
    // Sources.
    "weight through views",
    "gathered rows",
    "computed source",
    "one input read twice",
    // Readers.
    "elementwise",
    "softmax",
    "reduction",
    "norm",
    "weight product",
    "two-operand product",
    "concat along an inner axis",
    "concat along the batch",
    "concat along the positions",
    "concat piece with a kernel of its own",
    "where_",
    "max and min",
    "mask from positions",
    "attention",
    "grouped attention",
    "attention heads merged",
    "attention operand shared by every head",
    "attention mask input",
    "causal mask",
    "rotary Q or K",
    "concat Q or K",
    "cache passed in",
    "cache written",
    "view output",
];

/// The length of the axis an [`Step::AtPast`] narrows: at least `past + seq` for every dims the tests run.
const MAX_POS: usize = 48;

impl Step {
    fn call(&self) -> String {
        match self {
            Step::Transpose(a, b) => format!("transpose({a}, {b})"),
            Step::T => "t()".into(),
            Step::Permute(p) => format!(
                "permute([{}])",
                p.iter()
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Step::Narrow { axis, start, len } => format!("narrow({axis}, {start}, {len})"),
            Step::Slice { axis, start, end } => format!("slice({axis}, {start}, {end})"),
            Step::AtPast(axis) => format!("narrow({axis}, past, s)"),
            Step::Reshape(s) => format!(
                "reshape([{}])",
                s.iter().map(|d| d.expr()).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

/// The view in front of `out` (the shape it must produce) and the shape its input must have, or `None` when the
/// drawn kind does not apply to `out`.
fn step_before(rng: &mut Rng, out: &[Dim]) -> Option<(Step, Shape)> {
    let rank = out.len();
    let fixed_axes: Vec<usize> = (0..rank).filter(|&a| out[a].fixed().is_some()).collect();
    let seq_axis = out.iter().position(|&d| d == Dim::Seq);
    match rng.range(0, 6) {
        6 => {
            let axis = seq_axis?;
            let mut src = out.to_vec();
            src[axis] = Dim::Fixed(MAX_POS);
            Some((Step::AtPast(axis), src))
        }
        0 if rank >= 2 => {
            let a = rng.range(0, rank - 1);
            let b = (a + rng.range(1, rank - 1)) % rank;
            let mut src = out.to_vec();
            src.swap(a, b);
            Some((Step::Transpose(a.min(b), a.max(b)), src))
        }
        1 if rank >= 2 => {
            let mut src = out.to_vec();
            src.swap(rank - 2, rank - 1);
            Some((Step::T, src))
        }
        2 if rank >= 3 => {
            // A random permutation p: out[k] = src[p[k]].
            let mut p: Vec<usize> = (0..rank).collect();
            for i in (1..rank).rev() {
                p.swap(i, rng.range(0, i));
            }
            let mut src = out.to_vec();
            for (k, &pk) in p.iter().enumerate() {
                src[pk] = out[k];
            }
            Some((Step::Permute(p), src))
        }
        3 if !fixed_axes.is_empty() => {
            let axis = rng.pick(&fixed_axes);
            let len = out[axis].fixed()?;
            let full = len + rng.range(1, 6);
            let start = rng.range(0, full - len);
            let mut src = out.to_vec();
            src[axis] = Dim::Fixed(full);
            let step = match rng.range(0, 2) {
                0 => Step::Narrow {
                    axis,
                    start: start as i64,
                    len,
                },
                // A negative start counts from the axis' end.
                1 => Step::Narrow {
                    axis,
                    start: start as i64 - full as i64,
                    len,
                },
                _ => Step::Slice {
                    axis,
                    start,
                    end: start + len,
                },
            };
            Some((step, src))
        }
        4 => {
            // The input has two adjacent constant axes merged (a forward split) ...
            let runs: Vec<usize> = (0..rank.saturating_sub(1))
                .filter(|&a| out[a].fixed().is_some() && out[a + 1].fixed().is_some())
                .collect();
            if runs.is_empty() || rank < 2 {
                return None;
            }
            let a = rng.pick(&runs);
            let mut src = out.to_vec();
            let merged = out[a].fixed()? * out[a + 1].fixed()?;
            src.splice(a..a + 2, [Dim::Fixed(merged)]);
            Some((Step::Reshape(out.to_vec()), src))
        }
        _ => {
            // ... or one constant axis split in two (a forward merge), keeping the rank at most 4.
            let splittable: Vec<(usize, usize)> = fixed_axes
                .iter()
                .filter_map(|&a| {
                    let n = out[a].fixed()?;
                    (2..n).find(|f| n % f == 0).map(|f| (a, f))
                })
                .collect();
            if splittable.is_empty() || rank >= 4 {
                return None;
            }
            let (a, f) = rng.pick(&splittable);
            let n = out[a].fixed()?;
            let mut src = out.to_vec();
            src.splice(a..a + 1, [Dim::Fixed(f), Dim::Fixed(n / f)]);
            Some((Step::Reshape(out.to_vec()), src))
        }
    }
}

/// A source and the views from it to an operand of shape `out`.
struct Chain {
    source: Shape,
    steps: Vec<Step>,
}

fn chain(rng: &mut Rng, out: &[Dim], min_steps: usize, max_steps: usize) -> Chain {
    let mut steps = Vec::new();
    let mut shape = out.to_vec();
    let wanted = rng.range(min_steps, max_steps);
    let mut tries = 0;
    while steps.len() < wanted && tries < 40 {
        tries += 1;
        if let Some((step, src)) = step_before(rng, &shape) {
            steps.insert(0, step);
            shape = src;
        }
    }
    Chain {
        source: shape,
        steps,
    }
}

/// One model being written: its inputs, weights and the lines of `forward`.
struct Model {
    inputs: Vec<Shape>,
    /// The inputs that hold ids (i64), not floats.
    ids: Vec<usize>,
    weights: Vec<Shape>,
    /// `#[state]` buffers (a cache the model writes at `past`).
    states: Vec<Shape>,
    lines: Vec<String>,
    outputs: Vec<String>,
    /// The size each output's elements are taken to have at least when an error is measured relative to them
    /// (`rel_l2_floored`): 1, the inputs' size, or √n for a sum of n such terms, whose rounding error grows so.
    floors: Vec<f64>,
    /// The floor of the output being written.
    scale: f64,
    values: usize,
    /// Whether an output sums many terms (a reduction, a norm or a product): its tolerance is looser.
    accumulates: bool,
    /// Which of [`KINDS`] the model holds.
    kinds: Vec<&'static str>,
}

impl Model {
    fn new() -> Self {
        Model {
            inputs: Vec::new(),
            ids: Vec::new(),
            states: Vec::new(),
            weights: Vec::new(),
            lines: Vec::new(),
            outputs: Vec::new(),
            floors: Vec::new(),
            scale: 1.0,
            values: 0,
            accumulates: false,
            kinds: Vec::new(),
        }
    }

    fn covers(&mut self, kind: &'static str) {
        assert!(KINDS.contains(&kind), "{kind} is not in KINDS");
        if !self.kinds.contains(&kind) {
            self.kinds.push(kind);
        }
    }

    fn new_state(&mut self, shape: &[Dim]) -> String {
        self.states.push(shape.to_vec());
        format!("self.s{}", self.states.len() - 1)
    }

    fn new_weight(&mut self, shape: &[Dim]) -> String {
        self.weights.push(shape.to_vec());
        format!("self.w{}", self.weights.len() - 1)
    }

    fn value(&mut self, expr: String) -> String {
        let name = format!("v{}", self.values);
        self.values += 1;
        self.lines.push(format!("let {name} = {expr};"));
        name
    }

    /// An input or weight of `shape` (a weight always when `weight`): an existing input of that shape at times
    /// (two views of one tensor).
    fn source(&mut self, rng: &mut Rng, shape: &[Dim], weight: bool) -> String {
        let dynamic = shape.iter().any(|d| d.fixed().is_none());
        if weight || (!dynamic && rng.chance(30)) {
            return self.new_weight(shape);
        }
        // Rows of a table gathered at ids: a gather's output read through views.
        if let [Dim::Batch, p, Dim::Fixed(n)] = shape {
            if rng.chance(15) {
                let table = self.new_weight(&[Dim::Fixed(rng.range(3, 20)), Dim::Fixed(*n)]);
                self.inputs.push(vec![Dim::Batch, *p]);
                self.ids.push(self.inputs.len() - 1);
                self.covers("gathered rows");
                return format!("embedding(&{table}, &x{})", self.inputs.len() - 1);
            }
        }
        let reusable = |(i, s): (usize, &Shape)| s == shape && !self.ids.contains(&i);
        if let Some(i) = self.inputs.iter().enumerate().position(reusable) {
            if rng.chance(50) {
                self.covers("one input read twice");
                return format!("x{i}");
            }
        }
        self.inputs.push(shape.to_vec());
        format!("x{}", self.inputs.len() - 1)
    }

    /// An operand of shape `out`: a source, sometimes computed on first, then a chain of views.
    fn operand(&mut self, rng: &mut Rng, out: &[Dim], max_steps: usize) -> String {
        self.operand_of(rng, out, 0, max_steps)
    }

    /// [`Self::operand`] with at least `min_steps` views.
    fn operand_of(
        &mut self,
        rng: &mut Rng,
        out: &[Dim],
        min_steps: usize,
        max_steps: usize,
    ) -> String {
        let Chain { source, steps } = chain(rng, out, min_steps, max_steps);
        let expr = self.source(rng, &source, false);
        self.viewed(rng, expr, &steps)
    }

    /// A weight (the B of a product the CPU packs at load, and computes in a reduced precision when asked)
    /// through views to shape `out`.
    fn weight(&mut self, rng: &mut Rng, out: &[Dim], max_steps: usize) -> String {
        let Chain { source, steps } = chain(rng, out, 0, max_steps);
        let expr = self.source(rng, &source, true);
        if !steps.is_empty() {
            self.covers("weight through views");
        }
        self.viewed(rng, expr, &steps)
    }

    /// `expr`, sometimes computed on first, through `steps`.
    fn viewed(&mut self, rng: &mut Rng, mut expr: String, steps: &[Step]) -> String {
        if rng.chance(25) {
            self.covers("computed source");
            expr = format!(
                "({expr} * 0.5).{}()",
                rng.pick(&["tanh", "abs", "relu", "neg"])
            );
        }
        if steps.is_empty() {
            return expr;
        }
        for step in steps {
            self.covers(step.kind());
        }
        let calls: Vec<String> = steps.iter().map(Step::call).collect();
        self.value(format!("{expr}.{}", calls.join(".")))
    }

    /// An operand of a shape broadcast against `full`.
    fn broadcast_operand(&mut self, rng: &mut Rng, full: &[Dim], max_steps: usize) -> String {
        let shape = broadcast_of(rng, full);
        self.operand(rng, &shape, max_steps)
    }

    /// A piece of a concat: an operand, at times computed by a kernel of its own (a softmax, a product with a
    /// weight) rather than inside the concat's.
    fn piece(&mut self, rng: &mut Rng, shape: &[Dim]) -> String {
        match rng.range(0, 3) {
            0 => {
                self.accumulates = true;
                self.covers("concat piece with a kernel of its own");
                let x = self.operand(rng, shape, 3);
                format!("{x}.softmax(-1)")
            }
            1 => {
                self.covers("concat piece with a kernel of its own");
                let k = Dim::Fixed(rng.pick(&DEPTHS));
                self.sums(k);
                let x = self.operand(rng, &[shape[0], shape[1], k], 2);
                let w = self.weight(rng, &[k, shape[2]], 1);
                format!("{x}.matmul(&{w})")
            }
            _ => self.operand(rng, shape, 3),
        }
    }

    /// Q or K of an attention, `[lead.., rows, d]`: an operand, at times rotated (RoPE's `x * cos + concat([-x₂,
    /// x₁]) * sin` over the last axis, with `cos` and `sin` through views of their own) or a concat of two
    /// operands along the last axis.
    fn projected(&mut self, rng: &mut Rng, lead: &[Dim], rows: Dim, d: Dim) -> String {
        let shape = [lead, &[rows, d]].concat();
        let axis = shape.len() - 1;
        match (rng.range(0, 4), d.fixed()) {
            (0, Some(n)) if n % 2 == 0 => {
                let x = self.operand(rng, &shape, 2);
                let x = self.value(x);
                let cos = self.operand(rng, &[rows, d], 1);
                let sin = self.operand(rng, &[rows, d], 1);
                let h = n / 2;
                self.covers("rotary Q or K");
                self.value(format!(
                    "{x} * {cos} + concat([{x}.narrow({axis}, {h}, {h}).neg(), {x}.narrow({axis}, 0, {h})], \
                     {axis}) * {sin}"
                ))
            }
            (1, Some(n)) if n >= 2 => {
                let (x, z) = self.split_operands(rng, &shape, axis, 2);
                self.covers("concat Q or K");
                self.value(format!("concat([{x}, {z}], {axis})"))
            }
            _ => self.operand(rng, &shape, 3),
        }
    }

    /// Two operands that make `shape` together along `axis` (a constant of at least 2), split at a random point.
    fn split_operands(
        &mut self,
        rng: &mut Rng,
        shape: &[Dim],
        axis: usize,
        max_steps: usize,
    ) -> (String, String) {
        let n = shape[axis].fixed().unwrap_or(2).max(2);
        let first = rng.range(1, n - 1);
        let (mut a, mut c) = (shape.to_vec(), shape.to_vec());
        a[axis] = Dim::Fixed(first);
        c[axis] = Dim::Fixed(n - first);
        (
            self.operand(rng, &a, max_steps),
            self.operand(rng, &c, max_steps),
        )
    }

    fn output(&mut self, expr: String) {
        let name = self.value(expr);
        self.outputs.push(name);
        self.floors.push(self.scale);
    }

    /// A view returned as it is.
    fn output_view(&mut self, name: String) {
        self.outputs.push(name);
        self.floors.push(1.0);
    }

    /// The output being written sums `n` terms.
    fn sums(&mut self, n: Dim) {
        self.accumulates = true;
        self.scale = self.scale.max((n.fixed().unwrap_or(1) as f64).sqrt());
    }
}

/// Shapes an operand broadcast against `full` (rank 3) may have.
fn broadcast_of(rng: &mut Rng, full: &[Dim]) -> Shape {
    let (b, p, q) = (full[0], full[1], full[2]);
    let one = Dim::Fixed(1);
    rng.pick(&[
        vec![b, p, q],
        vec![b, p, q],
        vec![one, p, q],
        vec![p, q],
        vec![b, one, q],
        vec![b, p, one],
        vec![q],
        vec![one, one, q],
    ])
}

const WIDTHS: [usize; 14] = [2, 3, 5, 7, 8, 12, 16, 17, 24, 33, 64, 67, 130, 257];
const DEPTHS: [usize; 8] = [3, 8, 17, 32, 40, 70, 130, 300];

/// How many kinds of reader [`reader`] writes. Model `i`'s first reader is of kind `i % READERS`, so that every
/// kind is in every set of a few dozen models; its other readers are drawn.
const READERS: usize = 13;

/// Whether reader `kind` needs `seq` positions (a cache written at `past`, a concat along the positions,
/// attention over a cache passed in).
fn needs_seq(kind: usize) -> bool {
    matches!(kind, 7 | 10 | 12)
}

/// The reader of `kind` (below [`READERS`]): a kernel kind, the operands it reads and the output(s) it writes.
fn reader(rng: &mut Rng, m: &mut Model, full: &[Dim], kind: usize) {
    let (b, p, q) = (full[0], full[1], full[2]);
    m.scale = 1.0;
    match kind {
        0 => {
            let x = m.operand(rng, full, 3);
            let y = m.broadcast_operand(rng, full, 3);
            let z = m.broadcast_operand(rng, full, 2);
            m.covers("elementwise");
            m.output(format!("{x} * 1.5 + {y}.tanh() - {z} * {y}"));
        }
        1 => {
            let x = m.operand(rng, full, 3);
            let y = m.broadcast_operand(rng, full, 3);
            m.covers("softmax");
            m.output(format!("({x} + {y} * 0.5).softmax(-1)"));
        }
        2 => {
            let x = m.operand(rng, full, 3);
            let y = m.broadcast_operand(rng, full, 3);
            // A sum over the batch adds at most 7 terms (the largest batch the tests run).
            let (reduced, terms) = rng.pick(&[
                ("sum(-1, true)", q),
                ("sum(-1, false)", q),
                ("max(-1, false)", Dim::Fixed(1)),
                ("mean(1, true)", Dim::Fixed(1)),
                ("sum(0, false)", Dim::Fixed(7)),
                ("max(1, false)", Dim::Fixed(1)),
            ]);
            m.sums(terms);
            m.covers("reduction");
            m.output(format!("({x} * {y}).{reduced}"));
        }
        3 => {
            m.accumulates = true;
            let x = m.operand(rng, full, 3);
            let y = m.broadcast_operand(rng, full, 3);
            let g = m.operand(rng, &[q], 1);
            let norm = match rng.range(0, 2) {
                0 => {
                    let h = m.operand(rng, &[q], 1);
                    format!("({x} + {y}).layer_norm(&{g}, &{h}, 1e-5)")
                }
                1 => format!("({x} - {y}).rms_norm(&{g}, 1e-6)"),
                _ => {
                    let v = m.value(format!("{x} + {y}"));
                    format!("{v} * ({v}.square().mean(-1, true) + 1e-5).rsqrt() * {g}")
                }
            };
            m.covers("norm");
            m.output(norm);
        }
        4 => {
            let k = Dim::Fixed(rng.pick(&DEPTHS));
            m.sums(k);
            let x = m.operand(rng, &[b, p, k], 3);
            let w = m.weight(rng, &[k, q], 2);
            let y = m.broadcast_operand(rng, full, 2);
            m.covers("weight product");
            m.output(format!("{x}.matmul(&{w}) + {y}"));
        }
        5 => {
            let k = Dim::Fixed(rng.pick(&DEPTHS));
            m.sums(k);
            let x = m.operand(rng, &[b, p, k], 3);
            let y = m.operand(rng, &[b, k, q], 3);
            m.covers("two-operand product");
            m.output(format!("{x}.matmul(&{y}) * 0.5"));
        }
        6 => concat_reader(rng, m, full),
        7 if p == Dim::Seq => concat_positions(rng, m, full),
        8 => attention(rng, m, full, false),
        12 if p == Dim::Seq => attention(rng, m, full, true),
        9 => selection(rng, m, full),
        10 if p == Dim::Seq => {
            // A cache written at `past` (along the positions axis of `[b, MAX_POS, q]` or of `[b, q, MAX_POS]`),
            // then read back up to `past + s`: the rows before `past` as the session holds them.
            let positions_inner = rng.chance(50);
            let (state, axis, value_shape) = if positions_inner {
                let state = m.new_state(&[b, q, Dim::Fixed(MAX_POS)]);
                (state, 2, vec![b, q, p])
            } else {
                let state = m.new_state(&[b, Dim::Fixed(MAX_POS), q]);
                (state, 1, full.to_vec())
            };
            let value = m.operand(rng, &value_shape, 3);
            m.covers("cache written");
            let all = m.value(format!("{state}.write({axis}, past, {value})"));
            m.output(format!("{all}.narrow({axis}, 0, past + s) * 1.5"));
        }
        _ => {
            // A view returned as it is: the output is a copy of it.
            m.covers("view output");
            let x = m.operand(rng, full, 3);
            m.output(format!("{x}.neg().neg()"));
            let v = m.operand_of(rng, full, 1, 3);
            m.output_view(v);
        }
    }
}

/// A concat of views read elementwise: along the last axis (or the middle one when constant), or along the
/// batch, of pieces that kernels of their own compute at times (a softmax, a product).
fn concat_reader(rng: &mut Rng, m: &mut Model, full: &[Dim]) {
    let (p, q) = (full[1], full[2]);
    if rng.chance(50) {
        let (first, second) = (m.piece(rng, full), m.piece(rng, full));
        let row = rng.pick(&[vec![p, q], vec![q]]);
        let y = m.operand(rng, &row, 2);
        m.covers("concat along the batch");
        m.output(format!("concat([{first}, {second}], 0) * 1.5 + {y}"));
        return;
    }
    let axis = if p.fixed().is_some_and(|n| n >= 2) && rng.chance(40) {
        1
    } else {
        2
    };
    let (x, z) = m.split_operands(rng, full, axis, 3);
    let y = m.broadcast_operand(rng, full, 2);
    m.covers("concat along an inner axis");
    m.output(format!("concat([{x}, {z}], {axis}) * {y}"));
}

/// A concat along the positions of `[b, s, q]` and of a constant number of rows, in either order, as a cache
/// passed in is extended; its pieces computed by kernels of their own at times.
fn concat_positions(rng: &mut Rng, m: &mut Model, full: &[Dim]) {
    let (b, q) = (full[0], full[2]);
    let rows = [b, Dim::Fixed(rng.range(1, 6)), q];
    let (mut first, mut second) = (m.piece(rng, full), m.piece(rng, &rows));
    if rng.chance(50) {
        std::mem::swap(&mut first, &mut second);
    }
    let y = m.operand(rng, &[q], 2);
    m.covers("concat along the positions");
    m.output(format!("concat([{first}, {second}], 1) - {y}"));
}

/// Elementwise choices, three outputs of the same operands: `where_` on comparisons of views (in forms
/// continuous where the comparison flips, so rounding near a tie moves the result by a rounding error only),
/// `max`/`min`, and a softmax under a mask made from positions alone (`arange`), recomputed inside it.
fn selection(rng: &mut Rng, m: &mut Model, full: &[Dim]) {
    let (p, q) = (full[1], full[2]);
    let x = m.operand(rng, full, 3);
    let x = m.value(x);
    let y = m.broadcast_operand(rng, full, 3);
    let y = m.value(y);
    let z = m.broadcast_operand(rng, full, 2);
    m.covers("where_");
    let picked = match rng.range(0, 2) {
        0 => format!("where_({x}.gt(&{y}), {x}, {y}) * {z}"),
        1 => format!("where_({x}.lt(0.0), {x} * 0.1, {x}) + {y}"),
        _ => format!("where_({x}.ge(&{y}), {x} - {y}, ({y} - {x}) * 0.5) + {z}"),
    };
    m.output(picked);
    // And `max`/`min`, and a softmax under a mask from positions, of the same operands.
    m.covers("max and min");
    let shifted = m.value(format!("{z} + 1.0"));
    m.output(format!("{x}.max(&{y}).min(&{shifted})"));
    // Column j of row i is masked where j > i: row 0 keeps column 0, so no row is all masked.
    m.covers("mask from positions");
    let (rows, cols) = (p.expr(), q.expr());
    let mask = format!(
        "where_(arange(0, {cols}).to_f32().reshape([1, {cols}])\
         .gt(&arange(0, {rows}).to_f32().reshape([{rows}, 1])), -1e9, 0.0)"
    );
    m.output(format!("({x} + {mask} + {y} * 0.5).softmax(-1)"));
}

/// Attention over heads: Q, K and V through views, a scale, sometimes an additive mask broadcast over heads
/// (or over the batch too) or a causal one made from positions, softmax and the product with V.
/// - At times grouped: a group of query heads per key-value head, K and V broadcast over it, as grouped-query
///   attention reads them.
/// - At times its heads merged back into rows (`[b, p, heads · dv]`: the kernel places them).
/// - Q (and K) at times rotated (RoPE: `x * cos + concat([-x₂, x₁]) * sin`, the concat computed by the kernel
///   that reads it) or a concat of two views; Q or V at times of rank 2, shared by every batch and head (learned
///   queries), which keeps the products apart.
/// - When `cached` (with `seq` positions), over a cache passed in (`[.., past, d]`) with this call's keys and
///   values concatenated on, the extended cache returned as well at times, and a causal mask offset by `past`.
fn attention(rng: &mut Rng, m: &mut Model, full: &[Dim], cached: bool) {
    let (b, p) = (full[0], full[1]);
    m.accumulates = true;
    let one = Dim::Fixed(1);
    let heads = Dim::Fixed(rng.range(1, 4));
    let (dh, dv) = (
        Dim::Fixed(rng.pick(&[3, 8, 16])),
        Dim::Fixed(rng.pick(&[3, 8, 16])),
    );
    m.covers("attention");
    let grouped = rng.chance(30);
    let (q_heads, kv_heads): (Vec<Dim>, Vec<Dim>) = if grouped {
        m.covers("grouped attention");
        let group = Dim::Fixed(rng.range(2, 3));
        (vec![b, heads, group], vec![b, heads, one])
    } else {
        (vec![b, heads], vec![b, heads])
    };
    let with = |lead: &[Dim], rows: Dim, cols: Dim| [lead, &[rows, cols]].concat();
    // Queries or values of rank 2 at times, shared by every batch and head (learned queries, as attention
    // pooling reads them): the products broadcast them.
    let shared = rng.range(0, 9);
    let query = if shared == 0 {
        m.covers("attention operand shared by every head");
        m.operand(rng, &[p, dh], 2)
    } else {
        m.projected(rng, &q_heads, p, dh)
    };
    let mut key = m.projected(rng, &kv_heads, p, dh);
    let mut value = if shared == 1 && !cached {
        m.covers("attention operand shared by every head");
        m.operand(rng, &[p, dv], 2)
    } else {
        m.operand(rng, &with(&kv_heads, p, dv), 3)
    };
    if cached {
        m.covers("cache passed in");
        let rows = kv_heads.len();
        let past_key = m.operand(rng, &with(&kv_heads, Dim::Past, dh), 2);
        let past_value = m.operand(rng, &with(&kv_heads, Dim::Past, dv), 2);
        key = m.value(format!("concat([{past_key}, {key}], {rows})"));
        value = m.value(format!("concat([{past_value}, {value}], {rows})"));
        if rng.chance(50) {
            m.output_view(key.clone());
        }
    }
    let scores = format!("{query}.matmul(&{key}.t()) * 0.35");
    let (start, len) = if cached {
        ("past", "past + s".to_string())
    } else {
        ("0", p.expr())
    };
    let rows = p.expr();
    let scores = match rng.range(0, 3) {
        0 => scores,
        1 if !grouped && !cached => {
            m.covers("attention mask input");
            format!("{scores} + {}", m.operand(rng, &[b, one, one, p], 2))
        }
        2 if !cached => {
            m.covers("attention mask input");
            format!("{scores} + {}", m.operand(rng, &[p, p], 2))
        }
        _ => {
            m.covers("causal mask");
            format!(
                "{scores} + where_(arange(0, {len}).to_f32().reshape([1, {len}])\
             .gt(&arange({start}, {rows}).to_f32().reshape([{rows}, 1])), -1e9, 0.0)"
            )
        }
    };
    let attention = format!("({scores}).softmax(-1).matmul(&{value})");
    match (grouped, rng.chance(40), heads.fixed(), dv.fixed()) {
        (false, true, Some(h), Some(d)) => {
            m.covers("attention heads merged");
            m.output(format!(
                "{attention}.permute([0, 2, 1, 3]).reshape([b, {}, {}])",
                p.expr(),
                h * d
            ))
        }
        _ => m.output(attention),
    }
}

/// `count` random-view models from `seed`: the text of their `#[fused_model]` module and of their tables, and the
/// tolerance and floors of each (the fields of its `Case` after `spec`).
pub struct Written {
    pub text: String,
    pub checks: Vec<String>,
}

pub fn write(seed: u64, count: usize) -> Written {
    let mut rng = Rng::new(seed);
    let mut module = String::new();
    let mut checks = Vec::new();
    let mut covered = vec![0usize; KINDS.len()];
    for i in 0..count {
        let first = i % READERS;
        let p = if needs_seq(first) || rng.chance(40) {
            Dim::Seq
        } else {
            Dim::Fixed(rng.range(1, 6))
        };
        let q = Dim::Fixed(rng.pick(&WIDTHS));
        let full = [Dim::Batch, p, q];
        let mut m = Model::new();
        reader(&mut rng, &mut m, &full, first);
        for _ in 1..rng.range(1, 3) {
            let kind = rng.range(0, READERS - 1);
            reader(&mut rng, &mut m, &full, kind);
        }
        write_model(&mut module, i, &m);
        for (n, kind) in covered.iter_mut().zip(KINDS) {
            *n += usize::from(m.kinds.contains(kind));
        }
        let tol = if m.accumulates { "1e-4" } else { "1e-5" };
        let floors: Vec<String> = m.floors.iter().map(|f| format!("{f:?}")).collect();
        checks.push(format!(
            "atol: {tol}, rtol: {tol}, floors: &[{}]",
            floors.join(", ")
        ));
    }
    let table: String = checks
        .iter()
        .enumerate()
        .map(|(i, check)| format!("    Case {{ spec: models::View{i}::spec, {check} }},\n"))
        .collect();
    let coverage: String = KINDS
        .iter()
        .zip(&covered)
        .map(|(kind, n)| format!("    ({kind:?}, {n}),\n"))
        .collect();
    let text = format!(
        "// Written by build.rs from `gen/random_views.rs`, seed {seed}: do not edit.\n\n\
         #[::fuse_runtime::fused_model]\npub mod models {{\n{module}}}\n\n\
         /// Every random-view model, with its tolerance against the f64 reference.\n\
         pub const CASES: &[Case] = &[\n{table}];\n\n\
         /// Each kind of view, source and reader the generator draws, and how many of the models hold it.\n\
         pub const COVERAGE: &[(&str, usize)] = &[\n{coverage}];\n"
    );
    Written { text, checks }
}

fn write_model(out: &mut String, i: usize, m: &Model) {
    let _ = writeln!(out, "    pub struct View{i} {{");
    for (k, w) in m.weights.iter().enumerate() {
        let _ = writeln!(out, "        #[shape({})]\n        w{k}: Tensor,", decl(w));
    }
    for (k, st) in m.states.iter().enumerate() {
        let _ = writeln!(
            out,
            "        #[state]\n        #[shape({})]\n        s{k}: Tensor,",
            decl(st)
        );
    }
    let _ = writeln!(
        out,
        "    }}\n    impl View{i} {{\n        pub fn forward(\n            &self,"
    );
    for (k, s) in m.inputs.iter().enumerate() {
        let dtype = if m.ids.contains(&k) { "<i64>" } else { "" };
        let _ = writeln!(
            out,
            "            #[shape({})] x{k}: Tensor{dtype},",
            decl(s)
        );
    }
    // Where to read each dynamic dim: off the first input that has it, or from a `#[dim]` argument when a
    // narrow at `past` made every input's axis constant.
    let axis_of = |dim: Dim| {
        m.inputs
            .iter()
            .enumerate()
            .find_map(|(k, s)| s.iter().position(|&d| d == dim).map(|a| (k, a)))
    };
    let at_past = m
        .lines
        .iter()
        .any(|l| l.contains(", past, s)") || l.contains("past + s"));
    let seq_used = at_past
        || m.lines
            .iter()
            .any(|l| l.contains(" s,") || l.contains(" s]"));
    let seq_arg = seq_used && axis_of(Dim::Seq).is_none();
    if seq_arg {
        let _ = writeln!(out, "            #[dim] seq: usize,");
    }
    if at_past && axis_of(Dim::Past).is_none() {
        let _ = writeln!(out, "            #[dim] past: usize,");
    }
    let outputs = m.outputs.len();
    let ret = if outputs == 1 {
        "Tensor".to_string()
    } else {
        format!("({})", vec!["Tensor"; outputs].join(", "))
    };
    let _ = writeln!(out, "        ) -> {ret} {{");
    for (dim, name) in [(Dim::Batch, "b"), (Dim::Seq, "s"), (Dim::Past, "past")] {
        if let Some((k, a)) = axis_of(dim) {
            let _ = writeln!(out, "            let {name} = x{k}.dim({a});");
        }
    }
    if seq_arg {
        let _ = writeln!(out, "            let s = seq;");
    }
    for line in &m.lines {
        let _ = writeln!(out, "            {line}");
    }
    let ret = if outputs == 1 {
        m.outputs[0].clone()
    } else {
        format!("({})", m.outputs.join(", "))
    };
    let _ = writeln!(out, "            {ret}\n        }}\n    }}\n");
}
