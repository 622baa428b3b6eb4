//! The CUDA writer on every example model (and an edge-case model): the generated source of the fused and eager
//! plans, and of the fused plan with f16 and bf16 storage, must pass nvcc and ptxas for sm_90, and the fused
//! source of each example must match its golden file (`tests/golden/<model>.fused.cu`; bless with
//! `FUSE_BLESS=1`). Without nvcc (`$NVCC`, `.toolchain/cuda` from `scripts/install-nvcc.sh`, or `PATH`) the
//! compile test says so and passes; the golden test needs no nvcc.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use fuse_kernels::back::cuda::{self, Options, StorageType};
use fuse_kernels::front::{capture_with, find_libraries, fused_modules, Role};
use fuse_kernels::ir::Graph;
use fuse_kernels::plan::{self, Mode};
use fuse_tests::golden::check_golden;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One captured example model: golden file stem, model (root struct) name and graph.
struct Example {
    stem: String,
    name: String,
    graph: Graph,
}

/// Models that reach corners the examples do not: a row op over a non-last (dynamic) axis, reductions with an
/// epilogue read, comparisons and `where_`, concat of offset slices, a folded GEMM whose epilogue reads a slice,
/// an unfolded batched GEMM, concats fused into their readers along the innermost and an outer axis, and
/// narrows at a start and of a length bound from `#[dim]` arguments, and embeddings at ids the model computes.
/// Compiled only (no golden file).
const EDGE_CASES: &str = r#"
#[fused_model]
pub mod edge {
    pub struct Edge {
        #[shape(16)]
        g: Tensor,
        #[shape(8, 16)]
        w: Tensor,
    }

    impl Edge {
        pub fn forward(
            &self,
            #[shape(batch, seq, 16)] x: Tensor,
            #[shape(batch, 16, seq)] y: Tensor,
            #[shape(batch, seq)] ids: Tensor<i64>,
            #[shape(batch, 1024)] z: Tensor,
        ) -> (
            Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor,
            Tensor, Tensor, Tensor,
        ) {
            let a = x.softmax(1);
            let b = x.rms_norm(&self.g, 1e-6) * 2.0 + where_(x.gt(0.0), x, x * 0.1);
            let c = x.mean(2, false) + x.max(2, false) + ids.to_f32();
            let d = concat([x.slice(2, 0, 4), x.slice(2, 8, 16)], 2);
            let e = x.matmul(&self.w.t()) + x.slice(2, 0, 8);
            let f = (x.matmul(&y) * 0.5).softmax(-1);
            let h = embedding(&self.w, &ids).sum(1, true).sigmoid();
            // Written-out row ops: a warp per static row, per dynamic row, and a block per long row.
            let i = x * (x.square().mean(-1, true) + 1e-6).rsqrt() * (&self.g + 1.0);
            let shifted = (y - y.max(-1, true)).exp();
            let j = shifted / shifted.sum(-1, true);
            let centred = z - z.mean(-1, true);
            let k = centred * (centred.square().mean(-1, true) + 1e-5).rsqrt();
            let rotated = x * 0.5 + concat([x.slice(2, 8, 16).neg(), x.slice(2, 0, 8)], 2) * &self.g;
            let stacked = concat([y.slice(1, 8, 16).neg(), (y.slice(1, 0, 8) * 2.0).exp()], 1) + y;
            // Running sums: a warp's scan over a dynamic row, a block's over a long static one.
            let (l, m) = (x.cumsum(1) + 1.0, z.cumsum(-1));
            // Ids the model computes, by a scan and by an elementwise kernel: kept in f32 in half storage.
            let tokens = ids.to_f32().ne(0.0).to_f32();
            let counted = embedding(&self.w, &tokens.cumsum(1).to_i64());
            let doubled = embedding(&self.w, &(tokens * 2.0 + 1.0).to_i64());
            (a, b, c, d, e, f, h, i, j, k, rotated, stacked, l, m, counted + doubled)
        }
    }

    pub struct Narrows {
        #[shape(32, 16)]
        table: Tensor,
    }

    impl Narrows {
        pub fn forward(
            &self,
            #[shape(batch, seq, 16)] x: Tensor,
            #[shape(batch, 32, 16)] cache: Tensor,
            #[dim] past: usize,
            #[dim] total: usize,
        ) -> (Tensor, Tensor, Tensor) {
            let rows = x * self.table.narrow(0, past, x.dim(1));
            let keys = cache.narrow(1, past, total);
            let attn = (x.matmul(&keys.t()) * 0.25).softmax(-1).matmul(&keys);
            let cols = x.narrow(2, past, 4).exp() + 1.0;
            (rows, attn, cols)
        }
    }
}
"#;

fn edge_cases() -> Vec<Example> {
    let module: syn::ItemMod =
        syn::parse_str(EDGE_CASES).unwrap_or_else(|e| panic!("edge-case source: {e}"));
    let capture = fuse_kernels::front::capture(&module);
    if let Some(e) = capture.errors {
        panic!("edge-case model does not capture: {e}");
    }
    let models = capture.models.into_iter();
    models
        .map(|m| Example {
            stem: "edge".into(),
            name: m.name.to_string(),
            graph: m.graph,
        })
        .collect()
}

