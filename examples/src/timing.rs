//! Timing for the examples and benchmarks: median wall time of repeated runs, after one warm-up call.

use std::time::Instant;

/// Median milliseconds of `runs` calls of `f` (after one untimed warm-up call).
pub fn median_ms<E>(runs: usize, mut f: impl FnMut() -> Result<(), E>) -> Result<f64, E> {
    f()?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs.max(1) {
        let start = Instant::now();
        f()?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}
