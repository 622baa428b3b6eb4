//! A kernel fuse generates (the layer-norm row kernel of tests/golden/chain.fused.cu: block reductions through
//! warp shuffles and shared memory between barriers, float4-free strided loads, `erff`, `rsqrtf`) run on the
//! interpreter against an f64 host reference — and the same kernel broken on purpose is caught.

mod common;

use common::{compile_ptx, download, erf_reference, rng, upload, workspace_root, Arg};
use gpusim::{launch_with_stats, DeviceMemory, LaunchConfig, Module, SimError};
use rand::Rng;

const KERNEL: &str = "fuse_chain_d271b1ec4316fe52_k0_row";
const LEN: usize = 4096;

fn golden_source() -> String {
    std::fs::read_to_string(workspace_root().join("tests/golden/chain.fused.cu"))
        .expect("chain.fused.cu")
}

struct Inputs {
    x: Vec<f32>,
    scale: Vec<f32>,
    shift: Vec<f32>,
    gamma: Vec<f32>,
    beta: Vec<f32>,
}

fn inputs(rows: usize) -> Inputs {
    let mut r = rng(11);
    let mut v =
        |n: usize, lo: f32, hi: f32| -> Vec<f32> { (0..n).map(|_| r.gen_range(lo..hi)).collect() };
    Inputs {
        x: v(rows * LEN, -2.0, 2.0),
        scale: v(LEN, 0.5, 1.5),
        shift: v(LEN, -0.5, 0.5),
        gamma: v(LEN, 0.5, 2.0),
        beta: v(LEN, -1.0, 1.0),
    }
}

/// `layer_norm(gelu(x * scale + shift) + x)` per row, in f64.
fn reference(inp: &Inputs, rows: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(rows * LEN);
    for row in 0..rows {
        let h: Vec<f64> = (0..LEN)
            .map(|j| {
                let x = f64::from(inp.x[row * LEN + j]);
                let v = x * f64::from(inp.scale[j]) + f64::from(inp.shift[j]);
                0.5 * v * (1.0 + erf_reference(v * std::f64::consts::FRAC_1_SQRT_2)) + x
            })
            .collect();
        let mean = h.iter().sum::<f64>() / LEN as f64;
        let var = h.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / LEN as f64;
        let rstd = 1.0 / (var + 1e-5).sqrt();
        out.extend(
            (0..LEN)
                .map(|j| (h[j] - mean) * rstd * f64::from(inp.gamma[j]) + f64::from(inp.beta[j])),
        );
    }
    out
}

fn run(
    module: &Module,
    rows: usize,
    blocks: u32,
) -> (Result<gpusim::LaunchStats, SimError>, Vec<f32>, Inputs) {
    let inp = inputs(rows);
    let mut memory = DeviceMemory::new();
    let out = memory.alloc(rows * LEN * 4).unwrap();
    let ptrs =
        [&inp.x, &inp.scale, &inp.shift, &inp.gamma, &inp.beta].map(|v| upload(&mut memory, v));
    let result = launch_row(module, &mut memory, rows, blocks, out, ptrs);
    let got = if result.is_ok() {
        download(&memory, out, rows * LEN)
    } else {
        Vec::new()
    };
    (result, got, inp)
}

fn launch_row(
    module: &Module,
    memory: &mut DeviceMemory,
    rows: usize,
    blocks: u32,
    out: u64,
    ptrs: [u64; 5],
) -> Result<gpusim::LaunchStats, SimError> {
    let kernel = module.kernel(KERNEL).expect("row kernel");
    let mut args = vec![Arg::I64(rows as i64), Arg::U64(out)];
    args.extend(ptrs.iter().map(|&p| Arg::U64(p)));
    let params = common::pack(&kernel, &args);
    let config = LaunchConfig {
        grid: [blocks, 1, 1],
        block: [256, 1, 1],
        dynamic_shared_bytes: 0,
    };
    launch_with_stats(&kernel, memory, config, &params)
}

/// The same kernel with bf16 storage (the writer's `FUSE_STORAGE_BF16` variant): loads widen bf16 to f32, the
/// store rounds to nearest even in integer arithmetic.
#[test]
fn the_row_kernel_with_bf16_storage_matches_the_host() {
    let source = golden_source();
    let typedef = "typedef float fuse_t;\nFUSE_DEVICE fuse_t fuse_from_f32(float v) { return v; }";
    assert!(
        source.contains(typedef),
        "the golden file's storage typedef changed"
    );
    let bf16 = "typedef fuse_bf16 fuse_t;\nFUSE_DEVICE fuse_t fuse_from_f32(float v) { return fuse_bf16_from_f32(v); }";
    let source = format!(
        "#define FUSE_STORAGE_BF16 1\n{}",
        source.replace(typedef, bf16)
    );
    let Some(ptx) = compile_ptx(&source, "compute_80", &[]) else {
        return;
    };
    let module = Module::from_ptx(&ptx).unwrap();
    let rows = 2;
    let mut inp = inputs(rows);
    let to_bf16 = |v: &[f32]| -> Vec<u16> {
        v.iter()
            .map(|&x| half::bf16::from_f32(x).to_bits())
            .collect()
    };
    let mut memory = DeviceMemory::new();
    let out = memory.alloc(rows * LEN * 2).unwrap();
    let ptrs = [&inp.x, &inp.scale, &inp.shift, &inp.gamma, &inp.beta]
        .map(|v| upload(&mut memory, &to_bf16(v)));
    launch_row(&module, &mut memory, rows, rows as u32, out, ptrs).unwrap();
    let got: Vec<u16> = download(&memory, out, rows * LEN);
    // The reference sees the inputs as stored (rounded to bf16).
    for v in [
        &mut inp.x,
        &mut inp.scale,
        &mut inp.shift,
        &mut inp.gamma,
        &mut inp.beta,
    ] {
        for x in v.iter_mut() {
            *x = half::bf16::from_f32(*x).to_f32();
        }
    }
    let expected = reference(&inp, rows);
    for (i, (&g, &e)) in got.iter().zip(&expected).enumerate() {
        let g = f64::from(half::bf16::from_bits(g).to_f32());
        // One bf16 rounding of the output (half an ulp: 2^-8 relative), plus f32 compute error.
        assert!(
            (g - e).abs() <= e.abs() * 2f64.powi(-8) + 1e-4,
            "element {i}: {g} against {e}"
        );
    }
}

