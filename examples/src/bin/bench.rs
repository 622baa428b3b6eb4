//! Benchmarks W1–W3 (W4, MiniLM, is `--bin minilm -- --bench`): fused vs eager plan in one run, plus the first
//! call in a fresh process. `cargo run --release -p fuse-examples --bin bench [w1 w2 w3] [--json] [--profile]`.
//! `--json` prints one JSON object per workload and plan mode instead of the table; `--precision int8` runs the
//! GEMMs whose B is a weight in int8 (`CompiledModel::with_cpu_precision`). `--steady` leaves out the fresh
//! processes (their columns read NaN, their JSON fields null): the steady state alone, which takes seconds rather
//! than minutes, for comparing two builds round after round.

use std::process::Command;
use std::time::Instant;

use fuse_examples::models::{chain::chain::Chain, encoder::encoder::EncoderLayer, mlp::mlp::Mlp};
use fuse_examples::timing::{cpu_line, json_line, median_ms, precision_arg, sample_ms, threads};
use fuse_runtime::{CompiledModel, CpuPrecision, PlanMode, Result, Tensor};
use serde_json::json;

const RUNS: usize = 20;
const FIRST_CALL_PROCESSES: usize = 15;
/// Calls after the first that give a fresh process's own steady state.
const STEADY_CALLS: usize = 10;

/// A workload: its model, inputs and their dynamic dimension sizes, built fresh (for the first-call
/// measurement too).
struct Workload {
    model: CompiledModel,
    inputs: Vec<Tensor>,
    sizes: Vec<(&'static str, usize)>,
    id: &'static str,
    label: &'static str,
}

fn workload(name: &str, precision: CpuPrecision) -> Option<Workload> {
    let mut w = workload_f32(name)?;
    w.model = w.model.with_cpu_precision(precision).ok()?;
    Some(w)
}

fn workload_f32(name: &str) -> Option<Workload> {
    let (batch, seq) = (8, 128);
    match name {
        "w1" => Some(Workload {
            model: Chain::random(1).into_compiled(),
            inputs: vec![Tensor::randn(&[4096, 4096], 2)],
            sizes: vec![("rows", 4096)],
            id: "W1",
            label: "W1 LN(gelu(x*a+b)+x) 4096x4096",
        }),
        "w2" => Some(Workload {
            model: Mlp::random(1).into_compiled(),
            inputs: vec![Tensor::randn(&[64, 1024], 2)],
            sizes: vec![("batch", 64)],
            id: "W2",
            label: "W2 MLP 1024-4096-4096-1024 b64",
        }),
        "w3" => Some(Workload {
            model: EncoderLayer::random(1).into_compiled(),
            inputs: vec![
                Tensor::randn(&[batch, seq, 384], 2),
                Tensor::from_f32(&[batch, seq], vec![1.0; batch * seq]).ok()?,
            ],
            sizes: vec![("batch", batch), ("seq", seq)],
            id: "W3",
            label: "W3 encoder layer h384 b8 s128",
        }),
        _ => None,
    }
}

/// How a fresh process prepares for its first call.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FirstCall {
    /// Loads the model, then calls it.
    Cold,
    /// Also allocates the arena for the call's sizes first, as a server that knows its largest batch would at
    /// load.
    Reserved,
    /// Also keeps every worker thread spinning for [`AWAKE_MS`] just before the call, so that no CPU is waking
    /// from idle when it comes: what is left of the first call's cost is then fuse's own.
    Awake,
}

/// How long the worker threads spin before an [`FirstCall::Awake`] first call.
const AWAKE_MS: u128 = 50;

/// Bytes each thread writes to push the model's weights and buffers out of its caches before a cold-cache call:
/// more than a core's share of L2 and L3 on every processor measured (at most 2 MiB and 4 MiB).
const EVICT_BYTES: usize = 64 << 20;

impl FirstCall {
    fn flag(self) -> &'static str {
        match self {
            FirstCall::Cold => "--first-call",
            FirstCall::Reserved => "--first-call-reserved",
            FirstCall::Awake => "--first-call-awake",
        }
    }

    fn from_flag(flag: &str) -> Option<FirstCall> {
        [FirstCall::Cold, FirstCall::Reserved, FirstCall::Awake]
            .into_iter()
            .find(|f| f.flag() == flag)
    }
}

