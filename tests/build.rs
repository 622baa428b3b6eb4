//! Writes the random-view models (`gen/random_views.rs`) into `OUT_DIR`. `FUSE_VIEW_SEED` and `FUSE_VIEW_MODELS`
//! draw another set (the defaults are what CI runs).

#[path = "gen/random_views.rs"]
mod random_views;

/// The set CI runs: its coverage is checked (`tests/random_views.rs`).
const DEFAULT_SEED: u64 = 1;
const DEFAULT_MODELS: u64 = 48;

fn main() {
    println!("cargo:rerun-if-changed=gen/random_views.rs");
    println!("cargo:rerun-if-env-changed=FUSE_VIEW_SEED");
    println!("cargo:rerun-if-env-changed=FUSE_VIEW_MODELS");
    let number = |var: &str, default: u64| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let seed = number("FUSE_VIEW_SEED", DEFAULT_SEED);
    let models = number("FUSE_VIEW_MODELS", DEFAULT_MODELS);
    let mut text = random_views::write(seed, models as usize);
    text += &format!(
        "\n/// Whether this is the set CI runs, whose coverage is checked.\npub const DEFAULT_SET: bool = {};\n",
        (seed, models) == (DEFAULT_SEED, DEFAULT_MODELS)
    );
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    std::fs::write(std::path::Path::new(&out).join("random_views.rs"), text)
        .expect("OUT_DIR is writable");
}