#[test]
fn the_layer_norm_row_kernel_matches_the_host() {
    let Some(ptx) = compile_ptx(&golden_source(), "compute_90", &[]) else {
        return;
    };
    let module = Module::from_ptx(&ptx).unwrap();
    let rows = 3;
    // One block more than rows: the extra block leaves before any barrier.
    let (result, got, inp) = run(&module, rows, rows as u32 + 1);
    let stats = result.unwrap();
    assert!(stats.instructions > 0);
    let expected = reference(&inp, rows);
    let worst = got
        .iter()
        .zip(&expected)
        .map(|(&g, &e)| (f64::from(g) - e).abs())
        .fold(0.0, f64::max);
    println!(
        "largest difference from the f64 reference {worst:e}, {} instructions",
        stats.instructions
    );
    assert!(worst < 2e-5, "largest difference {worst:e}");
}

#[test]
fn the_row_kernel_without_its_barrier_is_a_race() {
    let source = golden_source();
    // Break the prelude's block reduction: drop the barrier between the lane-0 writes and the reads.
    let reduction =
        "    if (lane == 0) smem[warp] = v;\n    __syncthreads();\n    return fuse_warp_sum(";
    assert!(
        source.contains(reduction),
        "the prelude's block sum changed"
    );
    let broken = source.replace(
        reduction,
        "    if (lane == 0) smem[warp] = v;\n    return fuse_warp_sum(",
    );
    let Some(ptx) = compile_ptx(&broken, "compute_90", &[]) else {
        return;
    };
    let module = Module::from_ptx(&ptx).unwrap();
    let (result, _, _) = run(&module, 2, 2);
    match result {
        Err(SimError::SharedRace { site, .. }) => assert_eq!(site.kernel, KERNEL),
        other => panic!("expected a shared-memory race, got {other:?}"),
    }
}

/// The fallback GEMM of tests/golden/mlp.fused.cu (64×64 tiles through padded shared arrays, two barriers per
/// k step, GELU epilogue) over a partial row tile; only the first two column tiles are launched, to keep the run
/// short.
#[test]
fn the_fallback_gemm_matches_the_host() {
    let source = std::fs::read_to_string(workspace_root().join("tests/golden/mlp.fused.cu"))
        .expect("mlp.fused.cu");
    let Some(ptx) = compile_ptx(&source, "compute_90", &[]) else {
        return;
    };
    let module = Module::from_ptx(&ptx).unwrap();
    let kernel = module
        .kernel("fuse_mlp_3e79ddf33c3b0059_k0_matmul_gemm")
        .unwrap();
    let (m, n, k, tiles_n) = (5usize, 4096usize, 1024usize, 2usize);
    let mut r = rng(12);
    let mut v = |len: usize| -> Vec<f32> { (0..len).map(|_| r.gen_range(-1.0..1.0)).collect() };
    let (a, b_t, bias) = (v(m * k), v(n * k), v(n));
    let mut memory = DeviceMemory::new();
    let out = memory.alloc(m * n * 4).unwrap();
    let (da, db, dbias) = (
        upload(&mut memory, &a),
        upload(&mut memory, &b_t),
        upload(&mut memory, &bias),
    );
    let args = [
        Arg::I64(m as i64),
        Arg::U64(out),
        Arg::U64(da),
        Arg::U64(db),
        Arg::U64(dbias),
    ];
    let params = common::pack(&kernel, &args);
    let config = LaunchConfig {
        grid: [1, tiles_n as u32, 1],
        block: [256, 1, 1],
        dynamic_shared_bytes: 0,
    };
    launch_with_stats(&kernel, &mut memory, config, &params).unwrap();
    let mut worst = 0f64;
    for row in 0..m {
        let got: Vec<f32> = download(&memory, out + (row * n * 4) as u64, tiles_n * 64);
        for (col, &g) in got.iter().enumerate() {
            let dot: f64 = (0..k)
                .map(|i| f64::from(a[row * k + i]) * f64::from(b_t[col * k + i]))
                .sum();
            let x = dot + f64::from(bias[col]);
            let expected = 0.5 * x * (1.0 + erf_reference(x * std::f64::consts::FRAC_1_SQRT_2));
            worst = worst.max((f64::from(g) - expected).abs());
        }
    }
    println!("largest difference from the f64 reference {worst:e}");
    assert!(worst < 1e-4, "largest difference {worst:e}");
}
