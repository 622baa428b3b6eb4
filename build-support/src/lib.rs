//! `fuse-build`: what a crate's `build.rs` calls so its `#[fused_model]` models get GPU code at build time.
//!
//! ```no_run
//! // The body of `fn main` in the crate's build.rs:
//! if let Err(e) = fuse_build::compile() {
//!     panic!("{e}");
//! }
//! ```
//!
//! [`compile`] scans `src/**/*.rs`, captures every `#[fused_model]` module with the same pipeline the macro runs
//! (`fuse_kernels::front::capture` → `plan::plan` in `Fused` and `Eager` mode), writes the CUDA source of each
//! plan, and compiles it with nvcc into a fatbin (SASS for `sm_80` and `sm_90` and PTX for the newest target;
//! override with `FUSE_CUDA_ARCHS="80,90"`). Without nvcc it prints one `cargo:warning` and succeeds: the
//! binary then runs on the CPU, or JIT-compiles the embedded source with NVRTC on a GPU host.
//!
//! # Files in `OUT_DIR/fuse/` (the convention the macro and runtime rely on)
//! For every model, named by its root struct (`EncoderLayer`):
//! - `<Model>-<planhash>.cu`: the generated source of each plan (fused and eager), `<planhash>` 16 hex digits;
//! - `<Model>.cu`, `<Model>.plan_hash`, `<Model>.fatbin`: the **fused** plan's source, its hash (16 lowercase
//!   hex digits, no newline — compare with the macro's `PLAN_HASH`), and its fatbin;
//! - `<Model>.eager.cu`, `<Model>.eager.plan_hash`, `<Model>.eager.fatbin`: the same for the eager plan;
//! - `<contenthash>.fatbin`: the nvcc cache, keyed by source, flags and nvcc path (a hit skips nvcc).
//!
//! Every `<Model>*.fatbin` always exists — **empty** when nvcc was not found — so generated code can
//! `include_bytes!` it unconditionally and treat empty as "no AOT code" (next in the fallback chain: NVRTC).
//! `manifest.rs` (also in `OUT_DIR/fuse/`) holds one `pub mod <Model>` per model with `PLAN_HASH`,
//! `EAGER_PLAN_HASH`, `FATBIN`, `EAGER_FATBIN`, `CUDA_SOURCE`, `EAGER_CUDA_SOURCE` and `KERNELS` /
//! `EAGER_KERNELS`: `(kernel index, symbol, role, cuBLASLt epilogue)` per generated function; include it with
//! `include!(concat!(env!("OUT_DIR"), "/fuse/manifest.rs"))`. Launch geometry and parameter order come from
//! `fuse_kernels::back::cuda::launches` and the ABI in `fuse_kernels::back::cuda`'s docs.
//! `cargo:rustc-cfg=fuse_cuda_aot` is set when fatbins were built.

mod error;
mod manifest;
mod nvcc;
mod scan;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

pub use error::BuildError;
use fuse_kernels::front::Role;
use fuse_kernels::plan::{self, Mode, Plan};
use fuse_kernels::timing::{self, Timings};

/// Environment variables that change what [`compile`] does; cargo reruns the build script when they change.
/// `FUSE_BUILD_TIMINGS` prints where the time goes (see [`fuse_kernels::timing`]) and is listed so that setting
/// it reruns the script.
pub const ENV_VARS: [&str; 5] = [
    "NVCC",
    "CUDA_HOME",
    "CUDA_PATH",
    "FUSE_CUDA_ARCHS",
    fuse_kernels::timing::ENV_VAR,
];

/// Where to read sources and write results, and which nvcc to use.
#[derive(Clone, Debug)]
pub struct Config {
    /// The crate root (`CARGO_MANIFEST_DIR`); sources are read from its `src/`.
    pub manifest_dir: PathBuf,
    /// Cargo's `OUT_DIR`; results go to its `fuse/` folder.
    pub out_dir: PathBuf,
    /// `None`: no nvcc, sources only.
    pub nvcc: Option<PathBuf>,
    pub archs: Vec<u32>,
    /// Print each model's phase times and generated sizes to stderr (`FUSE_BUILD_TIMINGS`).
    pub timings: bool,
}

impl Config {
    /// The configuration of the running build script.
    pub fn from_env() -> Result<Config, BuildError> {
        let var = |k: &'static str| std::env::var_os(k).ok_or(BuildError::MissingEnv(k));
        let archs = std::env::var("FUSE_CUDA_ARCHS").ok();
        Ok(Config {
            manifest_dir: var("CARGO_MANIFEST_DIR")?.into(),
            out_dir: var("OUT_DIR")?.into(),
            nvcc: nvcc::find(&|k: &str| std::env::var_os(k)),
            archs: nvcc::parse_archs(archs.as_deref())?,
            timings: timing::requested(std::env::var(timing::ENV_VAR).ok().as_deref()),
        })
    }
}

