//! Constant evaluation: the integer operators (`<< >> % & | ^` beside `+ - * /`), and one error per bad constant
//! however often it is used.

use fuse_kernels::front::capture_str;

/// A model whose weight is `[D, 4]` and whose input is `[batch, D]`, with `D` defined by `expr`.
fn model(expr: &str) -> String {
    format!(
        "mod m {{
            pub const D: usize = {expr};
            pub struct Model {{ #[shape(D, 4)] w: Tensor }}
            impl Model {{
                pub fn forward(&self, #[shape(batch, D)] x: Tensor) -> Tensor {{
                    x.matmul(&self.w) * (D as f32)
                }}
            }}
        }}"
    )
}

fn errors(source: &str) -> Vec<String> {
    let cap = capture_str(source).expect("parses");
    cap.errors
        .map(|e| e.into_iter().map(|e| e.to_string()).collect())
        .unwrap_or_default()
}

/// The static size of the weight's first dim, when the model compiles.
fn weight_rows(expr: &str) -> Result<usize, Vec<String>> {
    let cap = capture_str(&model(expr)).expect("parses");
    if let Some(e) = cap.errors {
        return Err(e.into_iter().map(|e| e.to_string()).collect());
    }
    let g = &cap.models[0].graph;
    Ok(g.params[0].ty.shape.0[0].as_static().expect("static"))
}

#[test]
fn integer_operators_fold_like_rust() {
    let cases: [(&str, usize); 10] = [
        ("2usize.pow(5)", 2usize.pow(5)),
        ("1 << 3", 1 << 3),
        ("(1 << 10) >> 7", (1 << 10) >> 7),
        ("100 % 7", 100 % 7),
        ("0b1100 & 0b1010", 0b1100 & 0b1010),
        ("0b1100 | 0b0011", 0b1100 | 0b0011),
        ("0b1100 ^ 0b0110", 0b1100 ^ 0b0110),
        ("(3 << 2) + 1", (3 << 2) + 1),
        ("2 * 3 - 1", 2 * 3 - 1),
        ("17 / 4", 17 / 4),
    ];
    for (expr, want) in cases {
        assert_eq!(weight_rows(expr), Ok(want), "{expr}");
    }
}

#[test]
fn a_bad_constant_is_one_error_on_the_constant() {
    for (expr, says) in [
        ("1 << 64", "shift by 64"),
        ("1 << 63", "does not fit in 64 bits"),
        ("3 - 5", "does not fit in `usize`"),
        ("9223372036854775807 + 1", "integer overflow"),
        ("8 / 0", "division by zero"),
        ("8 % 0", "division by zero"),
        ("1.5 << 2", "needs integers"),
        ("1 >> -1", "must be in 0..64"),
        ("2usize.pow(64)", "integer overflow"),
        ("[4, 8][1]", "expected a constant expression"),
    ] {
        let errs = errors(&model(expr));
        assert_eq!(
            errs.len(),
            1,
            "`{expr}` should give one error, got {errs:#?}"
        );
        assert!(errs[0].contains(says), "`{expr}`: {}", errs[0]);
    }
}

#[test]
fn a_constant_using_a_bad_constant_is_not_reported_again() {
    let source = model("1 << 64").replace(
        "pub const D: usize = 1 << 64;",
        "pub const E: usize = 1 << 64; pub const D: usize = E * 2;",
    );
    let errs = errors(&source);
    assert_eq!(errs.len(), 1, "{errs:#?}");
}
