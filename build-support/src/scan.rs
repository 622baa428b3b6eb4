//! Finding the `#[fused_model]` modules of a crate: every `.rs` file under `src/`, parsed with syn and walked
//! through inline modules. The same module text is what the macro sees, so both run the same pipeline.

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

/// Whether an attribute is `#[fused_model]` under any path (`fuse_runtime::fused_model`, a re-export...).
fn is_fused_model(attr: &syn::Attribute) -> bool {
    attr.path()
        .segments
        .last()
        .is_some_and(|s| s.ident == "fused_model")
}

/// The `#[fused_model]` modules of a parsed file, outermost first, searching inside inline modules.
pub fn fused_modules(file: &syn::File) -> Vec<syn::ItemMod> {
    let mut found = Vec::new();
    collect(&file.items, &mut found);
    found
}

fn collect(items: &[syn::Item], found: &mut Vec<syn::ItemMod>) {
    for item in items {
        let syn::Item::Mod(module) = item else {
            continue;
        };
        if module.attrs.iter().any(is_fused_model) {
            found.push(module.clone());
        } else if let Some((_, inner)) = &module.content {
            collect(inner, found);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_models_in_nested_inline_modules() {
        let file: syn::File = syn::parse_str(
            "#[fused_model] mod a {} \
             mod outer { #[fuse_runtime::fused_model] pub mod b {} mod deeper { #[fused_model] mod c {} } } \
             #[other] mod d {}",
        )
        .expect("test source parses");
        let names: Vec<String> = fused_modules(&file)
            .iter()
            .map(|m| m.ident.to_string())
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
    }
}
