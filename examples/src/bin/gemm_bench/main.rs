//! Single-thread GEMM throughput: fuse's own kernel against `matrixmultiply` on the per-task shapes the
//! workloads produce (the drivers split large products into blocks of rows or columns, one per task).
//! `cargo run --release -p fuse-examples --bin gemm_bench`; best of interleaved rounds, GFLOP/s, and for fuse's
//! tiles the share of this core's FMA peak for their vector width, measured first by [`fma_peak`]. Each of fuse's
//! tiles also runs with B packed beforehand ("packed B", as a model packs its weights at load): the difference
//! is what packing B costs per call (`--f32` runs only that table, after the FMA peaks). The int8 kernels come
//! first (`int8`; `--int8` stops after them), then the bf16 ones (`bf16`; `--bf16` runs only them).
//! `--attention` runs only attention kernels: an encoder layer's on one thread, and a decoding step's over a KV
//! cache from a cache and from memory, on one thread and on the pool's (`decode_attention`).
//! Where the process may run AMX, the int8 part starts with what the AMX loop itself reaches on W2's middle block
//! (`amx_ceiling`): the ceiling under the int8 kernel there. `--bandwidth` prints only the read bandwidth over
//! working sets from 1 MiB to 1 GiB on the pool's threads (`bandwidth`): where a model's weights are read from.
//! `--decode` prints only a decoding step's one-row products over packed weights in every precision, in GB/s of the
//! pack read from a cache and from memory, on one thread and on the pool's (`decode`).

use fuse_examples::timing::{cpu_line, thread_seconds};
use fuse_runtime::cpu::gemm::{sgemm_on, BView, Backend, PackedB, Strided};

mod amx;
#[cfg(target_arch = "x86_64")]
mod amx_ceiling;
mod bandwidth;
mod bf16;
mod decode;
mod decode_attention;
mod fma_peak;
mod int8;

/// A product m×k · k×n where B's element (l, j) is at `l·rsb + j·csb` and A, C are row-major.
struct Shape {
    what: &'static str,
    m: usize,
    k: usize,
    n: usize,
    rsb: usize,
    csb: usize,
}

impl Shape {
    /// Signed operands for the reduced-precision kernels: A (m×k, row-major), B's buffer and its view.
    fn reduced_operands(&self) -> (Vec<f32>, Vec<f32>, BView) {
        let a = (0..self.m * self.k)
            .map(|i| (i % 7) as f32 * 0.1 - 0.3)
            .collect();
        let b_len = (self.k - 1) * self.rsb + (self.n - 1) * self.csb + 1;
        let b = (0..b_len).map(|i| (i % 5) as f32 * 0.1 - 0.2).collect();
        let view = BView {
            offset: 0,
            rs: self.rsb,
            cs: self.csb,
            k: self.k,
            n: self.n,
        };
        (a, b, view)
    }
}

/// Prints the head of a kernels table: `what` per shape in `unit`, against `peak` where there is one, a column
/// per kernel.
fn print_header<K: std::fmt::Debug>(
    what: &str,
    unit: &str,
    peak: Option<(&str, f64)>,
    kernels: &[K],
) {
    let header = match peak {
        Some((name, _)) => format!("{what} shape (m×k×n), {unit} (% of {name} peak)"),
        None => format!("{what} shape (m×k×n), {unit}"),
    };
    print!("{header:<60}");
    for k in kernels {
        print!(" {:>18}", format!("{k:?}"));
    }
}

/// Prints a shape's row of a kernels table: each kernel's rate from its best time, and its share of `peak`.
fn print_rates(s: &Shape, ops: f64, best: &[f64], peak: Option<(&str, f64)>) {
    print!("{:<60}", format!("{} {}×{}×{}", s.what, s.m, s.k, s.n));
    for &t in best {
        let rate = ops / t / 1e9;
        let share = peak.map_or(String::new(), |(_, p)| {
            format!(" ({:.0} %)", 100.0 * rate / p)
        });
        print!(" {:>18}", format!("{rate:.0}{share}"));
    }
}

/// A peak loop: runs its steps, returns a value of its accumulators (so nothing is dead code).
type PeakLoop<R> = unsafe fn(usize) -> R;

