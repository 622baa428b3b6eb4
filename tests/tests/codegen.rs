//! The generated CPU code grows with the distinct kernels of a model, not with its depth: MiniLM captured with 2
//! and with 6 layers has the same kernel functions (every layer's kernels share them), and each function is what
//! the CUDA writer, deciding on its own code, also emits once. The plan's tables, which do grow, are one string.

use std::collections::{BTreeMap, BTreeSet};

use fuse_examples::models::minilm::minilm::MiniLm;
use fuse_kernels::back::cpu::write_program;
use fuse_kernels::back::cuda::launches;
use fuse_kernels::front::capture_str;
use fuse_kernels::ir::Graph;
use fuse_kernels::plan::{plan, Mode, Plan};

/// MiniLM's graph with `layers` encoder layers: its source with the `LAYERS` constant set to `layers`.
fn minilm(layers: usize) -> Graph {
    let mut file = syn::parse_file(MiniLm::spec().source).expect("MiniLM source parses");
    let mut declared = false;
    for item in &mut file.items {
        let syn::Item::Mod(module) = item else {
            continue;
        };
        for item in module.content.iter_mut().flat_map(|(_, items)| items) {
            if let syn::Item::Const(c) = item {
                if c.ident == "LAYERS" {
                    *c.expr = syn::parse_quote!(#layers);
                    declared = true;
                }
            }
        }
    }
    assert!(declared, "MiniLM declares its depth as `LAYERS`");
    let source = quote::quote!(#file).to_string();
    let cap = capture_str(&source).expect("MiniLM source parses");
    assert!(cap.errors.is_none(), "MiniLM captures with {layers} layers");
    cap.models
        .into_iter()
        .find(|m| m.name == "MiniLm")
        .expect("MiniLm in its source")
        .graph
}

/// The generated kernel functions of `p` and the text of its items.
fn functions(p: &Plan) -> (usize, usize) {
    let items = write_program(p, "MiniLm").items;
    let file: syn::File = syn::parse2(items.clone()).expect("generated items parse");
    let fns = file
        .items
        .iter()
        .filter(|i| matches!(i, syn::Item::Fn(_)))
        .count();
    (fns, items.to_string().len())
}

/// Token trees in `tokens`, groups counted with their contents: what rustc has to parse.
fn count_tokens(tokens: proc_macro2::TokenStream) -> usize {
    tokens
        .into_iter()
        .map(|t| match t {
            proc_macro2::TokenTree::Group(g) => 1 + count_tokens(g.stream()),
            _ => 1,
        })
        .sum()
}

#[test]
fn plan_tables_are_data_not_code() {
    // The tables (buffers, calls, report lines) grow with depth; embedded as one string, the expression does not.
    for mode in [Mode::Fused, Mode::Eager] {
        let (shallow, deep) = (plan(&minilm(2), mode), plan(&minilm(6), mode));
        let (shallow, deep) = (
            write_program(&shallow, "MiniLm"),
            write_program(&deep, "MiniLm"),
        );
        assert!(deep.tables.kernels.len() > shallow.tables.kernels.len());
        assert_eq!(
            count_tokens(shallow.program),
            count_tokens(deep.program),
            "{mode:?}: tokens of the program expression"
        );
        let back: fuse_tables::ProgramTables =
            fuse_tables::decode(&fuse_tables::encode(&deep.tables)).expect("tables decode");
        assert_eq!(back, deep.tables, "{mode:?}");
    }
}

/// Kernels the CUDA writer gives distinct code: a kernel launches one or two functions (a matmul's epilogue and
/// its fallback GEMM), named after the first kernel with the same code, so kernels with the same code launch the
/// same symbols.
fn distinct_cuda_kernels(p: &Plan) -> usize {
    let mut symbols_of: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    for launch in launches(p, "MiniLm") {
        symbols_of
            .entry(launch.kernel)
            .or_default()
            .insert(launch.symbol);
    }
    symbols_of.into_values().collect::<BTreeSet<_>>().len()
}

#[test]
fn kernel_functions_do_not_grow_with_depth() {
    for mode in [Mode::Fused, Mode::Eager] {
        let (shallow, deep) = (plan(&minilm(2), mode), plan(&minilm(6), mode));
        assert!(deep.kernels.len() > shallow.kernels.len(), "{mode:?}");
        let (shallow_fns, shallow_bytes) = functions(&shallow);
        let (deep_fns, deep_bytes) = functions(&deep);
        eprintln!(
            "{mode:?}: 2 layers: {} kernels, {shallow_fns} functions, {shallow_bytes} bytes; \
             6 layers: {} kernels, {deep_fns} functions, {deep_bytes} bytes",
            shallow.kernels.len(),
            deep.kernels.len()
        );
        assert_eq!(shallow_fns, deep_fns, "{mode:?}: functions per depth");
        // Only the names of the functions used after the layers (`k120_..` instead of `k40_..`) may grow.
        assert!(
            deep_bytes * 100 <= shallow_bytes * 101,
            "{mode:?}: code size per depth"
        );
        assert!(deep_fns < deep.kernels.len(), "{mode:?}: layers share code");
    }
}

#[test]
fn one_function_per_kernel_the_cuda_writer_finds_distinct() {
    let p = plan(&minilm(6), Mode::Fused);
    let (fns, _) = functions(&p);
    assert_eq!(fns, distinct_cuda_kernels(&p));
}
