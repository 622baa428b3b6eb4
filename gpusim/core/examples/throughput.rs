//! Interpreter throughput: runs the `spin` kernel of the test fixture (an f32 loop) and prints simulated
//! instructions per second. `cargo run --release -p gpusim --example throughput`.

use gpusim::{launch_with_stats, DeviceMemory, LaunchConfig, Module};
use std::time::Instant;

const FIXTURE: &str = include_str!("../tests/fixtures/handwritten.ptx");

fn main() -> Result<(), gpusim::SimError> {
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
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "{} instructions in {seconds:.3} s: {:.1} M instructions/s",
        stats.instructions,
        stats.instructions as f64 / seconds / 1e6
    );
    Ok(())
}