/// One compiled plan.
#[derive(Clone, Debug)]
pub struct PlanReport {
    pub model: String,
    pub mode: Mode,
    pub plan_hash: u64,
    pub source: PathBuf,
    /// `None` without nvcc.
    pub fatbin: Option<PathBuf>,
    /// The fatbin came from the cache (nvcc did not run).
    pub cached: bool,
}

/// What [`compile`] did.
#[derive(Clone, Debug)]
pub struct Report {
    pub nvcc: Option<PathBuf>,
    pub archs: Vec<u32>,
    pub plans: Vec<PlanReport>,
    /// The `cargo:` lines for cargo ([`compile`] prints them; [`compile_with`] only returns them).
    pub cargo_lines: Vec<String>,
}

impl Report {
    /// Whether any GPU code was built.
    pub fn gpu_code(&self) -> bool {
        self.plans.iter().any(|p| p.fatbin.is_some())
    }
}

/// Scans, generates and compiles for the running build script, printing the `cargo:` lines.
pub fn compile() -> Result<Report, BuildError> {
    let report = compile_with(&Config::from_env()?)?;
    for line in &report.cargo_lines {
        println!("{line}");
    }
    Ok(report)
}

/// A captured model ready to write: its plans and the file it came from.
struct Model {
    name: String,
    file: PathBuf,
    fused: Plan,
    eager: Plan,
    timings: Timings,
}

