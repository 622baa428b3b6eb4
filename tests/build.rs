//! Writes the random-view models (`gen/random_views.rs`) into `OUT_DIR`. `FUSE_VIEW_SEED` and `FUSE_VIEW_MODELS`
//! draw another set (the defaults are what CI runs).

#[path = "gen/random_views.rs"]
mod random_views;

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
    let text = random_views::write(
        number("FUSE_VIEW_SEED", 1),
        number("FUSE_VIEW_MODELS", 48) as usize,
    );
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    std::fs::write(std::path::Path::new(&out).join("random_views.rs"), text)
        .expect("OUT_DIR is writable");
}
