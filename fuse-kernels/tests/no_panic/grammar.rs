//! A small random grammar of the model language for the no-panic fuzz test: models that reach deeper than token
//! mutants (loops, branches, sub-model arrays, every op), a typed variant whose programs mostly compile (so the
//! planner and the writer see many valid graphs), and token soup inside a model skeleton.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::{pick, INSERTS, METHOD_NAMES};

fn random_dim(rng: &mut ChaCha8Rng) -> String {
    match rng.gen_range(0..10) {
        0 => pick(rng, &["0", "1", "5000", "4294967296", "-3"]).to_string(),
        1 => "N".into(),
        _ => pick(rng, &["2", "3", "4", "8"]).to_string(),
    }
}

fn random_expr(rng: &mut ChaCha8Rng, depth: u32) -> String {
    const LEAVES: &[&str] = &[
        "x",
        "x",
        "h",
        "self.w",
        "self.b",
        "1.0",
        "N",
        "2",
        "x.dim(0)",
        "x.dim(1)",
        "ids",
        "self.table",
        "true",
    ];
    if depth == 0 || rng.gen_bool(0.2) {
        return pick(rng, LEAVES).to_string();
    }
    let mut e = || random_expr(rng, depth - 1);
    let (a, b, c) = (e(), e(), e());
    match rng.gen_range(0..16) {
        0 | 1 => format!(
            "({a} {} {b})",
            pick(rng, &["+", "-", "*", "/", "==", "<", "&&", "%"])
        ),
        2..=4 => {
            let n = rng.gen_range(0..4);
            let args: Vec<String> = (0..n)
                .map(|k| match rng.gen_range(0..4) {
                    0 => b.clone(),
                    1 => pick(rng, &["-1", "0", "1", "2", "true", "1e-5"]).to_string(),
                    2 => format!(
                        "[{}]",
                        pick(rng, &["0, 1", "1, 0", "x.dim(0), -1", "2, 2", "0, 2, 1"])
                    ),
                    _ => {
                        if k == 0 {
                            "&self.w".into()
                        } else {
                            "false".into()
                        }
                    }
                })
                .collect();
            format!("{a}.{}({})", pick(rng, METHOD_NAMES), args.join(", "))
        }
        5 => format!("where_({a}, {b}, {c})"),
        6 => format!("concat([{a}, {b}], {})", pick(rng, &["0", "1", "-1", "5"])),
        7 => format!("embedding(&self.table, &{a})"),
        8 => format!(
            "if {} {{ {a} }} else {{ {b} }}",
            pick(rng, &["N > 2", "true", "x", "x.dim(0) == 1", "N == 3"])
        ),
        9 => format!(
            "match {} {{ 1 => {a}, n if n > 2 => {b}, _ => {c} }}",
            pick(rng, &["N", "x", "2"])
        ),
        10 => format!("{{ let t = {a}; t }}"),
        11 => format!(
            "{{ let mut acc = {a}; for i in {} {{ acc = acc + {b}; }} acc }}",
            pick(
                rng,
                &[
                    "0..N",
                    "0..3",
                    "0..x.dim(0)",
                    "0..=2",
                    "0..100000000",
                    "&self.layers",
                    "x"
                ]
            )
        ),
        12 => format!(
            "self.layers[{}].forward(&{a})",
            pick(rng, &["0", "1", "N", "7"])
        ),
        13 => format!("self.sub.forward(&{a})"),
        14 => format!("{}{a}", pick(rng, &["-", "!", "&", "*"])),
        _ => format!("({a} as {})", pick(rng, &["f64", "usize", "i64"])),
    }
}

/// An expression of shape `[batch, B]` (when `B` is a valid dim), so most programs type-check and reach the
/// planner and the writer: elementwise ops, reductions with `keepdim`, norms, square matmuls, views that undo
/// themselves, `where_`, `concat` + `slice`, narrows at differences of dims, `embedding` pooled back to two axes,
/// loops and static branches.
fn typed_expr(rng: &mut ChaCha8Rng, depth: u32) -> String {
    if depth == 0 || rng.gen_bool(0.15) {
        return pick(rng, &["x", "h", "h", "(x * 0.5)", "(h + &self.b)"]).to_string();
    }
    let a = typed_expr(rng, depth - 1);
    let b = typed_expr(rng, depth - 1);
    match rng.gen_range(0..22) {
        0..=2 => format!("{a}.{}()", pick(rng, &["exp", "relu", "gelu", "tanh", "sigmoid", "silu", "abs", "square", "neg", "gelu_tanh", "sin", "cos", "floor", "ceil", "round", "trunc"])),
        3..=5 => format!("({a} {} {b})", pick(rng, &["+", "-", "*", "/"])),
        6 => format!("{a}.{}(&{b})", pick(rng, &["max", "min", "add", "mul"])),
        7 => format!("({a} + {a}.{}(-1, true))", pick(rng, &["sum", "mean", "max"])),
        8 => format!("({a} * {a}.{}(0, true))", pick(rng, &["sum", "mean", "max"])),
        9 => format!("{a}.softmax({})", pick(rng, &["-1", "0", "1"])),
        10 => format!("{a}.layer_norm(&self.b, &self.b, 1e-5)"),
        11 => format!("{a}.rms_norm(&self.b, 1e-6)"),
        12 => format!("{a}.matmul(&self.w.t())"),
        13 => format!("{a}.t().t().transpose(0, 1).transpose(1, 0)"),
        14 => format!("where_({a}.gt(&{b}), {a}, {b} * 0.1)"),
        15 => format!("concat([{a}, {b}], 1).slice(1, B, 2 * B)"),
        16 => format!("({a} + embedding(&self.table, &ids).sum(1, false))"),
        17 => format!("{{ let mut acc = {a}; for layer in &self.layers {{ acc = layer.forward(&acc); }} acc }}"),
        18 => format!("if N > 2 {{ {a} }} else {{ self.sub.forward(&{b}) }}"),
        // Differences of dims: the last row (a negative start, `batch - 1`) and the others, concatenated back to
        // `1 + (batch - 1)` rows, which must be `batch` again.
        19 => format!("concat([{a}.narrow(0, -1, 1), {b}.narrow(0, 0, x.dim(0) - 1)], 0)"),
        20 => format!("({a} + {b}.narrow(0, x.dim(0) - 1, 1))"),
        _ => format!("{a}.reshape([x.dim(0), 1, B]).reshape([x.dim(0), -1]).to_f32()"),
    }
}

