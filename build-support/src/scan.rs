//! Finding the source files of a crate: every `.rs` file under `src/`. Their `#[fused_model]` modules are found
//! by `fuse_kernels::front::fused_modules`; the same module text is what the macro sees, so both run the same
//! pipeline.

use std::fs;
use std::path::{Path, PathBuf};

use crate::BuildError;

/// Every `.rs` file under `dir`, sorted, so the scan (and the manifest) never depends on directory order.
pub fn rust_files(dir: &Path) -> Result<Vec<PathBuf>, BuildError> {
    let mut files = Vec::new();
    if dir.is_dir() {
        walk(dir, &mut files)?;
    }
    files.sort();
    Ok(files)
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), BuildError> {
    let entries = fs::read_dir(dir).map_err(BuildError::io("reading directory", dir))?;
    for entry in entries {
        let entry = entry.map_err(BuildError::io("reading directory", dir))?;
        let path = entry.path();
        // `file_type` does not follow symlinks, so a link cycle cannot recurse forever.
        let kind = entry
            .file_type()
            .map_err(BuildError::io("reading", &path))?;
        if kind.is_dir() {
            walk(&path, files)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    Ok(())
}