/// A peak loop with its name and its operations per step.
type PeakRun<R> = (&'static str, usize, PeakLoop<R>);

/// Rates (G operations per second) of peak loops, best of [`ROUNDS`]: each `(name, ops per step, loop)` runs
/// `steps` steps.
///
/// # Safety
/// This CPU runs every loop's instruction set.
unsafe fn loop_rates<R>(steps: usize, runs: &[PeakRun<R>]) -> Vec<(&'static str, f64)> {
    runs.iter()
        .map(|&(name, ops, run)| {
            // SAFETY: the caller's contract.
            let best = best_seconds(|| unsafe { run(std::hint::black_box(steps)) });
            (name, (steps * ops) as f64 / best / 1e9)
        })
        .collect()
}

const fn shape(what: &'static str, m: usize, k: usize, n: usize, rsb: usize, csb: usize) -> Shape {
    Shape {
        what,
        m,
        k,
        n,
        rsb,
        csb,
    }
}

/// Linear layers multiply by a transposed `[out, in]` weight: B's (l, j) is W[j, l], so B's row stride is 1 and
/// its column stride the layer's input width. Column blocks of a wider layer start `col0` rows into W.
const SHAPES: [Shape; 9] = [
    shape("W3 projection block, B = Wᵀ", 256, 384, 384, 1, 384),
    shape("W3 FFN-in block, B = Wᵀ", 256, 384, 1536, 1, 384),
    shape("W3 FFN-out block, B = Wᵀ", 256, 1536, 384, 1, 1536),
    shape(
        "W2 first layer column block, B = Wᵀ",
        64,
        1024,
        1024,
        1,
        1024,
    ),
    shape(
        "W2 middle layer column block, B = Wᵀ",
        64,
        4096,
        1024,
        1,
        4096,
    ),
    shape("W2 last layer column block, B = Wᵀ", 64, 4096, 256, 1, 4096),
    shape(
        "W5 prefill lm_head column block, B = Eᵀ",
        128,
        576,
        12288,
        1,
        576,
    ),
    shape("attention Q·Kᵀ block (K transposed)", 128, 32, 128, 1, 32),
    shape(
        "attention P·V block (V row stride 1152)",
        128,
        128,
        32,
        1152,
        1,
    ),
];

/// Many short timings, keeping the best: on a shared machine some of them run undisturbed.
const ROUNDS: usize = 25;

/// The shortest of [`ROUNDS`] timings of `run` in this thread's CPU seconds (its result kept alive, so the work is
/// not optimised away).
fn best_seconds<T>(mut run: impl FnMut() -> T) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..ROUNDS {
        let start = thread_seconds();
        let sink = run();
        best = best.min(thread_seconds() - start);
        std::hint::black_box(sink);
    }
    best
}

/// Each kernel's shortest time for one `run` of it, over [`ROUNDS`] interleaved timings of about 1 GFLOP each
/// (`flops` per run), in this thread's CPU seconds.
fn best_per_kernel<K: Copy>(kernels: &[K], flops: f64, mut run: impl FnMut(K)) -> Vec<f64> {
    let reps = (1e9 / flops).ceil() as usize;
    let mut best = vec![f64::MAX; kernels.len()];
    for _ in 0..ROUNDS {
        for (slot, &kernel) in kernels.iter().enumerate() {
            let start = thread_seconds();
            for _ in 0..reps {
                run(kernel);
            }
            best[slot] = best[slot].min((thread_seconds() - start) / reps as f64);
        }
    }
    best
}

fn main() {
    println!("cpu: {}", cpu_line());
    if std::env::args().any(|a| a == "--f32") {
        return f32_report();
    }
    if std::env::args().any(|a| a == "--bandwidth") {
        return bandwidth::report();
    }
    if std::env::args().any(|a| a == "--decode") {
        // `--rows M`: a step of M sequences (one row each), 1 unless given.
        let args: Vec<String> = std::env::args().collect();
        let rows = args
            .iter()
            .position(|a| a == "--rows")
            .and_then(|i| args.get(i + 1)?.parse().ok())
            .unwrap_or(1);
        return decode::report(rows);
    }
    if std::env::args().any(|a| a == "--attention") {
        // Timed in the calling thread's CPU seconds, so on one thread whatever the pool has (the pool's other
        // threads' work would not be counted).
        if let Ok(one) = rayon::ThreadPoolBuilder::new().num_threads(1).build() {
            one.install(decode_attention::encoder_report);
        }
        return decode_attention::report();
    }
    let vnni = int8::vnni_peaks();
    for (width, gops) in &vnni {
        println!("one-thread VNNI (vpdpbusd) peak, {width} vectors: {gops:.0} GOP/s");
    }
    let avx2 = int8::avx2_peaks();
    for (what, gops) in &avx2 {
        println!("one-thread AVX2 int8 peak, {what}: {gops:.0} GOP/s");
    }
    let (amx_int8, amx_bf16) = amx::peaks();
    if let Some(gops) = amx_int8 {
        println!("one-thread AMX int8 (tdpbusd) peak: {gops:.0} GOP/s");
        #[cfg(target_arch = "x86_64")]
        if !std::env::args().any(|a| a == "--bf16") {
            amx_ceiling::report();
        }
    }
    // Shares are of the AMX peak where the process may run AMX, else of the VNNI 256-bit peak where the CPU
    // has VNNI, else of the `vpmaddwd` one.
    let reference = amx_int8
        .map(|p| ("AMX tdpbusd", p))
        .or(vnni.first().map(|&(_, p)| ("VNNI 256-bit", p)))
        .or(avx2.first().map(|&(_, p)| ("vpmaddwd", p)));
    let only = |flag: &str| std::env::args().any(|a| a == flag);
    if !only("--bf16") {
        int8::report(&SHAPES, reference);
    }
    if only("--int8") {
        return;
    }
    let bf16 = bf16::peaks();
    for (width, gflops) in &bf16 {
        println!("one-thread vdpbf16ps peak, {width} vectors: {gflops:.0} GFLOP/s");
    }
    if let Some(gflops) = amx_bf16 {
        println!("one-thread AMX bf16 (tdpbf16ps) peak: {gflops:.0} GFLOP/s");
    }
    if only("--bf16") {
        // The widening tiles run on the FMAs: against this, `vdpbf16ps` shows whether it is worth taking (an
        // Intel core's has half the FMAs' rate, Zen 4's twice).
        for (backend, gflops) in fma_peak::measure() {
            println!("one-thread f32 FMA peak, {backend:?} vectors: {gflops:.0} GFLOP/s");
        }
    }
    let reference = amx_bf16
        .map(|p| ("AMX tdpbf16ps", p))
        .or(bf16.first().map(|&(_, p)| ("vdpbf16ps 256-bit", p)));
    bf16::report(&SHAPES, reference);
    if only("--bf16") {
        return;
    }
    f32_report();
}

