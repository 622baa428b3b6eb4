//! Typed build errors: each names what failed and, for nvcc, carries the exact command line and its stderr.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(
        "environment variable `{0}` is not set; `fuse_build::compile` must run from a build script"
    )]
    MissingEnv(&'static str),

    #[error("{action} `{}`: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("FUSE_CUDA_ARCHS={value:?}: {why} (expected compute capabilities such as \"80,90\")")]
    BadArchs { value: String, why: String },

    #[error(
        "two #[fused_model] models are named `{name}` ({} and {}) but compile to different plans; \
         the generated files `OUT_DIR/fuse/{name}.*` would collide — rename one",
        first.display(),
        second.display()
    )]
    DuplicateModel {
        name: String,
        first: PathBuf,
        second: PathBuf,
    },

    #[error("could not run nvcc (`{command}`): {source}")]
    NvccSpawn {
        command: String,
        #[source]
        source: std::io::Error,
    },

    #[error("nvcc failed ({status}) compiling the generated CUDA of `{model}`\ncommand: {command}\n{stderr}")]
    Nvcc {
        model: String,
        command: String,
        status: String,
        stderr: String,
    },
}

impl BuildError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> BuildError {
        let path = path.into();
        move |source| BuildError::Io {
            action,
            path,
            source,
        }
    }
}
