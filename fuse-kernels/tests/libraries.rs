//! Models whose sub-models come from `#[fused_model(library)]` modules: the library's structs join the model's
//! tree (and are never models themselves), and names defined twice are errors on the model's own item.

use fuse_kernels::front::{capture_str, check_library};
use fuse_kernels::plan::{dump, plan, Mode};

const LAYERS: &str = "mod layers {
    pub const SCALE: f64 = 0.5;
    pub struct Linear<const IN: usize, const OUT: usize> {
        #[shape(OUT, IN)] weight: Tensor,
        #[shape(OUT)] bias: Tensor,
    }
    impl<const IN: usize, const OUT: usize> Linear<IN, OUT> {
        pub fn forward(&self, x: Tensor) -> Tensor { (x.matmul(&self.weight.t()) + &self.bias) * SCALE }
    }
}";

const ACTS: &str = "mod acts {
    pub struct Gelu {}
    impl Gelu { pub fn forward(&self, x: Tensor) -> Tensor { x.gelu() } }
}";

/// The same MLP, written with its own `Linear` (the reference) or with the library's.
fn mlp(own_linear: bool) -> String {
    let linear = if own_linear {
        LAYERS
            .trim_start_matches("mod layers {")
            .trim_end_matches('}')
    } else {
        ""
    };
    format!(
        "mod mlp {{
            {linear}
            pub struct Mlp {{ fc1: Linear<8, 16>, act: Gelu, fc2: Linear<16, 4> }}
            impl Mlp {{
                pub fn forward(&self, #[shape(batch, 8)] x: Tensor) -> Tensor {{
                    self.fc2.forward(&self.act.forward(&self.fc1.forward(&x)))
                }}
            }}
        }}"
    )
}

fn errors(source: &str) -> String {
    let cap = capture_str(source).expect("parses");
    cap.errors
        .map(|e| {
            e.into_iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

#[test]
fn a_model_built_from_library_parts_is_the_model_written_out() {
    let shared = capture_str(&format!("{}\n{LAYERS}\n{ACTS}", mlp(false))).expect("parses");
    assert!(
        shared.errors.is_none(),
        "{:?}",
        shared.errors.map(|e| e.to_string())
    );
    let names: Vec<String> = shared.models.iter().map(|m| m.name.to_string()).collect();
    assert_eq!(
        names,
        ["Mlp"],
        "library structs are not models of their own"
    );
    let own = capture_str(&format!("{}\n{ACTS}", mlp(true))).expect("parses");
    assert!(own.errors.is_none());
    for mode in [Mode::Fused, Mode::Eager] {
        assert_eq!(
            dump(&plan(&shared.models[0].graph, mode)),
            dump(&plan(&own.models[0].graph, mode))
        );
    }
    let params: Vec<&str> = shared.models[0]
        .graph
        .params
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(params, ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]);
}

#[test]
fn a_sub_model_from_no_library_is_reported() {
    let e = errors(&format!("{}\n{LAYERS}", mlp(false)));
    assert!(e.contains("`Gelu`, which is not a model struct"), "{e}");
}

#[test]
fn names_defined_in_both_are_reported_on_the_models_item() {
    let e = errors(&format!("{}\n{LAYERS}\n{ACTS}", mlp(true)));
    assert!(
        e.contains("`Linear` is also defined in library `layers`"),
        "{e}"
    );
    assert!(
        e.contains("`SCALE` is also defined in a library this module uses"),
        "{e}"
    );
    let e = errors(&format!("{LAYERS}\n{LAYERS}\n{ACTS}").replacen("mod layers", "mod mlp", 1));
    assert!(e.contains("also defined in library `layers`"), "{e}");
}

#[test]
fn a_model_cannot_add_methods_to_a_library_struct() {
    let source = mlp(false).replacen(
        "impl Mlp",
        "impl Gelu { fn twice(&self, x: Tensor) -> Tensor { x * 2.0 } } impl Mlp",
        1,
    );
    let e = errors(&format!("{source}\n{LAYERS}\n{ACTS}"));
    assert!(
        e.contains("`Gelu` is not a model struct of this module"),
        "{e}"
    );
}

#[test]
fn a_library_is_checked_on_its_own() {
    let ok: syn::ItemMod = syn::parse_str(LAYERS).expect("parses");
    assert!(check_library(&ok).is_ok());
    let bad: syn::ItemMod =
        syn::parse_str(&LAYERS.replace("#[shape(OUT)] bias", "bias")).expect("parses");
    let e = check_library(&bad)
        .expect_err("a tensor without a shape")
        .to_string();
    assert!(e.contains("shape"), "{e}");
}
