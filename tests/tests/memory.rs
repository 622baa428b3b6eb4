//! Memory limits and the arena pool, each checked in a child process of this test binary: under a 1 GiB memory
//! cgroup, requests past the limit are `OutOfMemory` instead of an OOM kill; after a burst of large concurrent
//! calls the process's resident memory comes back down. And random weights too large for any machine are an
//! error, not an abort.

use std::process::{Command, Output};

use fuse_runtime::{fused_model, Error, Tensor};

#[fused_model]
mod widen {
    // 1 KiB of arena and 1 KiB of output per row of `batch`, from 16 bytes of input.
    pub struct Widen {
        #[shape(4, 256)]
        w: Tensor,
    }

    impl Widen {
        pub fn forward(&self, #[shape(batch, 4)] x: Tensor) -> Tensor {
            let h = x.matmul(&self.w).relu();
            h.softmax(1)
        }
    }
}

use widen::Widen;

const MIB: usize = 1 << 20;
const GIB: usize = 1 << 30;

/// Runs this test alone in a child process of this binary with `env` set; returns what it printed.
fn run_child(test: &str, env: (&str, &str)) -> Output {
    let exe = std::env::current_exe().expect("the test binary's path");
    Command::new(exe)
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(env.0, env.1)
        .output()
        .expect("the child test starts")
}

fn check_child(output: &Output, done: &str) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    #[cfg(unix)]
    if let Some(signal) = std::os::unix::process::ExitStatusExt::signal(&output.status) {
        panic!(
            "the child was killed by signal {signal} (9: the kernel's OOM killer) instead of returning an error\n\
             {stdout}\n{stderr}"
        );
    }
    eprint!("{stdout}");
    assert!(
        output.status.success() && stdout.contains(done),
        "child failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
}

// ---- memory cgroups ------------------------------------------------------------------------------------------

const CGROUP_ENV: &str = "FUSE_TEST_CGROUP";

