//! The random-view models: seeded random chains of views (transposes, permutes, narrows and slices, at constant
//! starts and at a run-time `past`, reshapes and broadcasts) of inputs, weights, gathered table rows and computed
//! values, read by each kind of kernel (elementwise, softmax, reductions, norms, products with a weight or two
//! computed operands, attention plain, grouped or with heads merged back, concats), written into a cache and read
//! back, or returned as views.
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
    Fixed(usize),
}

impl Dim {
    /// As written in `#[shape(..)]`.
    fn decl(self) -> String {
        match self {
            Dim::Batch => "batch".into(),
            Dim::Seq => "seq".into(),
            Dim::Fixed(n) => n.to_string(),
        }
    }

    /// As written in a `reshape([..])` (the dims are bound to `b` and `s` at the top of `forward`).
    fn expr(self) -> String {
        match self {
            Dim::Batch => "b".into(),
            Dim::Seq => "s".into(),
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
    values: usize,
    /// Whether an output sums many terms (a reduction, a norm or a product): its tolerance is looser.
    accumulates: bool,
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
            values: 0,
            accumulates: false,
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
                return format!("embedding(&{table}, &x{})", self.inputs.len() - 1);
            }
        }
        let reusable = |(i, s): (usize, &Shape)| s == shape && !self.ids.contains(&i);
        if let Some(i) = self.inputs.iter().enumerate().position(reusable) {
            if rng.chance(50) {
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
        self.viewed(rng, expr, &steps)
    }

    /// `expr`, sometimes computed on first, through `steps`.
    fn viewed(&mut self, rng: &mut Rng, mut expr: String, steps: &[Step]) -> String {
        if rng.chance(25) {
            expr = format!(
                "({expr} * 0.5).{}()",
                rng.pick(&["tanh", "abs", "relu", "neg"])
            );
        }
        if steps.is_empty() {
            return expr;
        }
        let calls: Vec<String> = steps.iter().map(Step::call).collect();
        self.value(format!("{expr}.{}", calls.join(".")))
    }

    /// An operand of a shape broadcast against `full`.
    fn broadcast_operand(&mut self, rng: &mut Rng, full: &[Dim], max_steps: usize) -> String {
        let shape = broadcast_of(rng, full);
        self.operand(rng, &shape, max_steps)
    }

    fn output(&mut self, expr: String) {
        let name = self.value(expr);
        self.outputs.push(name);
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
const DEPTHS: [usize; 6] = [3, 8, 17, 32, 40, 70];

/// The reader of one output: a kernel kind and the operands it reads.
fn reader(rng: &mut Rng, m: &mut Model, full: &[Dim]) {
    let (b, p, q) = (full[0], full[1], full[2]);
    match rng.range(0, 10) {
        0 => {
            let x = m.operand(rng, full, 3);
            let y = m.broadcast_operand(rng, full, 3);
            let z = m.broadcast_operand(rng, full, 2);
            m.output(format!("{x} * 1.5 + {y}.tanh() - {z} * {y}"));
        }
        1 => {
            let x = m.operand(rng, full, 3);
            let y = m.broadcast_operand(rng, full, 3);
            m.output(format!("({x} + {y} * 0.5).softmax(-1)"));
        }
        2 => {
            m.accumulates = true;
            let x = m.operand(rng, full, 3);
            let y = m.broadcast_operand(rng, full, 3);
            let reduced = rng.pick(&[
                "sum(-1, true)",
                "sum(-1, false)",
                "max(-1, false)",
                "mean(1, true)",
                "sum(0, false)",
                "max(1, false)",
            ]);
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
            m.output(norm);
        }
        4 => {
            m.accumulates = true;
            let k = Dim::Fixed(rng.pick(&DEPTHS));
            let x = m.operand(rng, &[b, p, k], 3);
            let w = m.weight(rng, &[k, q], 2);
            let y = m.broadcast_operand(rng, full, 2);
            m.output(format!("{x}.matmul(&{w}) + {y}"));
        }
        5 => {
            m.accumulates = true;
            let k = Dim::Fixed(rng.pick(&DEPTHS));
            let x = m.operand(rng, &[b, p, k], 3);
            let y = m.operand(rng, &[b, k, q], 3);
            m.output(format!("{x}.matmul(&{y}) * 0.5"));
        }
        6 => {
            // A concat along the last axis (or the middle one when constant) of views, read elementwise.
            let axis = if p.fixed().is_some_and(|n| n >= 2) && rng.chance(40) {
                1
            } else {
                2
            };
            let n = full[axis].fixed().unwrap_or(2).max(2);
            let first = rng.range(1, n - 1);
            let (mut a, mut c) = (full.to_vec(), full.to_vec());
            a[axis] = Dim::Fixed(first);
            c[axis] = Dim::Fixed(n - first);
            let x = m.operand(rng, &a, 3);
            let z = m.operand(rng, &c, 3);
            let y = m.broadcast_operand(rng, full, 2);
            m.output(format!("concat([{x}, {z}], {axis}) * {y}"));
        }
        9 if p == Dim::Seq => {
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
            let all = m.value(format!("{state}.write({axis}, past, {value})"));
            m.output(format!("{all}.narrow({axis}, 0, past + s) * 1.5"));
        }
        7 => {
            // Attention over heads: Q, K and V through views, a scale, sometimes an additive mask broadcast over
            // heads (or over the batch too), softmax and the product with V. At times grouped (a group of query
            // heads per key-value head, K and V broadcast over it, as grouped-query attention reads them), and at
            // times its heads merged back into rows (`[b, p, heads · dv]`: the kernel places them).
            m.accumulates = true;
            let one = Dim::Fixed(1);
            let heads = Dim::Fixed(rng.range(1, 4));
            let (dh, dv) = (
                Dim::Fixed(rng.pick(&[3, 8, 16])),
                Dim::Fixed(rng.pick(&[3, 8, 16])),
            );
            let grouped = rng.chance(30);
            let (q_heads, kv_heads): (Vec<Dim>, Vec<Dim>) = if grouped {
                let group = Dim::Fixed(rng.range(2, 3));
                (vec![b, heads, group], vec![b, heads, one])
            } else {
                (vec![b, heads], vec![b, heads])
            };
            let with = |lead: &[Dim], rows: Dim, cols: Dim| [lead, &[rows, cols]].concat();
            let query = m.operand(rng, &with(&q_heads, p, dh), 3);
            let key = m.operand(rng, &with(&kv_heads, p, dh), 3);
            let value = m.operand(rng, &with(&kv_heads, p, dv), 3);
            let scores = format!("{query}.matmul(&{key}.t()) * 0.35");
            let scores = match rng.range(0, 2) {
                0 => scores,
                1 if !grouped => format!("{scores} + {}", m.operand(rng, &[b, one, one, p], 2)),
                _ => format!("{scores} + {}", m.operand(rng, &[p, p], 2)),
            };
            let attention = format!("({scores}).softmax(-1).matmul(&{value})");
            match (grouped, rng.chance(40), heads.fixed(), dv.fixed()) {
                (false, true, Some(h), Some(d)) => m.output(format!(
                    "{attention}.permute([0, 2, 1, 3]).reshape([b, {}, {}])",
                    p.expr(),
                    h * d
                )),
                _ => m.output(attention),
            }
        }
        _ => {
            // A view returned as it is: the output is a copy of it.
            let x = m.operand(rng, full, 3);
            m.output(format!("{x}.neg().neg()"));
            let v = m.operand_of(rng, full, 1, 3);
            m.outputs.push(v);
        }
    }
}

/// The text of `count` random-view models from `seed`: the `#[fused_model]` module and the table of cases.
pub fn write(seed: u64, count: usize) -> String {
    let mut rng = Rng::new(seed);
    let mut module = String::new();
    let mut table = String::new();
    for i in 0..count {
        let p = if rng.chance(40) {
            Dim::Seq
        } else {
            Dim::Fixed(rng.range(1, 6))
        };
        let q = Dim::Fixed(rng.pick(&WIDTHS));
        let full = [Dim::Batch, p, q];
        let mut m = Model::new();
        let readers = rng.range(1, 3);
        for _ in 0..readers {
            reader(&mut rng, &mut m, &full);
        }
        write_model(&mut module, i, &m);
        let tol = if m.accumulates { "1e-4" } else { "1e-5" };
        let _ = writeln!(
            table,
            "    Case {{ spec: models::View{i}::spec, atol: {tol}, rtol: {tol} }},"
        );
    }
    format!(
        "// Written by build.rs from `gen/random_views.rs`, seed {seed}: do not edit.\n\n\
         #[::fuse_runtime::fused_model]\npub mod models {{\n{module}}}\n\n\
         /// Every random-view model, with its tolerance against the f64 reference.\n\
         pub const CASES: &[Case] = &[\n{table}];\n"
    )
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
    if at_past {
        let _ = writeln!(out, "            #[dim] past: usize,");
    }
    let outputs = m.outputs.len();
    let ret = if outputs == 1 {
        "Tensor".to_string()
    } else {
        format!("({})", vec!["Tensor"; outputs].join(", "))
    };
    let _ = writeln!(out, "        ) -> {ret} {{");
    for (dim, name) in [(Dim::Batch, "b"), (Dim::Seq, "s")] {
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
