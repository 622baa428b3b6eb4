//! Finding and running nvcc. Discovery order: `$NVCC`, `$CUDA_HOME/bin/nvcc`, `$CUDA_PATH/bin/nvcc`, then `PATH`.
//! `cc::Build::cuda` was considered: it finds nvcc the same way but builds linkable objects, while fuse wants a
//! device-only fatbin per model, a content-hash cache and the failing command in the error; that is less code
//! by hand than bending `cc` to it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::BuildError;

/// Default GPU targets: Ampere and Hopper SASS, plus PTX of the newest for later GPUs to JIT.
pub const DEFAULT_ARCHS: [u32; 2] = [80, 90];

/// The nvcc to use, if any. `env` reads an environment variable (a parameter so tests can fake it).
pub fn find(env: &dyn Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let exe = format!("nvcc{}", std::env::consts::EXE_SUFFIX);
    if let Some(path) = env("NVCC").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    for root in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(root) = env(root).filter(|p| !p.is_empty()) {
            let candidate = Path::new(&root).join("bin").join(&exe);
            if candidate.is_file() {
                return Some(candidate);
            }
        }
    }
    let path = env("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(&exe))
        .find(|p| p.is_file())
}

/// Parses `FUSE_CUDA_ARCHS` ("80,90", "sm_80;sm_90", "90"): sorted, deduplicated compute capabilities.
pub fn parse_archs(value: Option<&str>) -> Result<Vec<u32>, BuildError> {
    let Some(value) = value.filter(|v| !v.trim().is_empty()) else {
        return Ok(DEFAULT_ARCHS.to_vec());
    };
    let bad = |why: String| BuildError::BadArchs {
        value: value.to_string(),
        why,
    };
    let mut archs = Vec::new();
    for part in value
        .split([',', ';', ' '])
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let digits = part
            .trim_start_matches("sm_")
            .trim_start_matches("compute_");
        let arch: u32 = digits
            .parse()
            .map_err(|_| bad(format!("`{part}` is not a compute capability")))?;
        // CUDA 13 dropped everything before Turing (compute_75).
        if !(75..=199).contains(&arch) {
            return Err(bad(format!(
                "`{part}` is outside what CUDA 13 targets (75..=121)"
            )));
        }
        archs.push(arch);
    }
    archs.sort_unstable();
    archs.dedup();
    if archs.is_empty() {
        return Err(bad("no architecture given".into()));
    }
    Ok(archs)
}

/// The nvcc arguments (before the input and output): a fatbin with SASS for each arch and PTX for the newest.
pub fn fatbin_args(archs: &[u32]) -> Vec<String> {
    let mut args = vec![
        "-fatbin".to_string(),
        "-std=c++17".to_string(),
        "-O3".to_string(),
    ];
    for a in archs {
        args.push(format!("-gencode=arch=compute_{a},code=sm_{a}"));
    }
    if let Some(newest) = archs.iter().max() {
        args.push(format!(
            "-gencode=arch=compute_{newest},code=compute_{newest}"
        ));
    }
    args
}

/// A command line as a shell would read it, for error messages.
pub fn command_line(program: &Path, args: &[String]) -> String {
    let quote = |s: &str| {
        if s.is_empty() || s.contains([' ', '"', '\'', '\t']) {
            format!("'{}'", s.replace('\'', r"'\''"))
        } else {
            s.to_string()
        }
    };
    let mut parts = vec![quote(&program.to_string_lossy())];
    parts.extend(args.iter().map(|a| quote(a)));
    parts.join(" ")
}

/// Compiles `source` into `output` (written through a temporary file, so an interrupted build never leaves a
/// truncated fatbin in the cache).
pub fn compile(
    nvcc: &Path,
    archs: &[u32],
    source: &Path,
    output: &Path,
    model: &str,
) -> Result<(), BuildError> {
    let tmp = output.with_extension("fatbin.tmp");
    let mut args = fatbin_args(archs);
    args.push("-o".into());
    args.push(tmp.to_string_lossy().into_owned());
    args.push(source.to_string_lossy().into_owned());
    let command = command_line(nvcc, &args);
    let result =
        Command::new(nvcc)
            .args(&args)
            .output()
            .map_err(|source| BuildError::NvccSpawn {
                command: command.clone(),
                source,
            })?;
    if !result.status.success() {
        let _ = std::fs::remove_file(&tmp);
        return Err(BuildError::Nvcc {
            model: model.to_string(),
            command,
            status: result.status.to_string(),
            stderr: String::from_utf8_lossy(&result.stderr).into_owned(),
        });
    }
    std::fs::rename(&tmp, output).map_err(BuildError::io("renaming", output))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archs_parse_and_default() {
        assert_eq!(parse_archs(None).ok(), Some(vec![80, 90]));
        assert_eq!(parse_archs(Some("90, sm_80;90")).ok(), Some(vec![80, 90]));
        assert!(matches!(
            parse_archs(Some("sm_xx")),
            Err(BuildError::BadArchs { .. })
        ));
        assert!(matches!(
            parse_archs(Some("70")),
            Err(BuildError::BadArchs { .. })
        ));
    }

    #[test]
    fn fatbin_args_add_ptx_for_the_newest_arch() {
        let args = fatbin_args(&[80, 90]);
        assert!(args.contains(&"-gencode=arch=compute_80,code=sm_80".to_string()));
        assert!(args.contains(&"-gencode=arch=compute_90,code=sm_90".to_string()));
        assert_eq!(
            args.last().map(String::as_str),
            Some("-gencode=arch=compute_90,code=compute_90")
        );
    }

    #[test]
    fn nvcc_env_wins_then_path() {
        let env = |k: &str| (k == "NVCC").then(|| OsString::from("/opt/x/nvcc"));
        assert_eq!(find(&env), Some(PathBuf::from("/opt/x/nvcc")));
        let none = |_: &str| None;
        assert_eq!(find(&none), None);
    }
}
