//! A decoding step's products: one row of A (or one per sequence of a batch, `--rows`) times a weight packed at
//! load, on SmolLM-135M's shapes, in each precision's pack, in GB/s of the pack read. "hot": one thread, the same
//! pack again and again (it stays in L2 or L3, so the kernel's own rate shows); "cold": as many copies of the pack
//! as make 96 MiB, read in turn, so each comes from memory as in a decoding step, on one thread and on the pool's
//! threads (through `gemm_with`, from inside the pool as a model's call runs, so it splits B's columns between them
//! where it would in a model). Beside them, what memory gives one thread and the pool ([`StreamFloor`]).

use std::time::Instant;

use fuse_examples::timing::StreamFloor;
use fuse_runtime::cpu::gemm::bf16::Bf16B;
use fuse_runtime::cpu::gemm::int8::QuantB;
use fuse_runtime::cpu::gemm::{BView, Backend, PackedB, WeightPack};
use fuse_runtime::cpu::par::{gemm_with, GemmSpec};
use rayon::ThreadPool;

use super::ROUNDS;

/// SmolLM-135M's Linear layers as a decoding step multiplies them: (what, in, out).
const LAYERS: [(&str, usize, usize); 5] = [
    ("q/o projection", 576, 576),
    ("k/v projection", 576, 192),
    ("gate/up", 576, 1536),
    ("down", 1536, 576),
    ("lm_head", 576, 49152),
];

/// Bytes the cold runs cycle through: beyond any L3 this machine kind has.
pub const COLD_BYTES: usize = 96 << 20;

/// A pack of `b` (viewed by `view`) in `precision`, as a model makes it at load.
fn pack(precision: &str, b: &[f32], view: BView) -> Option<WeightPack> {
    match precision {
        "int8" => QuantB::new(b, view).ok().flatten().map(WeightPack::Int8),
        "bf16" => Bf16B::new(b, view).ok().flatten().map(WeightPack::Bf16),
        _ => PackedB::new(Backend::best(), b, view)
            .ok()
            .flatten()
            .map(WeightPack::F32),
    }
}

/// A pool of one thread and one of as many as rayon's global pool has, for the cold runs; `None` if one cannot be
/// made.
pub fn one_and_all_threads() -> Option<(ThreadPool, ThreadPool)> {
    let pool = |n| rayon::ThreadPoolBuilder::new().num_threads(n).build().ok();
    Some((pool(1)?, pool(rayon::current_num_threads())?))
}

/// The report for a step of `rows` sequences.
pub fn report(rows: usize) {
    let Some((one, all)) = one_and_all_threads() else {
        return;
    };
    let (one, all) = (&one, &all);
    let floor = |pool: &ThreadPool| {
        let set = StreamFloor::new(COLD_BYTES);
        let best = pool.install(|| (0..ROUNDS).map(|_| set.read_ms()).fold(f64::MAX, f64::min));
        COLD_BYTES as f64 / best / 1e6
    };
    let threads = all.current_num_threads();
    println!(
        "decoding step's products, {rows} row(s), GB/s of the pack (memory read at {:.1} by one thread, {:.1} by \
         {threads})",
        floor(one),
        floor(all)
    );
    println!(
        "{:<30} {:>6} {:>10} {:>10} {:>12} {:>10}",
        "layer (in×out), precision",
        "KiB",
        "hot",
        "cold",
        format!("cold, {threads} thr"),
        "µs cold"
    );
    for (what, k, n) in LAYERS {
        let b: Vec<f32> = (0..k * n).map(|i| (i % 13) as f32 * 0.01 - 0.06).collect();
        // A Linear layer's Wᵀ: B's (l, j) is W[j, l].
        let view = BView {
            offset: 0,
            rs: 1,
            cs: k,
            k,
            n,
        };
        let spec = GemmSpec {
            batch: &[],
            a_batch: &[],
            b_batch: &[],
            m: rows,
            k,
            n,
            a_offset: 0,
            a_rs: k,
            a_cs: 1,
            b_offset: 0,
            b_rs: 1,
            b_cs: k,
        };
        let a: Vec<f32> = (0..rows * k).map(|i| (i % 7) as f32 * 0.1 - 0.3).collect();
        let mut c = vec![0.0f32; rows * n];
        for precision in ["f32", "bf16", "int8"] {
            let Some(first) = pack(precision, &b, view) else {
                continue;
            };
            let bytes = first.bytes();
            let copies: Vec<WeightPack> = (0..COLD_BYTES.div_ceil(bytes).max(2))
                .filter_map(|_| pack(precision, &b, view))
                .collect();
            let reps = (256 << 20) / bytes + 1;
            // Seconds per product: `count` products over `packs` in turn, on `pool`'s threads.
            let mut per_product = |pool: &ThreadPool, packs: &[&WeightPack], count: usize| {
                pool.install(|| {
                    let start = Instant::now();
                    for p in packs.iter().cycle().take(count) {
                        gemm_with(&spec, &a, &[], Some(p), &mut c, None);
                    }
                    start.elapsed().as_secs_f64() / count as f64
                })
            };
            let cold_packs: Vec<&WeightPack> = copies.iter().collect();
            let (mut hot, mut cold, mut cold_all) = (f64::MAX, f64::MAX, f64::MAX);
            for _ in 0..ROUNDS {
                hot = hot.min(per_product(one, &[&first], reps));
                cold = cold.min(per_product(one, &cold_packs, cold_packs.len()));
                cold_all = cold_all.min(per_product(all, &cold_packs, cold_packs.len()));
            }
            std::hint::black_box(&c);
            let rate = |seconds: f64| bytes as f64 / seconds / 1e9;
            println!(
                "{:<30} {:>6} {:>10.1} {:>10.1} {:>12.1} {:>10.1}",
                format!("{what} {k}×{n}, {precision}"),
                bytes >> 10,
                rate(hot),
                rate(cold),
                rate(cold_all),
                cold_all * 1e6
            );
        }
    }
}