pub fn random_model(rng: &mut ChaCha8Rng) -> String {
    if rng.gen_bool(0.6) {
        return typed_model(rng);
    }
    let (a, b, v) = (random_dim(rng), random_dim(rng), random_dim(rng));
    let n = pick(rng, &["2", "3", "0", "4096", "5000"]);
    let layers = pick(rng, &["2", "N", "0", "1"]);
    let ret = pick(rng, &["Tensor", "Tensor", "(Tensor, Tensor)", "f32"]);
    let depth = rng.gen_range(1..6);
    let body = random_expr(rng, depth);
    let body = if ret.starts_with('(') {
        format!("({body}, {})", random_expr(rng, 2))
    } else {
        body
    };
    // Inside `Sub`, `self.sub.forward(..)` becomes `self.forward(..)`: recursion.
    let depth = rng.gen_range(0..3);
    let sub_body = random_expr(rng, depth)
        .replace("self.layers", "self")
        .replace("self.sub", "self");
    format!(
        "mod m {{
            const N: usize = {n};
            struct Sub<const D: usize> {{ #[shape(D, D)] w: Tensor, #[shape(D)] b: Tensor, #[shape(D, D)] table: Tensor }}
            impl<const D: usize> Sub<D> {{
                fn forward(&self, x: Tensor) -> Tensor {{ let h = x; {sub_body} }}
            }}
            struct M {{
                #[shape({a}, {b})] w: Tensor,
                #[shape({b})] b: Tensor,
                #[shape({v}, {b})] table: Tensor,
                layers: [Sub<{b}>; {layers}],
                sub: Sub<{a}>,
            }}
            impl M {{
                pub fn forward(&self, #[shape(batch, {b})] x: Tensor, #[shape(batch, seq)] ids: Tensor<i64>) -> {ret} {{
                    let h = x.matmul(&self.w.t());
                    {body}
                }}
            }}
        }}"
    )
}

pub fn random_soup(rng: &mut ChaCha8Rng) -> String {
    let n = rng.gen_range(1..12);
    let soup: Vec<&str> = (0..n)
        .map(|_| match rng.gen_range(0..3) {
            0 => pick(rng, INSERTS),
            1 => pick(rng, METHOD_NAMES),
            _ => pick(rng, &["(", ")", "x", "self.w", "1", "[0]", "{", "}"]),
        })
        .collect();
    format!(
        "mod m {{ struct M {{ #[shape(4, 4)] w: Tensor }} impl M {{ fn forward(&self, #[shape(b, 4)] x: Tensor) -> Tensor {{ {} }} }} }}",
        soup.join(" ")
    )
}

fn typed_model(rng: &mut ChaCha8Rng) -> String {
    let b = pick(rng, &["1", "3", "4", "8", "8", "0"]);
    let layers = pick(rng, &["0", "1", "2", "3"]);
    let depth = rng.gen_range(1..6);
    let body = typed_expr(rng, depth);
    let depth = rng.gen_range(0..3);
    let sub_body = typed_expr(rng, depth)
        .replace("for layer in &self.layers", "for layer in [0; 0]")
        .replace("self.sub.forward", "self.w.matmul")
        .replace("embedding(&self.table, &ids).sum(1, false)", "h");
    format!(
        "mod m {{
            const B: usize = {b};
            const N: usize = {layers};
            struct Sub {{ #[shape(B, B)] w: Tensor, #[shape(B)] b: Tensor }}
            impl Sub {{
                fn forward(&self, x: Tensor) -> Tensor {{ let h = x.matmul(&self.w); {sub_body} }}
            }}
            struct M {{
                #[shape(B, B)] w: Tensor,
                #[shape(B)] b: Tensor,
                #[shape(10, B)] table: Tensor,
                layers: [Sub; N],
                sub: Sub,
            }}
            impl M {{
                pub fn forward(&self, #[shape(batch, B)] x: Tensor, #[shape(batch, seq)] ids: Tensor<i64>) -> Tensor {{
                    let h = x.matmul(&self.w.t());
                    {body}
                }}
            }}
        }}"
    )
}
