//! Shared by the integration tests: nvcc discovery and PTX compilation, buffers, parameter packing.

#![allow(dead_code)]

use gpusim::{launch, DeviceMemory, Kernel, LaunchConfig, Module, SimResult};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// nvcc from `$NVCC` or the project's toolchain folder; `None` (and the test prints `skipped: ...`) without one.
pub fn nvcc() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("NVCC") {
        let path = PathBuf::from(path);
        if path.is_file() {
            return Some(path);
        }
    }
    let local = workspace_root().join(".toolchain/cuda/nvidia/cu13/bin/nvcc");
    local.is_file().then_some(local)
}

/// Compiles CUDA source to PTX for `arch` (e.g. `compute_90`); `None` when there is no nvcc.
pub fn compile_ptx(source: &str, arch: &str, defines: &[&str]) -> Option<String> {
    let Some(nvcc) = nvcc() else {
        println!("skipped: no nvcc (set NVCC or install the toolchain under .toolchain/)");
        return None;
    };
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "gpusim-test-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let cu = dir.join("kernel.cu");
    let ptx = dir.join("kernel.ptx");
    std::fs::write(&cu, source).expect("write .cu");
    let mut command = Command::new(&nvcc);
    command
        .arg("-ptx")
        .arg(format!("-arch={arch}"))
        .arg("-o")
        .arg(&ptx)
        .arg(&cu);
    for define in defines {
        command.arg(format!("-D{define}"));
    }
    let output = command.output().expect("run nvcc");
    assert!(
        output.status.success(),
        "nvcc failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&ptx).expect("read .ptx");
    let _ = std::fs::remove_dir_all(&dir);
    Some(text)
}

pub fn compile_module(source: &str) -> Option<Module> {
    compile_ptx(source, "compute_90", &[]).map(|ptx| Module::from_ptx(&ptx).expect("decode PTX"))
}

/// Packs kernel arguments at the offsets the kernel's parameter list gives.
pub enum Arg {
    U64(u64),
    I32(i32),
    U32(u32),
    F32(f32),
    I64(i64),
}

pub fn pack(kernel: &Kernel, args: &[Arg]) -> Vec<u8> {
    assert_eq!(
        kernel.params.len(),
        args.len(),
        "argument count of `{}`",
        kernel.name
    );
    let mut buf = vec![0u8; kernel.params_bytes() as usize];
    for (p, a) in kernel.params.iter().zip(args) {
        let bytes: Vec<u8> = match a {
            Arg::U64(v) => v.to_le_bytes().to_vec(),
            Arg::I64(v) => v.to_le_bytes().to_vec(),
            Arg::I32(v) => v.to_le_bytes().to_vec(),
            Arg::U32(v) => v.to_le_bytes().to_vec(),
            Arg::F32(v) => v.to_le_bytes().to_vec(),
        };
        assert_eq!(
            bytes.len(),
            p.size as usize,
            "size of parameter `{}`",
            p.name
        );
        buf[p.offset as usize..p.offset as usize + bytes.len()].copy_from_slice(&bytes);
    }
    buf
}

pub fn upload<T: Copy>(memory: &mut DeviceMemory, values: &[T]) -> u64 {
    let bytes = as_bytes(values);
    let address = memory.alloc(bytes.len()).expect("alloc");
    memory.write(address, bytes).expect("write");
    address
}

pub fn download<T: Copy + Default>(memory: &DeviceMemory, address: u64, len: usize) -> Vec<T> {
    let mut out = vec![T::default(); len];
    let size = std::mem::size_of_val(out.as_slice());
    // SAFETY: T is a plain numeric type (f32, i32, u16, ...) in every call; any byte pattern is a valid value.
    let bytes = unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), size) };
    memory.read(address, bytes, true).expect("read back");
    out
}

pub fn as_bytes<T: Copy>(values: &[T]) -> &[u8] {
    // SAFETY: plain numeric types only; reading their bytes is always valid.
    unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    }
}

pub fn run(
    module: &Module,
    name: &str,
    memory: &mut DeviceMemory,
    grid: u32,
    block: u32,
    dynamic_shared_bytes: u32,
    args: &[Arg],
) -> SimResult<()> {
    let kernel = module.kernel(name).expect("kernel");
    let params = pack(&kernel, args);
    let config = LaunchConfig {
        grid: [grid, 1, 1],
        block: [block, 1, 1],
        dynamic_shared_bytes,
    };
    launch(&kernel, memory, config, &params)
}

pub fn rng(seed: u64) -> rand_chacha::ChaCha8Rng {
    use rand::SeedableRng;
    rand_chacha::ChaCha8Rng::seed_from_u64(seed)
}

/// Distance in units in the last place between two f32 (0 when equal, also for two NaNs).
pub fn ulps(a: f32, b: f32) -> u64 {
    if a.is_nan() && b.is_nan() || a == b {
        return 0;
    }
    // Maps the floats onto a line of integers where adjacent floats differ by one.
    let ordered = |x: f32| {
        let b = x.to_bits() as i32;
        if b < 0 {
            i64::from(i32::MIN) - i64::from(b)
        } else {
            i64::from(b)
        }
    };
    (ordered(a) - ordered(b)).unsigned_abs()
}

/// erf by its Taylor series in f64 (accurate to ~1e-12 on [-3, 3], far below f32's resolution); beyond ±6 erf
/// is ±1 in f64.
pub fn erf_reference(x: f64) -> f64 {
    if x.abs() > 6.0 {
        return x.signum();
    }
    if x.abs() > 3.0 {
        // erfc's continued fraction keeps the tail accurate where the series would cancel.
        let t = x.abs();
        let mut f = 0.0;
        for k in (1..60).rev() {
            f = (k as f64 / 2.0) / (t + f);
        }
        let erfc = (-t * t).exp() / std::f64::consts::PI.sqrt() / (t + f);
        return x.signum() * (1.0 - erfc);
    }
    let mut term = x;
    let mut sum = x;
    let mut n = 0.0;
    while term.abs() > 1e-18 * sum.abs().max(1e-300) {
        n += 1.0;
        term *= -x * x / n;
        sum += term / (2.0 * n + 1.0);
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}
