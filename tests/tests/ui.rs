//! The compile-fail suite: each file under `tests/ui/<category>/` (this crate's `ui/`; trybuild resolves the globs
//! from the crate root) is a small program whose model the compiler
//! must refuse with the message in the `.stderr` beside it, on the right tokens (and `pass/` must build and run).
//! Bless new or changed messages with `TRYBUILD=overwrite cargo test -p fuse-tests --test ui`, then read each
//! `.stderr`: the caret must point at the mistake and the text must say what to write instead.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    for category in [
        "control_flow",
        "unsupported",
        "shapes",
        "dtypes",
        "signatures",
        "libraries",
        "contracts",
        "state",
    ] {
        t.compile_fail(format!("ui/{category}/*.rs"));
    }
    t.pass("ui/pass/*.rs");
}