/// A memory cgroup this process created, removed on drop.
struct Cgroup {
    dir: std::path::PathBuf,
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// A new cgroup limited to `limit` bytes: cgroup v2 where its memory controller is available, else v1.
fn limited_cgroup(limit: usize) -> Result<Cgroup, String> {
    let name = format!("fuse-memory-test-{}", std::process::id());
    let v2_root = std::path::Path::new("/sys/fs/cgroup");
    let v2_controllers = std::fs::read_to_string(v2_root.join("cgroup.controllers"));
    if v2_controllers.is_ok_and(|c| c.split_whitespace().any(|c| c == "memory")) {
        // Children get memory.max only when the parent delegates the controller.
        let _ = std::fs::write(v2_root.join("cgroup.subtree_control"), "+memory");
        let cgroup = make(v2_root.join(&name))?;
        std::fs::write(cgroup.dir.join("memory.max"), limit.to_string())
            .map_err(|e| format!("cannot set memory.max in {}: {e}", cgroup.dir.display()))?;
        let _ = std::fs::write(cgroup.dir.join("memory.swap.max"), "0");
        return Ok(cgroup);
    }
    let v1_root = std::path::Path::new("/sys/fs/cgroup/memory");
    if v1_root.join("memory.limit_in_bytes").exists() {
        let cgroup = make(v1_root.join(&name))?;
        std::fs::write(cgroup.dir.join("memory.limit_in_bytes"), limit.to_string()).map_err(
            |e| {
                format!(
                    "cannot set memory.limit_in_bytes in {}: {e}",
                    cgroup.dir.display()
                )
            },
        )?;
        let _ = std::fs::write(
            cgroup.dir.join("memory.memsw.limit_in_bytes"),
            limit.to_string(),
        );
        return Ok(cgroup);
    }
    Err(
        "no cgroup v2 memory controller and no cgroup v1 memory hierarchy under /sys/fs/cgroup"
            .into(),
    )
}

fn make(dir: std::path::PathBuf) -> Result<Cgroup, String> {
    std::fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    Ok(Cgroup { dir })
}

#[test]
fn requests_past_a_cgroup_limit_are_out_of_memory() {
    if let Ok(dir) = std::env::var(CGROUP_ENV) {
        return in_cgroup(&dir);
    }
    let cgroup = match limited_cgroup(GIB) {
        Ok(cgroup) => cgroup,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let dir = cgroup.dir.to_string_lossy().into_owned();
    let output = run_child(
        "requests_past_a_cgroup_limit_are_out_of_memory",
        (CGROUP_ENV, &dir),
    );
    check_child(
        &output,
        "in cgroup: OutOfMemory for the reservation and the output",
    );
}

/// In the child: moves into the cgroup, then asks for 2 GiB twice.
fn in_cgroup(dir: &str) {
    let procs = std::path::Path::new(dir).join("cgroup.procs");
    std::fs::write(&procs, std::process::id().to_string()).expect("joins the test cgroup");
    let model = Widen::random(1);
    let rows = 2 << 20;
    let (_, arena) = Widen::spec()
        .fused
        .decode()
        .unwrap()
        .layout(&[rows])
        .unwrap();
    assert!(
        arena >= 2 * GIB,
        "the arena at {rows} rows is only {arena} bytes"
    );

    let check = |e: Error, what: &str| match e {
        Error::OutOfMemory {
            bytes: Some(bytes),
            available: Some(available),
            ..
        } => {
            assert!(bytes >= 2 * GIB, "{what}: {bytes}");
            assert!(available.bytes < GIB as u64, "{what}: {available:?}");
            let message = e.to_string();
            assert!(message.contains("more bytes"), "{message}");
            println!("{what}: {message}");
        }
        other => panic!("{what}: expected OutOfMemory with both sizes, got {other:?}"),
    };
    let reserved = model.compiled().reserve(&[("batch", rows)]);
    check(
        reserved.expect_err("a 2 GiB reservation in 1 GiB"),
        "reserve",
    );
    let x = Tensor::randn(&[rows, 4], 2);
    check(
        model.forward(&x).expect_err("a 2 GiB output in 1 GiB"),
        "forward",
    );

    // What fits still runs: 64 MiB of arena and output.
    let x = Tensor::randn(&[64 << 10, 4], 3);
    assert_eq!(model.forward(&x).unwrap().shape(), [64 << 10, 256]);
    println!("in cgroup: OutOfMemory for the reservation and the output");
}

// ---- the arena pool -------------------------------------------------------------------------------------------

const RSS_ENV: &str = "FUSE_TEST_RSS";

fn resident_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("a VmRSS line");
    let kib: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("a VmRSS value");
    kib * 1024
}

#[test]
fn resident_memory_comes_back_after_a_burst() {
    if std::env::var_os(RSS_ENV).is_some() {
        return burst_and_measure();
    }
    if !std::path::Path::new("/proc/self/status").exists() {
        eprintln!("skipped: no /proc/self/status to read the resident set from");
        return;
    }
    let output = run_child("resident_memory_comes_back_after_a_burst", (RSS_ENV, "1"));
    check_child(&output, "rss: back to the steady state");
}

/// Eight concurrent calls with 64 MiB arenas each, then small calls.
fn burst_and_measure() {
    let model = Widen::random(1);
    let small = Tensor::randn(&[64, 4], 1);
    let large = Tensor::randn(&[64 << 10, 4], 2);
    let small_calls = |n: usize| {
        for _ in 0..n {
            model.forward(&small).unwrap();
        }
    };
    let burst = || {
        let start = std::sync::Barrier::new(8);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    start.wait();
                    model.forward(&large).unwrap();
                });
            }
        });
    };
    small_calls(40);
    let steady = resident_bytes();

    burst();
    let after_burst = resident_bytes();
    small_calls(40);
    let after_small_calls = resident_bytes();
    let stats = model.compiled().pool_stats();

    burst();
    let released = model.compiled().trim();
    let after_trim = resident_bytes();
    small_calls(5);
    let after_trim_and_calls = resident_bytes();

    println!(
        "rss MiB: steady {}, after burst {}, after 40 small calls {} (pool {:?}), after a burst and trim {} \
         ({} MiB released), then {}",
        steady / MIB,
        after_burst / MIB,
        after_small_calls / MIB,
        stats,
        after_trim / MIB,
        released / MIB,
        after_trim_and_calls / MIB,
    );
    // The burst did take memory (at least the 64 MiB arena that fits it stays idle right after it)...
    assert!(after_burst >= steady + 60 * MIB, "the burst did not show");
    // ...and smaller calls, or a trim, give it back.
    assert!(stats.idle_bytes < MIB, "{stats:?}");
    assert!(
        after_small_calls < steady + 32 * MIB,
        "not released after small calls"
    );
    assert!(released >= 64 * MIB, "trim released {released} bytes");
    assert!(after_trim < steady + 32 * MIB, "not released by trim");
    assert!(after_trim_and_calls < steady + 32 * MIB);
    assert_eq!(
        model.compiled().pool_stats().idle_arenas,
        1,
        "one small arena after the calls"
    );
    println!("rss: back to the steady state");
}

// ---- random weights ----------------------------------------------------------------------------------------

#[fused_model]
mod huge {
    // 2^40 f32 = 4 TiB.
    pub struct Huge {
        #[shape(1048576, 1048576)]
        w: Tensor,
    }

    impl Huge {
        pub fn forward(&self, #[shape(n, 1048576)] x: Tensor) -> Tensor {
            x.matmul(&self.w.t())
        }
    }
}

#[test]
fn a_4_tib_model_is_out_of_memory_not_an_abort() {
    match huge::Huge::try_random(0) {
        Err(Error::OutOfMemory { bytes, .. }) => assert_eq!(bytes, Some(4 << 40)),
        Err(e) => panic!("expected OutOfMemory, got {e}"),
        Ok(_) => panic!("4 TiB of weights were allocated"),
    }
    // The infallible form panics with that error (a message a test shows), never aborts the process.
    let panic = std::panic::catch_unwind(|| huge::Huge::random(0))
        .err()
        .expect("random panics");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains("cannot allocate the weights") && message.contains("try_random"),
        "{message}"
    );
}
