//! The launch checks catch broken kernels (tests/cuda/checks.cu), each with the right error and a site that
//! names the kernel — and the correct variant of the same kernel passes.

mod common;

use common::{compile_ptx, download, run, upload, Arg};
use gpusim::{DeviceMemory, Module, SimError};

const SOURCE: &str = include_str!("cuda/checks.cu");

fn module(defines: &[&str]) -> Option<Module> {
    compile_ptx(SOURCE, "compute_90", defines)
        .map(|ptx| Module::from_ptx(&ptx).expect("decode PTX"))
}

fn ones(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32 + 1.0).collect()
}

#[test]
fn an_out_of_bounds_write_is_caught() {
    let Some(module) = module(&[]) else { return };
    let mut memory = DeviceMemory::new();
    let n = 100;
    let out = memory.alloc(n * 4).unwrap();
    let err = run(
        &module,
        "out_of_bounds_write",
        &mut memory,
        1,
        128,
        0,
        &[Arg::U64(out), Arg::I32(n as i32)],
    )
    .unwrap_err();
    match err {
        SimError::OutOfBounds {
            access,
            address,
            site,
            ..
        } => {
            assert_eq!(access, "global write");
            assert_eq!(address, out + 4 * n as u64);
            assert_eq!(site.kernel, "out_of_bounds_write");
            assert_eq!(site.thread, [100, 0, 0]);
            assert!(site.ptx_line > 0);
        }
        other => panic!("expected OutOfBounds, got {other}"),
    }
}

#[test]
fn a_missing_syncthreads_is_a_shared_memory_race() {
    let Some(module) = module(&[]) else { return };
    let mut memory = DeviceMemory::new();
    let x = upload(&mut memory, &ones(64));
    let out = memory.alloc(64 * 4).unwrap();
    let err = run(
        &module,
        "missing_syncthreads",
        &mut memory,
        1,
        64,
        0,
        &[Arg::U64(x), Arg::U64(out)],
    )
    .unwrap_err();
    match &err {
        SimError::SharedRace { site, detail, .. } => {
            assert_eq!(site.kernel, "missing_syncthreads");
            assert!(detail.contains("since the last barrier"), "{err}");
        }
        other => panic!("expected SharedRace, got {other}"),
    }
}

#[test]
fn the_same_kernel_with_its_barrier_passes() {
    let Some(module) = module(&["WITH_BARRIER"]) else {
        return;
    };
    let mut memory = DeviceMemory::new();
    let input = ones(64);
    let x = upload(&mut memory, &input);
    let out = memory.alloc(64 * 4).unwrap();
    run(
        &module,
        "missing_syncthreads",
        &mut memory,
        1,
        64,
        0,
        &[Arg::U64(x), Arg::U64(out)],
    )
    .unwrap();
    let got: Vec<f32> = download(&memory, out, 64);
    let expected: Vec<f32> = (0..64).map(|t| input[63 - t]).collect();
    assert_eq!(got, expected);
}

#[test]
fn a_divergent_barrier_is_reported_not_a_hang() {
    let Some(module) = module(&[]) else { return };
    let mut memory = DeviceMemory::new();
    let x = upload(&mut memory, &ones(32));
    let out = memory.alloc(32 * 4).unwrap();
    let err = run(
        &module,
        "divergent_barrier",
        &mut memory,
        1,
        32,
        0,
        &[Arg::U64(x), Arg::U64(out)],
    )
    .unwrap_err();
    match &err {
        SimError::Divergence { site, detail } => {
            assert_eq!(site.kernel, "divergent_barrier");
            assert!(site.thread[0] < 16, "{err}");
            assert!(detail.contains("exited"), "{err}");
        }
        other => panic!("expected Divergence, got {other}"),
    }
}

#[test]
fn a_shuffle_half_the_warp_skips_is_reported() {
    let Some(module) = module(&[]) else { return };
    let mut memory = DeviceMemory::new();
    let x = upload(&mut memory, &ones(32));
    let out = memory.alloc(32 * 4).unwrap();
    let err = run(
        &module,
        "divergent_shuffle",
        &mut memory,
        1,
        32,
        0,
        &[Arg::U64(x), Arg::U64(out)],
    )
    .unwrap_err();
    assert!(
        matches!(&err, SimError::Divergence { site, .. } if site.kernel == "divergent_shuffle"),
        "{err}"
    );
}

#[test]
fn a_read_of_never_written_memory_is_caught() {
    let Some(module) = module(&[]) else { return };
    let mut memory = DeviceMemory::new();
    let n = 64;
    let x = memory.alloc(n * 4).unwrap();
    let out = memory.alloc(n * 4).unwrap();
    let args = [Arg::U64(x), Arg::U64(out), Arg::I32(n as i32)];
    let err = run(&module, "reads_input", &mut memory, 1, 64, 0, &args).unwrap_err();
    match err {
        SimError::UninitializedRead { address, site } => {
            assert_eq!(address, x);
            assert_eq!(site.kernel, "reads_input");
        }
        other => panic!("expected UninitializedRead, got {other}"),
    }
    // Once written, the same launch passes.
    memory.write(x, common::as_bytes(&ones(n))).unwrap();
    run(&module, "reads_input", &mut memory, 1, 64, 0, &args).unwrap();
}
