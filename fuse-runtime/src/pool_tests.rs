//! The pool policy: which idle arenas stay, counted in arenas and bytes.

use super::*;

const MIB: usize = 1 << 20;

#[test]
fn a_burst_keeps_the_fitting_arena_and_what_the_limits_allow() {
    let limits = PoolLimits::default();
    // Eight concurrent calls at 549 MB each, all back in the pool.
    let burst = vec![549 * MIB; 8];
    let keep = kept(&burst, 549 * MIB, &limits);
    // The one that fits, then one more within 1 GiB (two more would be 1098 MB).
    assert_eq!(keep.len(), 2);
    // With a larger byte bound, the count bound applies.
    let roomy = PoolLimits {
        max_idle_bytes: 64 << 30,
        ..limits
    };
    assert_eq!(kept(&burst, 549 * MIB, &roomy).len(), 4);
    // Pooling switched off.
    let none = PoolLimits {
        max_idle_arenas: 0,
        ..limits
    };
    assert!(kept(&burst, 549 * MIB, &none).is_empty());
}

#[test]
fn arenas_much_larger_than_recent_calls_are_released() {
    let limits = PoolLimits::default();
    // Recent calls need 10 MB: the 100 MB arenas are more than 4x that, the 30 MB one is not.
    let sizes = [100 * MIB, 30 * MIB, 100 * MIB, 10 * MIB];
    let mut keep = kept(&sizes, 10 * MIB, &limits);
    keep.sort_unstable();
    assert_eq!(keep, [1, 3]);
    // Small arenas are never "oversized".
    assert_eq!(kept(&[MIB, 2 * MIB], 1024, &limits).len(), 2);
    // Nothing fits a larger need: the others still stay if not oversized.
    assert_eq!(kept(&[MIB, 2 * MIB], 4 * MIB, &limits).len(), 2);
}

/// With a factor of 1, the arena made for what recent calls needed (rounded up to whole huge pages) is no larger
/// than needed and stays; before, it was taken as oversized, and every call allocated afresh.
#[test]
fn a_factor_of_one_keeps_the_arena_made_for_the_need() {
    let limits = PoolLimits {
        oversize_factor: 1,
        ..PoolLimits::default()
    };
    let need = 20 * MIB + 12345;
    let made = Arena::len_for(need).expect("a length");
    assert!(made > need);
    assert_eq!(kept(&[made, 2 * made], need, &limits), [0]);
}

#[test]
fn the_fitting_arena_comes_first_then_the_most_recent() {
    let limits = PoolLimits::default();
    let sizes = [MIB, 2 * MIB, 3 * MIB, 4 * MIB, 5 * MIB, 6 * MIB];
    let keep = kept(&sizes, 3 * MIB, &limits);
    // The smallest that fits 3 MiB, then the newest three.
    assert_eq!(keep, [2, 5, 4, 3]);
}

fn cycle(pool: &ArenaPool, bytes: usize) {
    let arena = pool.take(bytes).unwrap();
    assert!(arena.len() >= bytes);
    pool.give_back(arena);
}

#[test]
fn the_pool_shrinks_after_a_burst_and_on_trim() {
    // Arenas are mapped lazily and never touched here, so these sizes cost address space only.
    let pool = ArenaPool::default();
    let burst: Vec<Arena> = (0..8).map(|_| pool.take(400 * MIB).unwrap()).collect();
    for arena in burst {
        pool.give_back(arena);
    }
    let stats = pool.stats();
    // The fitting one plus two more within 1 GiB.
    assert_eq!(stats.idle_arenas, 3, "{stats:?}");
    assert_eq!(stats.idle_bytes, 1200 * MIB);
    // A lower byte bound applies at once.
    pool.set_limits(PoolLimits {
        max_idle_bytes: 400 * MIB,
        ..PoolLimits::default()
    });
    assert_eq!(pool.stats().idle_arenas, 2);
    // Small calls: while the burst is among the recent calls its arenas stay (the small calls use them), then
    // they are released.
    for _ in 0..RECENT_CALLS - 8 {
        cycle(&pool, 2 * MIB);
    }
    assert_eq!(pool.stats().idle_bytes, 800 * MIB);
    for _ in 0..8 {
        cycle(&pool, 2 * MIB);
    }
    assert_eq!(pool.stats(), PoolStats::default());
    // The next small call allocates a small arena, which stays.
    cycle(&pool, 2 * MIB);
    let stats = pool.stats();
    assert_eq!(stats.idle_arenas, 1, "{stats:?}");
    assert_eq!(stats.idle_bytes, 2 * MIB);
    assert_eq!(pool.trim(), 2 * MIB);
    assert_eq!(pool.stats(), PoolStats::default());
}

#[test]
fn a_reserved_size_stays_until_trim() {
    let pool = ArenaPool::default();
    pool.reserve(40 * MIB).unwrap();
    for _ in 0..2 * RECENT_CALLS {
        cycle(&pool, MIB);
    }
    // The small calls took the reserved arena (the only one), so it is all the pool holds.
    assert_eq!(pool.stats().idle_arenas, 1);
    assert_eq!(pool.stats().idle_bytes, 40 * MIB);
    assert_eq!(pool.trim(), 40 * MIB);
    cycle(&pool, MIB);
    assert!(pool.stats().idle_bytes < 40 * MIB);
}

#[test]
fn calls_take_the_smallest_arena_that_fits() {
    let pool = ArenaPool::default();
    let (a, b) = (pool.take(40 * MIB).unwrap(), pool.take(20 * MIB).unwrap());
    pool.give_back(a);
    pool.give_back(b);
    assert_eq!(pool.take(10 * MIB).unwrap().len(), 20 * MIB);
    assert_eq!(pool.take(30 * MIB).unwrap().len(), 40 * MIB);
}
