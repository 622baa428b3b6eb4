//! Timing for the examples and benchmarks: median wall time of repeated runs, after one warm-up call, and the
//! line that says which machine the figures come from.

use std::time::Instant;

use fuse_runtime::cpu::processor::Processor;
use fuse_runtime::CpuPrecision;

/// Median milliseconds of `runs` calls of `f` (after one untimed warm-up call).
pub fn median_ms<E>(runs: usize, f: impl FnMut() -> Result<(), E>) -> Result<f64, E> {
    Ok(sample_ms(runs, f)?.median)
}

/// The spread of repeated timings.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// Times `runs` calls of `f` (after one untimed warm-up call), in milliseconds.
pub fn sample_ms<E>(runs: usize, mut f: impl FnMut() -> Result<(), E>) -> Result<Sample, E> {
    f()?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs.max(1) {
        let start = Instant::now();
        f()?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(Sample::of(times))
}

impl Sample {
    /// The spread of `times` (NaN for all three when there are none).
    pub fn of(mut times: Vec<f64>) -> Sample {
        times.sort_by(f64::total_cmp);
        let at = |i: usize| times.get(i).copied().unwrap_or(f64::NAN);
        Sample {
            median: at(times.len() / 2),
            min: at(0),
            max: at(times.len().saturating_sub(1)),
        }
    }
}

/// Takes `--precision f32|int8|bf16|f16` out of `args` (f32 when absent): the CPU precision of the benchmarked model's
/// weight GEMMs.
pub fn precision_arg(args: &mut Vec<String>) -> Result<CpuPrecision, String> {
    let Some(at) = args.iter().position(|a| a == "--precision") else {
        return Ok(CpuPrecision::F32);
    };
    let value = args.get(at + 1).cloned().unwrap_or_default();
    args.drain(at..(at + 2).min(args.len()));
    match value.as_str() {
        "f32" => Ok(CpuPrecision::F32),
        "int8" => Ok(CpuPrecision::Int8),
        "bf16" => Ok(CpuPrecision::Bf16),
        "f16" => Ok(CpuPrecision::F16),
        other => Err(format!(
            "--precision takes f32, int8, bf16 or f16, not {other:?}"
        )),
    }
}

/// The JSON line of one workload's timings in one plan mode (`bench --json`, `minilm --bench --json`); callers
/// add the fields only they have (and set `precision` when it is not f32).
pub fn json_line(workload: &str, mode: &str, sample: Sample, runs: usize) -> serde_json::Value {
    serde_json::json!({
        "workload": workload,
        "precision": "f32",
        "mode": mode,
        "median_ms": sample.median,
        "min_ms": sample.min,
        "max_ms": sample.max,
        "runs": runs,
        "threads": threads(),
        "cpu": cpu_line(),
    })
}

/// The processor's model, cache sizes and vector instruction sets, for the head of every benchmark's output
/// (and the `cpu` field of its JSON lines).
pub fn cpu_line() -> String {
    Processor::get().summary()
}

/// Worker threads the CPU kernels run on (rayon's pool: `RAYON_NUM_THREADS` or one per CPU).
pub fn threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Seconds this thread has run on a CPU (Linux's per-thread CPU clock), or wall seconds elsewhere: for
/// single-thread kernels on a shared machine, where time spent descheduled is not the kernel's.
pub fn thread_seconds() -> f64 {
    #[cfg(target_os = "linux")]
    {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `t` is a valid timespec to write; the clock id is a constant Linux defines.
        if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } == 0 {
            return t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9;
        }
    }
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// The process's resident memory in MB (Linux's `VmRSS`), or `None` where it cannot be read.
pub fn resident_mb() -> Option<f64> {
    proc_status_mb("VmRSS:")
}

/// The process's largest resident memory so far in MB (Linux's `VmHWM`), or `None` where it cannot be read.
pub fn peak_resident_mb() -> Option<f64> {
    proc_status_mb("VmHWM:")
}

fn proc_status_mb(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024.0 / 1e6)
}

/// The weight-streaming floor of a decoding step, measured beside the steps: the time to read as many bytes as a
/// step's weights from memory on every worker thread. On a shared machine the read bandwidth moves between
/// minutes (W5's floor measured 1.7× apart in two sittings), so a floor measured once cannot judge a step
/// measured later; read between the steps, each step is compared with the floor of its own moment.
pub struct StreamFloor {
    words: Vec<u64>,
}

impl StreamFloor {
    /// A buffer of `bytes` (rounded up to 8), written once so that its pages exist; far larger than any cache for
    /// a model's weights, so each read comes from memory.
    pub fn new(bytes: usize) -> StreamFloor {
        StreamFloor {
            words: (0..bytes.div_ceil(8) as u64).collect(),
        }
    }

    /// Milliseconds of one read of the whole buffer, split between the worker threads as a decoding step's
    /// weight reads are.
    pub fn read_ms(&self) -> f64 {
        use rayon::prelude::*;
        let start = Instant::now();
        let sum = self
            .words
            .par_chunks(1 << 16)
            .map(|chunk| chunk.iter().fold(0u64, |a, &w| a.wrapping_add(w)))
            .reduce(|| 0, u64::wrapping_add);
        std::hint::black_box(sum);
        start.elapsed().as_secs_f64() * 1e3
    }
}
