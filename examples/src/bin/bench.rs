//! Benchmarks W1–W3 (W4, MiniLM, is `--bin minilm -- --bench`): fused vs eager plan in one run, plus the first
//! call in a fresh process. `cargo run --release -p fuse-examples --bin bench [w1 w2 w3]`.

use std::process::Command;
use std::time::Instant;

use fuse_examples::models::{chain::chain::Chain, encoder::encoder::EncoderLayer, mlp::mlp::Mlp};
use fuse_examples::timing::median_ms;
use fuse_runtime::{PlanMode, Result, Tensor};

const RUNS: usize = 20;
const FIRST_CALL_PROCESSES: usize = 7;

/// A workload: its model and inputs, built fresh (for the first-call measurement too).
fn workload(name: &str) -> Option<(fuse_runtime::CompiledModel, Vec<Tensor>, &'static str)> {
    let (batch, seq) = (8, 128);
    match name {
        "w1" => Some((
            Chain::random(1).into_compiled(),
            vec![Tensor::randn(&[4096, 4096], 2)],
            "W1 LN(gelu(x*a+b)+x) 4096x4096",
        )),
        "w2" => Some((
            Mlp::random(1).into_compiled(),
            vec![Tensor::randn(&[64, 1024], 2)],
            "W2 MLP 1024-4096-4096-1024 b64",
        )),
        "w3" => Some((
            EncoderLayer::random(1).into_compiled(),
            vec![
                Tensor::randn(&[batch, seq, 384], 2),
                Tensor::from_f32(&[batch, seq], vec![1.0; batch * seq]).ok()?,
            ],
            "W3 encoder layer h384 b8 s128",
        )),
        _ => None,
    }
}

fn first_call(name: &str) -> Result<()> {
    let Some((model, inputs, _)) = workload(name) else {
        return Ok(());
    };
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let start = Instant::now();
    model.run(PlanMode::Fused, &refs)?;
    println!("{:.3}", start.elapsed().as_secs_f64() * 1e3);
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--first-call") {
        return first_call(args.get(1).map_or("", String::as_str));
    }
    let profile = args.iter().any(|a| a == "--profile");
    let args: Vec<String> = args.into_iter().filter(|a| a != "--profile").collect();
    let names: Vec<String> = if args.is_empty() {
        vec!["w1".into(), "w2".into(), "w3".into()]
    } else {
        args
    };
    println!("threads: {}", rayon_threads());
    println!(
        "ms, median of {RUNS}; 'new out' allocates the output per call, 'reuse' writes into one"
    );
    println!(
        "{:<40} {:>9} {:>9} {:>7} {:>9} {:>9} {:>7} {:>9}",
        "workload", "eager", "fused", "ratio", "eager", "fused", "ratio", "1st call"
    );
    println!(
        "{:<40} {:>9} {:>9} {:>7} {:>9} {:>9} {:>7} {:>9}",
        "", "new out", "new out", "", "reuse", "reuse", "", "median of 7"
    );
    for name in &names {
        let Some((model, inputs, label)) = workload(name) else {
            eprintln!("unknown workload {name}");
            continue;
        };
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let eager = median_ms(RUNS, || model.run(PlanMode::Eager, &refs).map(drop))?;
        let fused = median_ms(RUNS, || model.run(PlanMode::Fused, &refs).map(drop))?;
        let mut outputs = Vec::new();
        let eager_reuse = median_ms(RUNS, || {
            model.run_into(PlanMode::Eager, &refs, &mut outputs)
        })?;
        let fused_reuse = median_ms(RUNS, || {
            model.run_into(PlanMode::Fused, &refs, &mut outputs)
        })?;
        let first = fresh_process_first_call(name).unwrap_or(f64::NAN);
        println!(
            "{label:<40} {eager:>9.2} {fused:>9.2} {:>6.2}x {eager_reuse:>9.2} {fused_reuse:>9.2} {:>6.2}x {first:>9.2}",
            eager / fused,
            eager_reuse / fused_reuse
        );
        if profile {
            for mode in [PlanMode::Fused, PlanMode::Eager] {
                for (kernel, ms) in model.profile(mode, &refs, RUNS)? {
                    println!("    {mode:?} {kernel:<24} {ms:8.3} ms");
                }
            }
        }
    }
    Ok(())
}

/// Median first-call time over a few fresh processes: one process is one sample, and the first call of a process
/// varies with what the OS has to map for it.
fn fresh_process_first_call(name: &str) -> Option<f64> {
    let exe = std::env::current_exe().ok()?;
    let mut samples = Vec::new();
    for _ in 0..FIRST_CALL_PROCESSES {
        let out = Command::new(&exe)
            .args(["--first-call", name])
            .output()
            .ok()?;
        samples.push(
            String::from_utf8(out.stdout)
                .ok()?
                .trim()
                .parse::<f64>()
                .ok()?,
        );
    }
    samples.sort_by(f64::total_cmp);
    Some(samples[samples.len() / 2])
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
