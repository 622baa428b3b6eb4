//! Golden files: generated text is compared byte for byte with a committed copy; `FUSE_BLESS=1` rewrites the
//! copies instead, so a change in generated code is always a reviewed diff.

use std::path::PathBuf;

pub fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("golden")
}

/// Compares `actual` with `golden/<name>`, or rewrites it when `FUSE_BLESS` is set.
#[track_caller]
pub fn check_golden(name: &str, actual: &str) {
    let path = golden_dir().join(name);
    if std::env::var_os("FUSE_BLESS").is_some() {
        std::fs::create_dir_all(golden_dir()).expect("create golden dir");
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "missing golden file {}; run with FUSE_BLESS=1 to create it",
            path.display()
        )
    });
    if expected != actual {
        let line = expected
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .map_or(expected.lines().count().min(actual.lines().count()), |i| i);
        panic!(
            "{} differs from the generated text at line {}:\n  golden:    {:?}\n  generated: {:?}\nreview the change, then bless with FUSE_BLESS=1",
            path.display(),
            line + 1,
            expected.lines().nth(line).unwrap_or(""),
            actual.lines().nth(line).unwrap_or("")
        );
    }
}