/// The FMA peaks, then the f32 table: `matrixmultiply` and fuse's tiles on every shape, with B packed per call and
/// beforehand.
fn f32_report() {
    let peaks = fma_peak::measure();
    for (backend, gflops) in &peaks {
        println!("one-thread FMA peak, {backend:?} vectors: {gflops:.1} GFLOP/s");
    }
    let peak_of = |backend: Backend| {
        peaks
            .iter()
            .find(|(b, _)| *b == backend)
            .map(|&(_, gflops)| gflops)
    };
    // Portable (matrixmultiply) first, then fuse's tiles this CPU runs, then the same tiles with B packed
    // beforehand; ratios are against matrixmultiply.
    let mut backends = Backend::available();
    backends.rotate_right(1);
    let runs: Vec<(Backend, bool)> = backends
        .iter()
        .map(|&b| (b, false))
        .chain(backends[1..].iter().map(|&b| (b, true)))
        .collect();
    print!(
        "{:<60}",
        "shape (m×k×n), GFLOP/s (× matrixmultiply, % of peak)"
    );
    for (backend, packed) in &runs {
        let name = format!("{backend:?}{}", if *packed { " packed B" } else { "" });
        print!(" {name:>22}");
    }
    println!();
    for s in &SHAPES {
        let a: Vec<f32> = (0..s.m * s.k).map(|i| (i % 7) as f32 * 0.1).collect();
        let b_len = (s.k - 1) * s.rsb + (s.n - 1) * s.csb + 1;
        let b: Vec<f32> = (0..b_len).map(|i| (i % 5) as f32 * 0.1).collect();
        let mut c = vec![0.0f32; s.m * s.n];
        let flops = 2.0 * (s.m * s.n * s.k) as f64;
        let view = BView {
            offset: 0,
            rs: s.rsb,
            cs: s.csb,
            k: s.k,
            n: s.n,
        };
        let packs: Vec<Option<PackedB>> = runs
            .iter()
            .map(|&(backend, packed)| {
                packed
                    .then(|| PackedB::new(backend, &b, view).ok().flatten())
                    .flatten()
            })
            .collect();
        // About 3 ms per timing: long against the timer's resolution, short enough that some timings fall
        // between other processes' time slices.
        let reps = (3e8 / flops).ceil() as usize;
        let mut best = vec![f64::MAX; runs.len()];
        for _ in 0..ROUNDS {
            for (slot, (&(backend, _), pack)) in runs.iter().zip(&packs).enumerate() {
                let start = thread_seconds();
                for _ in 0..reps {
                    let a_view = Strided::new(a.as_ptr(), s.k as isize, 1);
                    let c_view = Strided::new(c.as_mut_ptr(), s.n as isize, 1);
                    // SAFETY: A is m×k row-major, B's strides stay inside `b` (b_len), C is m×n row-major; the
                    // backend is one this CPU runs; a pack holds this B over all its columns.
                    unsafe {
                        match pack {
                            Some(pack) => pack.sgemm((s.m, s.k, s.n), 0, 1.0, a_view, 0.0, c_view),
                            None => sgemm_on(
                                backend,
                                (s.m, s.k, s.n),
                                1.0,
                                a_view,
                                Strided::new(b.as_ptr(), s.rsb as isize, s.csb as isize),
                                0.0,
                                c_view,
                            ),
                        }
                    };
                }
                best[slot] = best[slot].min((thread_seconds() - start) / reps as f64);
            }
        }
        print!("{:<60}", format!("{} {}×{}×{}", s.what, s.m, s.k, s.n));
        let portable = flops / best[0] / 1e9;
        print!(" {portable:>22.1}");
        for (t, &(backend, _)) in best[1..].iter().zip(&runs[1..]) {
            let gflops = flops / t / 1e9;
            let share = peak_of(backend)
                .map_or(String::new(), |p| format!(", {:.0} %", 100.0 * gflops / p));
            print!(
                " {:>22}",
                format!("{gflops:.1} ({:.2}x{share})", gflops / portable)
            );
        }
        println!();
    }
}
