//! Golden IR dump, fusion plan and generated CPU Rust for the two example models, plus determinism: compiling
//! the same source twice gives byte-identical code and the same plan hash.

use fuse_examples::models::{encoder::encoder::EncoderLayer, mlp::mlp::Mlp};
use fuse_kernels::back::cpu::write_program;
use fuse_kernels::plan::{dump, dump_graph, plan, Mode};
use fuse_runtime::ModelSpec;
use fuse_tests::golden::check_golden;
use fuse_tests::harness::graph_of;
use fuse_tests::random_views::CASES;

/// The kernel functions, then the plan's tables as the runtime decodes them (pretty-printed: embedded, they are
/// one line).
fn generated_rust(spec: &ModelSpec, mode: Mode) -> String {
    let p = plan(&graph_of(spec), mode);
    let written = write_program(&p, spec.name);
    let items = written.items;
    let program = written.program;
    let file: syn::File = syn::parse2(quote::quote! {
        #items
        static PROGRAM: ::fuse_runtime::__private::EmbeddedProgram = #program;
    })
    .expect("generated code parses");
    let code = prettyplease::unparse(&file);
    // The static's line holds the encoded tables (and the dump): the golden keeps the functions and the tables.
    let functions = code.split("static PROGRAM").next().unwrap_or_default();
    let tables = serde_json::to_string_pretty(&written.tables).expect("tables print");
    format!("{functions}// tables\n{tables}\n")
}

fn check_model(spec: &ModelSpec, stem: &str) {
    let g = graph_of(spec);
    check_golden(&format!("{stem}.ir.txt"), &dump_graph(&g));
    check_golden(&format!("{stem}.plan.txt"), &dump(&plan(&g, Mode::Fused)));
    check_golden(
        &format!("{stem}.eager.plan.txt"),
        &dump(&plan(&g, Mode::Eager)),
    );
    check_golden(
        &format!("{stem}.cpu.rs.txt"),
        &generated_rust(spec, Mode::Fused),
    );
}

#[test]
fn encoder_golden() {
    check_model(EncoderLayer::spec(), "encoder");
}

#[test]
fn mlp_golden() {
    check_model(Mlp::spec(), "mlp");
}

/// Two compiles in this process agree, and agree with the macro's in the compiler's process (whose hash maps
/// were seeded apart from these), for the examples and every random-view model, both plans.
#[test]
fn compilation_is_deterministic() {
    let views = CASES.iter().map(|case| (case.spec)());
    for spec in [EncoderLayer::spec(), Mlp::spec()].into_iter().chain(views) {
        for (mode, embedded) in [
            (Mode::Fused, spec.fused.plan_hash),
            (Mode::Eager, spec.eager.plan_hash),
        ] {
            let (a, b) = (plan(&graph_of(spec), mode), plan(&graph_of(spec), mode));
            assert_eq!(a.hash, b.hash, "{} {mode:?}", spec.name);
            assert_eq!(
                generated_rust(spec, mode),
                generated_rust(spec, mode),
                "{} {mode:?}",
                spec.name
            );
            assert_eq!(
                embedded, a.hash,
                "{} {mode:?}: the macro and a fresh compile agree on the plan hash",
                spec.name
            );
        }
    }
}
