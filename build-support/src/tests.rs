//! End-to-end tests of `compile_with` on a scratch crate holding the example MLP model and the library of
//! sub-models it uses.

use std::path::{Path, PathBuf};

use super::*;

const MLP: &str = include_str!("../../examples/src/models/mlp.rs");
const LAYERS: &str = include_str!("../../examples/src/models/layers.rs");

/// A scratch crate: `src/lib.rs`, the MLP in `src/models/mlp.rs`, its library in `src/models/layers.rs`, and a
/// file that does not parse.
fn scratch(name: &str) -> Config {
    let root = std::env::temp_dir().join(format!("fuse-build-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    let models = root.join("src").join("models");
    fs::create_dir_all(&models).expect("create scratch crate");
    fs::write(root.join("src").join("lib.rs"), "pub mod models;\n").expect("write lib.rs");
    fs::write(models.join("mlp.rs"), MLP).expect("write mlp.rs");
    fs::write(models.join("layers.rs"), LAYERS).expect("write layers.rs");
    fs::write(models.join("broken.rs"), "fn oops( {").expect("write broken.rs");
    Config {
        manifest_dir: root.clone(),
        out_dir: root.join("out"),
        nvcc: None,
        archs: vec![90],
        timings: false,
    }
}

/// nvcc from `$NVCC`, the project toolchain (`scripts/install-nvcc.sh`), or the usual places.
fn test_nvcc() -> Option<PathBuf> {
    let local =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../.toolchain/cuda/nvidia/cu13/bin/nvcc");
    find_nvcc().or_else(|| local.is_file().then_some(local))
}

#[test]
fn without_nvcc_writes_sources_and_empty_fatbins_and_warns_once() {
    let config = scratch("nonvcc");
    let report = compile_with(&config).expect("compile without nvcc succeeds");
    let warnings = report
        .cargo_lines
        .iter()
        .filter(|l| l.starts_with("cargo:warning="))
        .count();
    assert_eq!(warnings, 1, "{:#?}", report.cargo_lines);
    assert!(!report.gpu_code());
    assert!(!report
        .cargo_lines
        .contains(&"cargo:rustc-cfg=fuse_cuda_aot".to_string()));
    for file in ["lib.rs", "models/mlp.rs", "models/broken.rs"] {
        let line = format!(
            "cargo:rerun-if-changed={}",
            config.manifest_dir.join("src").join(file).display()
        );
        assert!(report.cargo_lines.contains(&line), "missing {line}");
    }
    for var in ENV_VARS {
        assert!(report
            .cargo_lines
            .contains(&format!("cargo:rerun-if-env-changed={var}")));
    }

    let dir = config.out_dir.join("fuse");
    let fused = report
        .plans
        .iter()
        .find(|p| p.mode == Mode::Fused)
        .expect("a fused plan");
    assert_eq!(fused.model, "Mlp");
    let hash = fs::read_to_string(dir.join("Mlp.plan_hash")).expect("plan hash file");
    assert_eq!(hash, format!("{:016x}", fused.plan_hash));
    assert!(dir.join(format!("Mlp-{hash}.cu")).is_file());
    assert_eq!(
        fs::read(dir.join("Mlp.fatbin")).map(|b| b.len()).ok(),
        Some(0)
    );
    assert_eq!(
        fs::read(dir.join("Mlp.eager.fatbin")).map(|b| b.len()).ok(),
        Some(0)
    );
    let cu = fs::read_to_string(dir.join("Mlp.cu")).expect("source");
    assert!(cu.contains(&format!("fuse_mlp_{hash}_k0_matmul_gemm")));

    let manifest = fs::read_to_string(dir.join("manifest.rs")).expect("manifest");
    assert!(manifest.contains("pub mod Mlp {"));
    assert!(manifest.contains(&format!("pub const PLAN_HASH: u64 = 0x{hash};")));
    assert!(manifest.contains("\"gemm_fallback\""));
    syn::parse_file(&manifest).expect("the manifest is valid Rust");
    let _ = fs::remove_dir_all(&config.manifest_dir);
}

#[test]
fn with_nvcc_builds_a_fatbin_once_then_hits_the_cache() {
    let Some(nvcc) = test_nvcc() else {
        println!("skipped: nvcc not found; run scripts/install-nvcc.sh");
        return;
    };
    let mut config = scratch("nvcc");
    config.nvcc = Some(nvcc);
    let first = compile_with(&config).unwrap_or_else(|e| panic!("{e}"));
    assert!(first.gpu_code());
    assert!(first.plans.iter().all(|p| !p.cached));
    assert!(first
        .cargo_lines
        .contains(&"cargo:rustc-cfg=fuse_cuda_aot".to_string()));
    assert!(!first
        .cargo_lines
        .iter()
        .any(|l| l.starts_with("cargo:warning=")));
    let fatbin = fs::read(config.out_dir.join("fuse").join("Mlp.fatbin")).expect("fatbin");
    assert!(!fatbin.is_empty());

    let second = compile_with(&config).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        second.plans.iter().all(|p| p.cached),
        "second build must not run nvcc"
    );
    let _ = fs::remove_dir_all(&config.manifest_dir);
}

#[cfg(unix)]
#[test]
fn an_nvcc_failure_carries_the_command_and_stderr() {
    use std::os::unix::fs::PermissionsExt;
    let mut config = scratch("nvccfail");
    let fake = config.manifest_dir.join("fake-nvcc");
    fs::write(
        &fake,
        "#!/bin/sh\necho 'error: boom on line 7' >&2\nexit 2\n",
    )
    .expect("write fake nvcc");
    fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).expect("chmod fake nvcc");
    config.nvcc = Some(fake.clone());
    match compile_with(&config) {
        Err(BuildError::Nvcc {
            model,
            command,
            stderr,
            ..
        }) => {
            assert_eq!(model, "Mlp");
            assert!(
                command.starts_with(&fake.display().to_string()),
                "{command}"
            );
            assert!(
                command.contains("-gencode=arch=compute_90,code=sm_90"),
                "{command}"
            );
            assert!(stderr.contains("boom on line 7"), "{stderr}");
        }
        other => panic!("expected an nvcc error, got {other:?}"),
    }
    let _ = fs::remove_dir_all(&config.manifest_dir);
}

#[test]
fn a_crate_without_models_needs_no_nvcc() {
    let config = scratch("empty");
    fs::remove_file(config.manifest_dir.join("src/models/mlp.rs")).expect("remove model");
    let report = compile_with(&config).expect("compile");
    assert!(report.plans.is_empty());
    assert!(!report
        .cargo_lines
        .iter()
        .any(|l| l.starts_with("cargo:warning=")));
    let _ = fs::remove_dir_all(&config.manifest_dir);
}

#[test]
fn a_model_whose_library_is_missing_is_skipped_with_a_warning() {
    let config = scratch("nolibrary");
    fs::remove_file(config.manifest_dir.join("src/models/layers.rs")).expect("remove library");
    let report = compile_with(&config).expect("compile");
    assert!(report.plans.is_empty());
    let warnings: Vec<&String> = report
        .cargo_lines
        .iter()
        .filter(|l| l.starts_with("cargo:warning="))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(
        warnings[0].contains("`mlp`")
            && warnings[0].contains("no library module is named `layers`"),
        "{}",
        warnings[0]
    );
    let _ = fs::remove_dir_all(&config.manifest_dir);
}