/// [`compile`] with an explicit configuration; prints nothing.
pub fn compile_with(config: &Config) -> Result<Report, BuildError> {
    let src = config.manifest_dir.join("src");
    let files = scan::rust_files(&src)?;
    let mut lines = vec![format!("cargo:rerun-if-changed={}", src.display())];
    lines.extend(
        files
            .iter()
            .map(|f| format!("cargo:rerun-if-changed={}", f.display())),
    );
    lines.extend(
        ENV_VARS
            .iter()
            .map(|v| format!("cargo:rerun-if-env-changed={v}")),
    );
    lines.push("cargo:rustc-check-cfg=cfg(fuse_cuda_aot)".into());

    let models = capture_all(&files, &mut lines)?;
    let dir = config.out_dir.join("fuse");
    fs::create_dir_all(&dir).map_err(BuildError::io("creating", &dir))?;
    let nvcc = config.nvcc.as_deref().filter(|_| !models.is_empty());
    if config.nvcc.is_none() && !models.is_empty() {
        lines.push(
            "cargo:warning=fuse: nvcc not found (set NVCC or CUDA_HOME, or put nvcc on PATH); \
             building without GPU kernels, CUDA will fall back to NVRTC or the CPU"
                .into(),
        );
    }

    // Write every source first, then run nvcc on all of them in parallel (each run is seconds).
    let mut jobs = Vec::new();
    let mut models = models;
    for (index, m) in models.iter_mut().enumerate() {
        for plan in [&m.fused, &m.eager] {
            let suffix = if plan.mode == Mode::Eager {
                ".eager"
            } else {
                ""
            };
            let source = m.timings.time("write cuda", || {
                fuse_kernels::back::cuda::write_cuda(plan, &m.name)
            });
            m.timings.size(
                if plan.mode == Mode::Eager {
                    "eager cuda bytes"
                } else {
                    "fused cuda bytes"
                },
                source.len(),
            );
            let hashed = dir.join(format!("{}-{:016x}.cu", m.name, plan.hash));
            write_if_changed(&hashed, source.as_bytes())?;
            write_if_changed(
                &dir.join(format!("{}{suffix}.cu", m.name)),
                source.as_bytes(),
            )?;
            write_if_changed(
                &dir.join(format!("{}{suffix}.plan_hash", m.name)),
                format!("{:016x}", plan.hash).as_bytes(),
            )?;
            let key = nvcc.map(|n| {
                let flags = nvcc::fatbin_args(&config.archs).join(" ");
                let text = format!("{source}\0{flags}\0{}", n.display());
                dir.join(format!("{:016x}.fatbin", plan::fnv1a(text.as_bytes())))
            });
            jobs.push((
                m.name.clone(),
                plan.mode,
                plan.hash,
                hashed,
                key,
                suffix,
                index,
            ));
        }
    }
    let results: Vec<(Result<bool, BuildError>, std::time::Duration)> = std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .iter()
            .map(|(name, _, _, source, key, _, _)| {
                s.spawn(move || {
                    let start = std::time::Instant::now();
                    let result = match (nvcc, key) {
                        (Some(n), Some(cached)) if !cached.is_file() => {
                            nvcc::compile(n, &config.archs, source, cached, name).map(|()| false)
                        }
                        _ => Ok(true),
                    };
                    (result, start.elapsed())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or((Ok(false), std::time::Duration::ZERO)))
            .collect()
    });

    let mut plans = Vec::new();
    for ((name, mode, hash, source, key, suffix, index), (result, took)) in
        jobs.into_iter().zip(results)
    {
        // The jobs ran in parallel: each model's figure is the sum of its own runs.
        models[index].timings.add("nvcc", took);
        let cached = result?;
        let fatbin = dir.join(format!("{name}{suffix}.fatbin"));
        let bytes = match &key {
            Some(k) => fs::read(k).map_err(BuildError::io("reading", k))?,
            None => Vec::new(),
        };
        write_if_changed(&fatbin, &bytes)?;
        plans.push(PlanReport {
            model: name,
            mode,
            plan_hash: hash,
            source,
            fatbin: key.is_some().then_some(fatbin),
            cached: key.is_some() && cached,
        });
    }
    let manifest = manifest::write(
        &models
            .iter()
            .map(|m| (m.name.as_str(), &m.fused, &m.eager))
            .collect::<Vec<_>>(),
        &dir,
    );
    write_if_changed(&dir.join("manifest.rs"), manifest.as_bytes())?;
    if plans.iter().any(|p| p.fatbin.is_some()) {
        lines.push("cargo:rustc-cfg=fuse_cuda_aot".into());
    }
    if config.timings {
        for m in &models {
            eprintln!("fuse timings: fuse-build, model {}: {}", m.name, m.timings);
        }
    }
    Ok(Report {
        nvcc: config.nvcc.clone(),
        archs: config.archs.clone(),
        plans,
        cargo_lines: lines,
    })
}

/// Every model of every file, by name. Files or modules that do not parse or capture are skipped: rustc and
/// the macro report those errors on the user's code, better than a build script could.
/// Every model of the crate's `#[fused_model]` modules, with the libraries each one `uses` (found by module
/// name); `warnings` says why a module was skipped (the macro reports the same problem as a compile error, so the
/// build does not fail here).
fn capture_all(files: &[PathBuf], warnings: &mut Vec<String>) -> Result<Vec<Model>, BuildError> {
    let mut modules = Vec::new();
    let mut file_of = Vec::new();
    for file in files {
        let text = fs::read_to_string(file).map_err(BuildError::io("reading", file))?;
        let Ok(parsed) = syn::parse_file(&text) else {
            continue;
        };
        let found = fuse_kernels::front::fused_modules(&parsed.items);
        file_of.extend(std::iter::repeat_n(file, found.len()));
        modules.extend(found);
    }
    let mut by_name: BTreeMap<String, Model> = BTreeMap::new();
    for ((module, role), file) in modules.iter().zip(file_of) {
        let mut timings = Timings::default();
        let Role::Model { uses, .. } = role else {
            continue;
        };
        let used = match fuse_kernels::front::find_libraries(uses, &modules) {
            Ok(used) => used,
            Err(why) => {
                warnings.push(format!(
                    "cargo:warning=fuse: skipping the models of `{}` in {}: {why}",
                    module.ident,
                    file.display()
                ));
                continue;
            }
        };
        let capture = timings.time("capture", || {
            fuse_kernels::front::capture_with(module, &used)
        });
        for model in capture.models {
            let name = model.name.to_string();
            // Capture ran once for the module; each model's figures start from it.
            let mut timings = timings.clone();
            let fused = timings.time("plan", || plan::plan(&model.graph, Mode::Fused));
            if let Some(seen) = by_name.get(&name) {
                if seen.fused.hash != fused.hash {
                    return Err(BuildError::DuplicateModel {
                        name,
                        first: seen.file.clone(),
                        second: file.clone(),
                    });
                }
                continue;
            }
            let eager = timings.time("plan", || plan::plan(&model.graph, Mode::Eager));
            timings.size("fused kernels", fused.kernels.len());
            timings.size("eager kernels", eager.kernels.len());
            by_name.insert(
                name.clone(),
                Model {
                    name,
                    file: file.clone(),
                    fused,
                    eager,
                    timings,
                },
            );
        }
    }
    Ok(by_name.into_values().collect())
}

/// Writes only when the content differs, so an unchanged model does not make cargo recompile the crate that
/// `include_bytes!` it.
fn write_if_changed(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    if fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(());
    }
    fs::write(path, bytes).map_err(BuildError::io("writing", path))
}

/// The nvcc [`compile`] would use, from the environment (for tools and tests).
pub fn find_nvcc() -> Option<PathBuf> {
    nvcc::find(&|k: &str| std::env::var_os(k))
}

/// [`find_nvcc`] with an explicit environment.
pub fn find_nvcc_in(env: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    nvcc::find(env)
}

#[cfg(test)]
mod tests;