/// Prints the first call's time and the median of the next [`STEADY_CALLS`] in this process: comparing the two
/// within one process keeps the machine's process-to-process variance out of the ratio.
fn first_call(name: &str, how: FirstCall, precision: CpuPrecision) -> Result<()> {
    let Some(Workload {
        model,
        inputs,
        sizes,
        ..
    }) = workload(name, precision)
    else {
        return Ok(());
    };
    if how != FirstCall::Cold {
        model.reserve(&sizes)?;
    }
    let refs: Vec<&Tensor> = inputs.iter().collect();
    if how == FirstCall::Awake {
        wake_workers();
    }
    let start = Instant::now();
    model.run(PlanMode::Fused, &refs)?;
    let first = start.elapsed().as_secs_f64() * 1e3;
    let steady = median_ms(STEADY_CALLS, || model.run(PlanMode::Fused, &refs).map(drop))?;
    if how != FirstCall::Awake {
        println!("{first:.3} {steady:.3}");
        return Ok(());
    }
    // The steady state with nothing of the model in cache, each call prepared as the first was: what the first
    // call would cost if fuse had no work of its own left for it.
    let mut cold = Vec::with_capacity(STEADY_CALLS);
    for _ in 0..STEADY_CALLS {
        rayon::broadcast(|_| evict_caches());
        evict_caches();
        wake_workers();
        let start = Instant::now();
        model.run(PlanMode::Fused, &refs)?;
        cold.push(start.elapsed().as_secs_f64() * 1e3);
    }
    println!("{first:.3} {steady:.3} {:.3}", median(&mut cold));
    Ok(())
}

/// Keeps every worker thread spinning for [`AWAKE_MS`], so that no CPU is waking from idle when a call comes.
fn wake_workers() {
    rayon::broadcast(|_| {
        let spin = Instant::now();
        while spin.elapsed().as_millis() < AWAKE_MS {
            std::hint::spin_loop();
        }
    });
}

/// Writes [`EVICT_BYTES`] on this thread, a line at a time, which evicts what its caches held.
fn evict_caches() {
    let mut junk = vec![0u8; EVICT_BYTES];
    for (i, line) in junk.chunks_mut(64).enumerate() {
        line[0] = i as u8;
    }
    std::hint::black_box(&junk);
}

fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let precision = match precision_arg(&mut args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(2);
        }
    };
    if let Some(how) = args.first().and_then(|a| FirstCall::from_flag(a)) {
        return first_call(args.get(1).map_or("", String::as_str), how, precision);
    }
    let profile = args.iter().any(|a| a == "--profile");
    let as_json = args.iter().any(|a| a == "--json");
    let steady_only = args.iter().any(|a| a == "--steady");
    let args: Vec<String> = args
        .into_iter()
        .filter(|a| !["--profile", "--json", "--steady"].contains(&a.as_str()))
        .collect();
    let names: Vec<String> = if args.is_empty() {
        vec!["w1".into(), "w2".into(), "w3".into()]
    } else {
        args
    };
    let cpu = cpu_line();
    if !as_json {
        print_header(&cpu);
    }
    for name in &names {
        let Some(Workload {
            model,
            inputs,
            id,
            label,
            ..
        }) = workload(name, precision)
        else {
            eprintln!("unknown workload {name}");
            continue;
        };
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let eager = sample_ms(RUNS, || model.run(PlanMode::Eager, &refs).map(drop))?;
        let fused = sample_ms(RUNS, || model.run(PlanMode::Fused, &refs).map(drop))?;
        let mut outputs = Vec::new();
        let eager_reuse = median_ms(RUNS, || {
            model.run_into(PlanMode::Eager, &refs, &mut outputs)
        })?;
        let fused_reuse = median_ms(RUNS, || {
            model.run_into(PlanMode::Fused, &refs, &mut outputs)
        })?;
        let fresh = |how: FirstCall, threads| {
            let measured = (!steady_only)
                .then(|| fresh_process_first_call(name, how, threads, precision))
                .flatten();
            measured.unwrap_or(FirstCalls {
                ms: f64::NAN,
                over_steady: f64::NAN,
                over_cold_steady: f64::NAN,
            })
        };
        let cold = fresh(FirstCall::Cold, None);
        let (first, first_ratio) = (cold.ms, cold.over_steady);
        let reserved = fresh(FirstCall::Reserved, None).over_steady;
        let reserved_one_thread = fresh(FirstCall::Reserved, Some(1)).over_steady;
        let awake = fresh(FirstCall::Awake, None);
        let (awake, awake_cold) = (awake.over_steady, awake.over_cold_steady);
        if as_json {
            for (mode, sample, reuse) in
                [("fused", fused, fused_reuse), ("eager", eager, eager_reuse)]
            {
                let mut line = json_line(id, mode, sample, RUNS);
                line["precision"] = json!(precision.to_string());
                line["reused_output_median_ms"] = json!(reuse);
                if mode == "fused" {
                    // Fresh processes run the fused plan: the first-call figures belong to it. NaN (a failed
                    // child process) becomes null.
                    line["first_call_ms"] = json!(finite(first));
                    line["first_call_over_steady"] = json!(finite(first_ratio));
                    line["first_call_over_steady_reserved"] = json!(finite(reserved));
                    line["first_call_over_steady_reserved_one_thread"] =
                        json!(finite(reserved_one_thread));
                    line["first_call_over_steady_reserved_awake"] = json!(finite(awake));
                    line["first_call_over_cold_steady_reserved_awake"] = json!(finite(awake_cold));
                }
                println!("{line}");
            }
        } else {
            let (eager, fused) = (eager.median, fused.median);
            let label = format!("{label} {precision}");
            println!(
                "{label:<40} {eager:>9.2} {fused:>9.2} {:>6.2}x {eager_reuse:>9.2} {fused_reuse:>9.2} {:>6.2}x {first:>9.2} {first_ratio:>9.2}x {reserved:>9.2}x {reserved_one_thread:>9.2}x {awake:>9.2}x {awake_cold:>9.2}x",
                eager / fused,
                eager_reuse / fused_reuse
            );
        }
        if profile {
            // After the fresh processes above, whichever plan was profiled first measured up to 2× slower than
            // the same kernels profiled later (W2 int8's middle product: 1.64 ms fused-first against 1.00–1.06
            // after this round); a round of both plans first, not printed, evens that out.
            for mode in [PlanMode::Fused, PlanMode::Eager] {
                model.profile(mode, &refs, RUNS)?;
            }
            for mode in [PlanMode::Fused, PlanMode::Eager] {
                for (kernel, ms) in model.profile(mode, &refs, RUNS)? {
                    println!("    {mode:?} {kernel:<24} {ms:8.3} ms");
                }
            }
        }
    }
    Ok(())
}

fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

fn print_header(cpu: &str) {
    println!("cpu: {cpu}");
    println!("threads: {}", threads());
    println!(
        "ms, median of {RUNS}; 'new out' allocates the output per call, 'reuse' writes into one"
    );
    println!(
        "{:<40} {:>9} {:>9} {:>7} {:>9} {:>9} {:>7} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "workload",
        "eager",
        "fused",
        "ratio",
        "eager",
        "fused",
        "ratio",
        "1st call",
        "1st/steady",
        "reserved",
        "1 thread",
        "awake",
        "awake/cold"
    );
    println!("'awake/cold': the awake first call over the same process's calls made after emptying its caches");
    println!(
        "{:<40} {:>9} {:>9} {:>7} {:>9} {:>9} {:>7}   (medians over {FIRST_CALL_PROCESSES} fresh processes)",
        "", "new out", "new out", "", "reuse", "reuse", ""
    );
}

/// What fresh processes' first calls measured, each a median over [`FIRST_CALL_PROCESSES`] processes.
struct FirstCalls {
    ms: f64,
    over_steady: f64,
    /// Over the process's steady state with its caches emptied before each call ([`FirstCall::Awake`] only).
    over_cold_steady: f64,
}

/// Over a few fresh processes, the median first-call time and the medians of each process's first call over its
/// own steady states: one process is one sample, and the first call of a process varies with what the OS has to
/// map for it. `threads` sets the processes' worker count: with one, no idle CPU has to wake up for the first
/// call ([`FirstCall::Awake`] keeps them all awake instead).
fn fresh_process_first_call(
    name: &str,
    how: FirstCall,
    threads: Option<usize>,
    precision: CpuPrecision,
) -> Option<FirstCalls> {
    let exe = std::env::current_exe().ok()?;
    let (mut firsts, mut ratios, mut cold_ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..FIRST_CALL_PROCESSES {
        let mut command = Command::new(&exe);
        command.args([how.flag(), name, "--precision", &precision.to_string()]);
        if let Some(threads) = threads {
            command.env("RAYON_NUM_THREADS", threads.to_string());
        }
        let out = command.output().ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        let mut fields = text.split_whitespace().map(str::parse::<f64>);
        let (first, steady) = (fields.next()?.ok()?, fields.next()?.ok()?);
        let cold = fields.next().and_then(|f| f.ok()).unwrap_or(f64::NAN);
        firsts.push(first);
        ratios.push(first / steady);
        cold_ratios.push(first / cold);
    }
    Some(FirstCalls {
        ms: median(&mut firsts),
        over_steady: median(&mut ratios),
        over_cold_steady: median(&mut cold_ratios),
    })
}

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}
