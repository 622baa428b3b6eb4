//! Read bandwidth over working sets from inside L2 to far beyond the last-level cache, on the pool's threads: what
//! streaming a model's weights costs depends on whether they stay in a cache between calls (W2's 25 MB of int8
//! weights) or come from memory each time (its 96 MB of f32 ones). Each set is read whole, split between the
//! threads as a decoding step's weight reads are ([`StreamFloor`]); best of [`super::ROUNDS`] reads after one
//! that brings the set in.

use fuse_examples::timing::{threads, StreamFloor};

/// Working sets, MiB.
const SIZES_MIB: [usize; 6] = [1, 8, 25, 64, 100, 1024];

pub fn report() {
    print!(
        "read bandwidth, {} threads, GB/s (best of {}):",
        threads(),
        super::ROUNDS
    );
    for mib in SIZES_MIB {
        let bytes = mib << 20;
        let set = StreamFloor::new(bytes);
        set.read_ms();
        let best = (0..super::ROUNDS)
            .map(|_| set.read_ms())
            .fold(f64::MAX, f64::min);
        print!(" {mib} MiB {:.1};", bytes as f64 / best / 1e6);
    }
    println!();
}
