//! Loading one plan's kernels, the first two steps of the fallback chain: the AOT fatbin from `fuse_build` when it
//! has code for this GPU, else NVRTC on the embedded source. Each outcome says why it was taken. A plan hash
//! that differs from the model's is a hard error, never a fallback: stale kernels would give wrong numbers.

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaModule};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions, Ptx};

use super::spec::CudaProgram;
use super::sys::{library_present, Library};
use crate::device::{GpuOptions, Precision};
use crate::error::{Error, Result};
use crate::exec::Program;

/// A loaded module and the report line saying where its code came from.
pub struct Loaded {
    pub module: Arc<CudaModule>,
    pub how: String,
}

fn stale(program: &Program, what: &str, found: u64) -> Error {
    Error::StaleKernels {
        model: program.model.into(),
        plan: program.mode.into(),
        what: what.into(),
        expected: program.plan_hash,
        found,
    }
}

fn nvrtc_message(e: CompileError) -> String {
    match e {
        CompileError::CompileError { nvrtc, log, .. } => {
            format!("{nvrtc:?}:\n{}", log.to_string_lossy())
        }
        other => format!("{other:?}"),
    }
}

/// The plan's module on `ctx`, whose GPU has compute capability `arch`.
pub fn load(
    ctx: &Arc<CudaContext>,
    program: &Program,
    code: &CudaProgram,
    options: GpuOptions,
    arch: (u32, u32),
) -> Result<Loaded> {
    let precision = options.precision;
    if code.plan_hash != program.plan_hash {
        return Err(stale(program, "the embedded CUDA source", code.plan_hash));
    }
    let sm = format!("{}{}", arch.0, arch.1);
    let why_not_aot = match (precision, &code.aot) {
        (Precision::Bf16, _) => "bf16 storage is compiled at run time only".to_string(),
        (Precision::F16, _) => "f16 storage is compiled at run time only".to_string(),
        (Precision::F32, _) if options.jit => "NVRTC was requested".to_string(),
        (Precision::F32, None) => {
            "no AOT fatbin: the crate's build.rs does not run fuse_build::compile()".to_string()
        }
        (Precision::F32, Some(aot)) => {
            // An unreadable hash file is as stale as a wrong one.
            let found = u64::from_str_radix(aot.plan_hash.trim(), 16).unwrap_or(0);
            if found != program.plan_hash {
                return Err(stale(program, "the AOT fatbin from build.rs", found));
            }
            if aot.fatbin.is_empty() {
                "no AOT fatbin: nvcc was not found when the crate was built".to_string()
            } else {
                match ctx.load_module(Ptx::from_binary(aot.fatbin.to_vec())) {
                    Ok(module) => {
                        return Ok(Loaded {
                            module,
                            how: format!("AOT fatbin for sm_{sm}"),
                        })
                    }
                    Err(e) => format!("the AOT fatbin has no code sm_{sm} can run ({e})"),
                }
            }
        }
    };
    if !library_present(Library::Nvrtc) {
        return Err(Error::Cuda {
            message: format!(
                "no GPU code for the {} plan of `{}`: {why_not_aot}, and {} is not installed to compile the \
                 embedded source",
                program.mode,
                program.model,
                Library::Nvrtc.file()
            ),
        });
    }
    let source = match precision {
        Precision::F32 => code.source,
        Precision::Bf16 => code.source_bf16,
        Precision::F16 => code.source_f16,
    };
    let opts = CompileOptions {
        options: vec![format!("--gpu-architecture=compute_{sm}")],
        name: Some(format!("{}.{}.cu", program.model, program.mode)),
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(source, opts).map_err(|e| Error::Cuda {
        message: format!(
            "NVRTC could not compile the {} plan of `{}`: {}",
            program.mode,
            program.model,
            nvrtc_message(e)
        ),
    })?;
    let module = ctx.load_module(ptx).map_err(|e| Error::Cuda {
        message: format!("loading the NVRTC output for sm_{sm}: {e}"),
    })?;
    Ok(Loaded {
        module,
        how: format!("NVRTC JIT of embedded source (compute_{sm}): {why_not_aot}"),
    })
}