/// Every model of `examples/src/models/*.rs`, in file order.
fn examples() -> Vec<Example> {
    let dir = repo_root().join("examples/src/models");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        .collect();
    files.sort();
    // Every module first, so a model finds its libraries in any file.
    let mut modules = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let parsed =
            syn::parse_file(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", file.display()));
        let stem = file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        modules.extend(
            fused_modules(&parsed.items)
                .into_iter()
                .map(|m| (stem.clone(), m)),
        );
    }
    let all: Vec<(syn::ItemMod, Role)> = modules.iter().map(|(_, m)| m.clone()).collect();
    let mut out = Vec::new();
    for (stem, (module, role)) in &modules {
        let Role::Model { uses, .. } = role else {
            continue;
        };
        let libraries = find_libraries(uses, &all).unwrap_or_else(|e| panic!("{stem}: {e}"));
        let capture = capture_with(module, &libraries);
        if let Some(e) = capture.errors {
            panic!("{stem} does not capture: {e}");
        }
        for m in capture.models {
            out.push(Example {
                stem: stem.clone(),
                name: m.name.to_string(),
                graph: m.graph,
            });
        }
    }
    // A file that holds several models (in one module or in several) names each golden file after its model.
    let stems: Vec<String> = out.iter().map(|ex| ex.stem.clone()).collect();
    for ex in &mut out {
        if stems.iter().filter(|s| **s == ex.stem).count() > 1 {
            ex.stem = format!("{}.{}", ex.stem, ex.name);
        }
    }
    out
}

#[test]
fn golden_fused_cuda() {
    for ex in examples() {
        let plan = plan::plan(&ex.graph, Mode::Fused);
        check_golden(
            &format!("{}.fused.cu", ex.stem),
            &cuda::write_cuda(&plan, &ex.name),
        );
    }
}

/// `$NVCC`, then the project toolchain, then `PATH`.
fn find_nvcc() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("NVCC").filter(|p| !p.is_empty()) {
        return Some(p.into());
    }
    let local = repo_root().join(".toolchain/cuda/nvidia/cu13/bin/nvcc");
    if local.is_file() {
        return Some(local);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("nvcc"))
        .find(|p| p.is_file())
}

/// Runs a tool, failing the test with its command line and stderr.
fn run(program: &Path, args: &[&str], what: &str) {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    if !output.status.success() {
        panic!(
            "{what} failed ({}):\n{} {}\n{}",
            output.status,
            program.display(),
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn generated_cuda_compiles_with_nvcc_and_ptxas() {
    let Some(nvcc) = find_nvcc() else {
        println!("skipped: nvcc not found; run scripts/install-nvcc.sh (or set NVCC)");
        return;
    };
    // ptxas ships next to nvcc; fall back to PATH.
    let ptxas = nvcc.with_file_name("ptxas");
    let ptxas = if ptxas.is_file() {
        ptxas
    } else {
        PathBuf::from("ptxas")
    };
    let dir = std::env::temp_dir().join(format!("fuse-cuda-compiles-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    let started = Instant::now();
    let mut units = Vec::new();
    for ex in examples().into_iter().chain(edge_cases()) {
        for mode in [Mode::Fused, Mode::Eager] {
            let plan = plan::plan(&ex.graph, mode);
            units.push((
                format!("{}.{mode:?}", ex.stem),
                cuda::write_cuda(&plan, &ex.name),
            ));
        }
    }
    // The f16 / bf16 storage paths differ in loads and stores only: the edge-case model covers every kernel kind.
    for ex in edge_cases() {
        let plan = plan::plan(&ex.graph, Mode::Fused);
        for storage in [StorageType::F16, StorageType::Bf16] {
            let source = cuda::write_cuda_with(&plan, &ex.name, &Options { storage });
            units.push((format!("{}.{storage:?}", ex.stem), source));
        }
    }
    // Two at a time: the CI machines have two cores.
    std::thread::scope(|s| {
        for chunk in units.chunks(units.len().div_ceil(2).max(1)) {
            let (dir, nvcc, ptxas) = (&dir, &nvcc, &ptxas);
            s.spawn(move || {
                for (name, source) in chunk {
                    let cu = dir.join(format!("{name}.cu"));
                    let ptx = dir.join(format!("{name}.ptx"));
                    let cubin = dir.join(format!("{name}.cubin"));
                    std::fs::write(&cu, source).expect("write .cu");
                    let (cu, ptx, cubin) = (
                        cu.to_string_lossy(),
                        ptx.to_string_lossy(),
                        cubin.to_string_lossy(),
                    );
                    run(
                        nvcc,
                        &["-arch=sm_90", "-std=c++17", "-ptx", "-o", &ptx, &cu],
                        &format!("nvcc on {name}"),
                    );
                    run(
                        ptxas,
                        &["-arch=sm_90", "-o", &cubin, &ptx],
                        &format!("ptxas on {name}"),
                    );
                }
            });
        }
    });
    println!(
        "nvcc + ptxas on {} generated files: {:.1} s",
        units.len(),
        started.elapsed().as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
