//! Every golden generated `.cu` of the project (tests/golden/*.cu), compiled to PTX by nvcc for compute_80 and
//! compute_90, parses and decodes: every instruction form fuse's kernels contain is known to the simulator.

mod common;

use common::{compile_ptx, workspace_root};
use gpusim::Module;

#[test]
fn every_golden_kernel_decodes() {
    let dir = workspace_root().join("tests/golden");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/golden")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "cu"))
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "no golden .cu files under {}",
        dir.display()
    );
    for file in files {
        let source = std::fs::read_to_string(&file).expect("read golden .cu");
        let variants = [
            ("compute_80", source.clone()),
            ("compute_90", source.clone()),
            ("compute_80", with_storage(&source, "f16")),
            ("compute_90", with_storage(&source, "bf16")),
        ];
        // nvcc runs for the four variants at once.
        let compiled: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = variants
                .iter()
                .map(|(arch, source)| scope.spawn(move || (*arch, compile_ptx(source, arch, &[]))))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("nvcc thread"))
                .collect()
        });
        for (arch, ptx) in compiled {
            let Some(ptx) = ptx else { return };
            let module = Module::from_ptx(&ptx)
                .unwrap_or_else(|e| panic!("{} ({arch}): {e}", file.display()));
            let entries = ptx.matches(".entry").count();
            assert_eq!(module.kernels.len(), entries, "{}", file.display());
            assert!(module.kernels.iter().all(|k| k.instruction_count() > 0));
        }
    }
}

/// The golden files are written for f32 storage; the half-precision variants the writer emits differ only in the
/// storage typedef, its conversion and the prelude's define, which this reproduces.
fn with_storage(source: &str, storage: &str) -> String {
    let typedef = "typedef float fuse_t;\nFUSE_DEVICE fuse_t fuse_from_f32(float v) { return v; }";
    assert!(
        source.contains(typedef),
        "the golden file's storage typedef changed"
    );
    let replaced = format!(
        "typedef fuse_{storage} fuse_t;\nFUSE_DEVICE fuse_t fuse_from_f32(float v) {{ return fuse_{storage}_from_f32(v); }}"
    );
    format!(
        "#define FUSE_STORAGE_{} 1\n{}",
        storage.to_uppercase(),
        source.replace(typedef, &replaced)
    )
}
