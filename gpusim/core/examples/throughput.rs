//! Interpreter throughput: simulated instructions per second on the `spin` kernel of the test fixture (an f32
//! loop), or, given the PTX of tests/golden/chain.fused.cu, on fuse's layer-norm row kernel, or given that of
//! tests/golden/mlp.fused.cu, on its fallback GEMM: `cargo run --release -p gpusim --example throughput [x.ptx]`.

use gpusim::{launch_with_stats, DeviceMemory, LaunchConfig, Module, SimError};
use std::time::Instant;

const FIXTURE: &str = include_str!("../tests/fixtures/handwritten.ptx");

fn report(name: &str, instructions: u64, seconds: f64) {
    println!(
        "{name}: {instructions} instructions in {seconds:.3} s: {:.1} M instructions/s",
        instructions as f64 / seconds / 1e6
    );
}

fn spin() -> Result<(), SimError> {
    let module = Module::from_ptx(FIXTURE)?;
    let kernel = module.kernel("spin")?;
    let mut memory = DeviceMemory::new();
    let threads = 256u32;
    let out = memory.alloc(threads as usize * 4)?;
    let mut params = out.to_le_bytes().to_vec();
    params.extend_from_slice(&20_000u32.to_le_bytes());
    let config = LaunchConfig {
        grid: [8, 1, 1],
        block: [threads, 1, 1],
        dynamic_shared_bytes: 0,
    };
    let start = Instant::now();
    let stats = launch_with_stats(&kernel, &mut memory, config, &params)?;
    report(
        "spin loop",
        stats.instructions,
        start.elapsed().as_secs_f64(),
    );
    Ok(())
}

/// A fuse row kernel `(long long rows, out, in0..in4)` over rows of 4096 (tests/golden/chain.fused.cu's k0_row).
fn row_kernel(path: &str) -> Result<(), SimError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| SimError::Other(format!("{path}: {e}")))?;
    let module = Module::from_ptx(&text)?;
    let kernel = module
        .kernels
        .iter()
        .find(|k| k.name.ends_with("_row"))
        .cloned()
        .ok_or_else(|| SimError::NoSuchKernel("*_row".into()))?;
    let (rows, len) = (64usize, 4096usize);
    let mut memory = DeviceMemory::new();
    let out = memory.alloc(rows * len * 4)?;
    let mut params = (rows as i64).to_le_bytes().to_vec();
    params.extend_from_slice(&out.to_le_bytes());
    for n in [rows * len, len, len, len, len] {
        let data: Vec<u8> = (0..n)
            .flat_map(|i| ((i % 97) as f32 * 0.01).to_le_bytes())
            .collect();
        let buffer = memory.alloc(data.len())?;
        memory
            .write(buffer, &data)
            .map_err(|f| SimError::Memory(format!("{f:?}")))?;
        params.extend_from_slice(&buffer.to_le_bytes());
    }
    let config = LaunchConfig {
        grid: [rows as u32, 1, 1],
        block: [256, 1, 1],
        dynamic_shared_bytes: 0,
    };
    let start = Instant::now();
    let stats = launch_with_stats(&kernel, &mut memory, config, &params)?;
    report(
        &format!("{} ({rows} rows of {len})", kernel.name),
        stats.instructions,
        start.elapsed().as_secs_f64(),
    );
    Ok(())
}

/// fuse's fallback GEMM `(long long m, out, a, b, bias)` of tests/golden/mlp.fused.cu's k0 (k = 1024, n = 4096),
/// for 4 rows and the first 16 column tiles.
fn gemm_kernel(path: &str) -> Result<(), SimError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| SimError::Other(format!("{path}: {e}")))?;
    let module = Module::from_ptx(&text)?;
    let kernel = module
        .kernels
        .iter()
        .find(|k| k.name.ends_with("_k0_matmul_gemm"))
        .cloned()
        .ok_or_else(|| SimError::NoSuchKernel("*_k0_matmul_gemm".into()))?;
    let (m, n, k) = (4usize, 4096usize, 1024usize);
    let mut memory = DeviceMemory::new();
    let out = memory.alloc(m * n * 4)?;
    let mut params = (m as i64).to_le_bytes().to_vec();
    params.extend_from_slice(&out.to_le_bytes());
    for len in [m * k, n * k, n] {
        let data: Vec<u8> = (0..len)
            .flat_map(|i| ((i % 89) as f32 * 0.01).to_le_bytes())
            .collect();
        let buffer = memory.alloc(data.len())?;
        memory
            .write(buffer, &data)
            .map_err(|f| SimError::Memory(format!("{f:?}")))?;
        params.extend_from_slice(&buffer.to_le_bytes());
    }
    let config = LaunchConfig {
        grid: [1, 16, 1],
        block: [256, 1, 1],
        dynamic_shared_bytes: 0,
    };
    let start = Instant::now();
    let stats = launch_with_stats(&kernel, &mut memory, config, &params)?;
    report(
        &format!("{} ({m}×{k} · {k}×1024)", kernel.name),
        stats.instructions,
        start.elapsed().as_secs_f64(),
    );
    Ok(())
}

fn main() -> Result<(), SimError> {
    match std::env::args().nth(1) {
        Some(path) if path.contains("mlp") => gemm_kernel(&path),
        Some(path) => row_kernel(&path),
        None => spin(),
    }
}
