//! GPU benchmark: fused kernels against the device's copy bandwidth, fused against eager, the host cost of a CUDA
//! graph replay, MiniLM in f32 and bf16, and W5's decoding with its KV cache on the device. Built here, run on a
//! GPU host by `scripts/device-check.sh --run`; without a GPU it prints why and exits 0.
//!
//! Times are device time per call from back-to-back CUDA graph replays (inputs already on the device), so they
//! compare kernels, not PCIe. GB/s is the plan's modelled bytes moved (each buffer read or written once) per
//! second; the copy row counts bytes read plus written the same way.

use std::time::Instant;

use fuse_examples::models::{
    chain::chain::Chain, encoder::encoder::EncoderLayer, minilm::minilm::MiniLm,
};
use fuse_runtime::device::GpuTiming;
use fuse_runtime::{fused_model, CompiledModel, Device, PlanMode, PlanReport, Precision, Tensor};

#[fused_model]
mod single {
    pub const N: usize = 4096;

    /// One fused elementwise kernel.
    pub struct Gelu {}
    impl Gelu {
        pub fn forward(&self, #[shape(rows, N)] x: Tensor) -> Tensor {
            (x * 1.5 + 0.5).gelu()
        }
    }

    /// One row kernel.
    pub struct Softmax {}
    impl Softmax {
        pub fn forward(&self, #[shape(rows, N)] x: Tensor) -> Tensor {
            x.softmax(-1)
        }
    }
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// 16384 rows of `single::N` = 4096 f32: 256 MiB per tensor.
const BIG_ROWS: usize = 16_384;
const RUNS: usize = 20;

fn header() {
    println!(
        "{:<34} {:<11} {:>10} {:>9} {:>12}",
        "what", "plan", "ms/call", "GB/s", "first call ms"
    );
}

fn row(what: &str, plan: &str, t: &GpuTiming, bytes: usize) {
    println!(
        "{:<34} {:<11} {:>10.3} {:>9.0} {:>12.1}",
        what,
        plan,
        t.device_ms,
        bytes as f64 / (t.device_ms * 1e-3) / 1e9,
        t.first_call_ms
    );
}

/// Moves `model` to the GPU, times `mode`, prints a row.
fn bench(
    what: &str,
    model: &CompiledModel,
    report: PlanReport,
    mode: PlanMode,
    precision: Precision,
    device: &Device,
    inputs: &[&Tensor],
) -> Res<GpuTiming> {
    model.to_device_with(device.clone(), precision)?;
    let t = model.gpu_timing(mode, inputs, RUNS)?;
    let plan = match (mode, precision) {
        (PlanMode::Fused, Precision::F32) => "fused",
        (PlanMode::Eager, Precision::F32) => "eager",
        (PlanMode::Fused, Precision::Bf16) => "fused bf16",
        (PlanMode::Eager, Precision::Bf16) => "eager bf16",
        (PlanMode::Fused, Precision::F16) => "fused f16",
        (PlanMode::Eager, Precision::F16) => "eager f16",
    };
    // The report models f32 storage; bf16 and f16 move half the bytes.
    let bytes = match precision {
        Precision::F32 => report.bytes_moved(),
        Precision::Bf16 | Precision::F16 => report.bytes_moved() / 2,
    };
    row(what, plan, &t, bytes);
    Ok(t)
}

fn minilm_inputs(batch: usize, seq: usize) -> Res<[Tensor; 3]> {
    let shape = [batch, seq];
    Ok([
        Tensor::uniform_ids(&shape, 30522, 1),
        Tensor::uniform_ids(&shape, 2, 2),
        Tensor::from_f32(&shape, vec![1.0; batch * seq])?,
    ])
}

fn minilm(seed: u64) -> MiniLm {
    let path = fuse_examples::minilm_run::checkpoint_dir().join("model.safetensors");
    MiniLm::load(&path).unwrap_or_else(|_| MiniLm::random(seed))
}

/// W5 (SmolLM-135M's shape, seeded weights) decoding on the GPU with its KV cache in the session on the device: the
/// prefill of 128 tokens per sequence, then 32 steps of one token each, wall time per call (inputs up, logits down,
/// and, since every step is a new `past` and so a new shape, the shape's arena and launch list made, its launches
/// captured and the graph the steps share updated to them, on the way).
fn w5_decode(device: &Device, precision: Precision) -> Res<()> {
    use fuse_examples::models::llama::{smollm, CachedDecoder};
    let model = smollm::SmolLmCached::random(1).into_compiled();
    model.to_device_with(device.clone(), precision)?;
    for batch in [1, 8] {
        let mut decoder = CachedDecoder::new(&model, PlanMode::Fused, batch, smollm::VOCAB)?;
        let mut sequences: Vec<Vec<i64>> = (0..batch)
            .map(|b| {
                (0..128)
                    .map(|i| ((i * 7919 + b * 31) % smollm::VOCAB) as i64)
                    .collect()
            })
            .collect();
        let running: Vec<usize> = (0..batch).collect();
        let before = model.gpu_shapes(PlanMode::Fused)?;
        let mut times = Vec::new();
        for _ in 0..33 {
            let views: Vec<&[i64]> = sequences.iter().map(Vec::as_slice).collect();
            let start = Instant::now();
            decoder.next_logits(&running, &views)?;
            times.push(start.elapsed().as_secs_f64() * 1e3);
            sequences.iter_mut().for_each(|s| s.push(17));
        }
        let after = model.gpu_shapes(PlanMode::Fused)?;
        let mut steps = times[1..].to_vec();
        steps.sort_by(f64::total_cmp);
        println!(
            "W5 decode {precision:?} batch {batch}: prefill {:.1} ms, step median {:.2} ms (min {:.2}, max {:.2}) over \
             32 steps; {} steps replayed the shared graph ({} instantiated it again)",
            times[0],
            steps[steps.len() / 2],
            steps[0],
            steps[steps.len() - 1],
            after.family_calls - before.family_calls,
            after.family_reinstantiations - before.family_reinstantiations,
        );
    }
    Ok(())
}

fn main() -> Res<()> {
    let device = match Device::cuda(0) {
        Ok(device) => device,
        Err(e) => {
            println!("skipped: {e}");
            return Ok(());
        }
    };
    let Device::Cuda(cuda) = &device else {
        return Ok(());
    };
    println!("{device}");
    let copy_bytes = 256 << 20;
    let copy = cuda.copy_bandwidth(copy_bytes, RUNS)?;
    header();
    println!(
        "{:<34} {:<11} {:>10.3} {:>9.0}",
        "device-to-device copy 256 MiB",
        "-",
        2.0 * copy_bytes as f64 / copy / 1e6,
        copy
    );

    let x = Tensor::randn(&[BIG_ROWS, single::N], 1);
    let at = [BIG_ROWS];
    let gelu = single::Gelu::random(0);
    let what = "gelu(1.5x+0.5) 16384x4096";
    bench(
        what,
        gelu.compiled(),
        gelu.plan().at(&at),
        PlanMode::Fused,
        Precision::F32,
        &device,
        &[&x],
    )?;
    let softmax = single::Softmax::random(0);
    let what = "softmax 16384x4096";
    let report = softmax.plan().at(&at);
    bench(
        what,
        softmax.compiled(),
        report,
        PlanMode::Fused,
        Precision::F32,
        &device,
        &[&x],
    )?;
    let chain = Chain::random(0);
    for (mode, report) in [
        (PlanMode::Fused, chain.plan()),
        (PlanMode::Eager, chain.eager_plan()),
    ] {
        let what = "W1 chain 16384x4096";
        bench(
            what,
            chain.compiled(),
            report.at(&at),
            mode,
            Precision::F32,
            &device,
            &[&x],
        )?;
    }
    drop(x);

    let encoder = EncoderLayer::random(0);
    let (ex, mask) = (
        Tensor::randn(&[8, 128, 384], 2),
        Tensor::from_f32(&[8, 128], vec![1.0; 1024])?,
    );
    for (mode, report) in [
        (PlanMode::Fused, encoder.plan()),
        (PlanMode::Eager, encoder.eager_plan()),
    ] {
        let what = "W3 encoder layer 8x128";
        bench(
            what,
            encoder.compiled(),
            report.at(&[8, 128]),
            mode,
            Precision::F32,
            &device,
            &[&ex, &mask],
        )?;
    }
    println!(
        "encoder placement:\n  {}",
        encoder.compiled().device_report().replace('\n', "\n  ")
    );

    // Host cost per call at a tiny shape, where it dominates.
    let (sx, smask) = (
        Tensor::randn(&[1, 8, 384], 3),
        Tensor::from_f32(&[1, 8], vec![1.0; 8])?,
    );
    let t = encoder
        .compiled()
        .gpu_timing(PlanMode::Fused, &[&sx, &smask], 200)?;
    let start = Instant::now();
    for _ in 0..200 {
        encoder.forward(&sx, &smask)?;
    }
    let forward_us = start.elapsed().as_secs_f64() * 1e6 / 200.0;
    println!(
        "graph replay, encoder 1x8: {:.1} us host per replay, {:.1} us device per replay, {:.1} us per forward() \
         (upload + replay + download)",
        t.host_us,
        t.device_ms * 1e3,
        forward_us
    );

    let inputs = minilm_inputs(32, 128)?;
    let refs: Vec<&Tensor> = inputs.iter().collect();
    for precision in [Precision::F32, Precision::Bf16, Precision::F16] {
        let m = minilm(0);
        let report = m.plan().at(&[32, 128]);
        bench(
            "MiniLM-L6 32x128",
            m.compiled(),
            report,
            PlanMode::Fused,
            precision,
            &device,
            &refs,
        )?;
        if precision == Precision::Bf16 {
            println!(
                "MiniLM bf16 placement:\n  {}",
                m.compiled().device_report().replace('\n', "\n  ")
            );
        }
    }
    for precision in [Precision::F32, Precision::Bf16] {
        w5_decode(&device, precision)?;
    }
    Ok(())
}
