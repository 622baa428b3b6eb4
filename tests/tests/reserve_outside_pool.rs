//! `CompiledModel::reserve` called from a thread outside rayon's pool, as a server's request thread calls it. A
//! call runs its kernels inside a rayon scope, which from such a thread runs on whichever worker takes it, so the
//! scratch an int8 product quantises its rows into must be on every worker: the first call then takes a reserved
//! buffer and allocates none. Its own test binary, so that no other test's calls touch the global pool's workers.

use fuse_examples::models::mlp::mlp::Mlp;
use fuse_runtime::cpu::scratch::INT8_ROWS;
use fuse_runtime::{CpuPrecision, PlanMode, Tensor};

#[test]
fn reserve_from_outside_the_pool_gives_every_worker_the_int8_rows() {
    rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build_global()
        .expect("this binary's only test builds the global pool first");
    let model = Mlp::random(1)
        .into_compiled()
        .with_cpu_precision(CpuPrecision::Int8)
        .unwrap();
    // Each worker's rows: (address, length).
    let held = || {
        rayon::broadcast(|_| INT8_ROWS.with(|c| (c.borrow().as_ptr() as usize, c.borrow().len())))
    };
    assert!(held().iter().all(|&(_, len)| len == 0), "{:?}", held());
    // W2 at batch 64: its columns are split between the two workers, A's 64 rows quantised once.
    model.reserve(&[("batch", 64)]).unwrap();
    let reserved = held();
    assert!(reserved.iter().all(|&(_, len)| len > 0), "{reserved:?}");
    let x = Tensor::randn(&[64, 1024], 2);
    let first = model.run(PlanMode::Fused, &[&x]).unwrap();
    assert_eq!(
        held(),
        reserved,
        "the first call allocated its rows' scratch"
    );
    let second = model.run(PlanMode::Fused, &[&x]).unwrap();
    assert_eq!(first[0].to_f32_vec(), second[0].to_f32_vec());
    assert_eq!(held(), reserved);
}
