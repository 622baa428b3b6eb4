//! Hand-written CUDA kernels (tests/cuda/kernels.cu), compiled to PTX by nvcc at test time, run on the
//! interpreter and compared with host references on random inputs.

mod common;

use common::{compile_module, download, erf_reference, rng, run, ulps, upload, Arg};
use gpusim::{DeviceMemory, Module};
use rand::Rng;

const SOURCE: &str = include_str!("cuda/kernels.cu");

fn module() -> Option<Module> {
    compile_module(SOURCE)
}

fn random_f32(seed: u64, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    let mut r = rng(seed);
    (0..n).map(|_| r.gen_range(lo..hi)).collect()
}

#[test]
fn vector_add_with_float4() {
    let Some(module) = module() else { return };
    let n = 4 * 300;
    let (a, b) = (random_f32(1, n, -10.0, 10.0), random_f32(2, n, -10.0, 10.0));
    let mut memory = DeviceMemory::new();
    let (da, db) = (upload(&mut memory, &a), upload(&mut memory, &b));
    let dc = memory.alloc(n * 4).unwrap();
    let args = [
        Arg::U64(da),
        Arg::U64(db),
        Arg::U64(dc),
        Arg::I32((n / 4) as i32),
    ];
    run(&module, "vec_add4", &mut memory, 3, 128, 0, &args).unwrap();
    let c: Vec<f32> = download(&memory, dc, n);
    for i in 0..n {
        assert_eq!(c[i], a[i] + b[i], "element {i}");
    }
}

#[test]
fn block_reduction_in_shared_memory() {
    let Some(module) = module() else { return };
    let n = 5000;
    let x = random_f32(3, n, -1.0, 1.0);
    let mut memory = DeviceMemory::new();
    let dx = upload(&mut memory, &x);
    let blocks = 4;
    let dout = memory.alloc(blocks * 4).unwrap();
    run(
        &module,
        "block_sum",
        &mut memory,
        blocks as u32,
        256,
        0,
        &[Arg::U64(dx), Arg::U64(dout), Arg::I32(n as i32)],
    )
    .unwrap();
    let out: Vec<f32> = download(&memory, dout, blocks);
    // The same order of additions as the kernel, in f32: the result must match exactly.
    for (block, &got) in out.iter().enumerate() {
        let mut s = [0f32; 256];
        for (t, slot) in s.iter_mut().enumerate() {
            let mut i = block * 256 + t;
            while i < n {
                *slot += x[i];
                i += blocks * 256;
            }
        }
        let mut stride = 128;
        while stride > 0 {
            for t in 0..stride {
                s[t] += s[t + stride];
            }
            stride /= 2;
        }
        assert_eq!(got, s[0], "block {block}");
    }
}

#[test]
fn dynamic_shared_memory_follows_static() {
    let Some(module) = module() else { return };
    let (blocks, threads) = (3usize, 64usize);
    let x = random_f32(4, blocks * threads, -5.0, 5.0);
    let mut memory = DeviceMemory::new();
    let dx = upload(&mut memory, &x);
    let dy = memory.alloc(x.len() * 4).unwrap();
    run(
        &module,
        "reverse_dynamic",
        &mut memory,
        blocks as u32,
        threads as u32,
        (threads * 4) as u32,
        &[Arg::U64(dx), Arg::U64(dy)],
    )
    .unwrap();
    let y: Vec<f32> = download(&memory, dy, x.len());
    for b in 0..blocks {
        for t in 0..threads {
            assert_eq!(
                y[b * threads + t],
                x[b * threads + threads - 1 - t] + (t % 3) as f32,
                "block {b} thread {t}"
            );
        }
    }
}

#[test]
fn warp_shuffles_in_every_mode() {
    let Some(module) = module() else { return };
    let (blocks, threads) = (2usize, 96usize);
    let x = random_f32(5, blocks * threads, -100.0, 100.0);
    let mut memory = DeviceMemory::new();
    let dx = upload(&mut memory, &x);
    let dout = memory.alloc(x.len() * 7 * 4).unwrap();
    run(
        &module,
        "shuffles",
        &mut memory,
        blocks as u32,
        threads as u32,
        0,
        &[Arg::U64(dx), Arg::U64(dout)],
    )
    .unwrap();
    let out: Vec<f32> = download(&memory, dout, x.len() * 7);
    for i in 0..x.len() {
        let t = i % threads;
        let lane = t % 32;
        let warp_base = i - lane;
        let at = |l: usize| x[warp_base + l];
        let expected = [
            at(lane ^ 5),
            if lane + 3 < 32 {
                at(lane + 3)
            } else {
                at(lane)
            },
            if lane >= 7 { at(lane - 7) } else { at(lane) },
            at((t * 7) % 32),
            at((lane & !7) | 3),
            if lane % 16 + 2 < 16 {
                at(lane + 2)
            } else {
                at(lane)
            },
            if lane % 8 >= 2 {
                at(lane - 2)
            } else {
                at(lane)
            },
        ];
        assert_eq!(
            out[7 * i..7 * i + 7],
            expected,
            "thread {t} of block {}",
            i / threads
        );
    }
}

#[test]
fn f16_and_bf16_conversions_round_like_the_half_crate() {
    let Some(module) = module() else { return };
    let n = 2000;
    let mut r = rng(6);
    // Wide magnitudes (subnormal halves, overflow to infinity) and exact ties.
    let mut x: Vec<f32> = (0..n)
        .map(|_| r.gen_range(-1.0f32..1.0) * 2f32.powi(r.gen_range(-26..18)))
        .collect();
    x.extend([
        0.0,
        -0.0,
        65504.0,
        65520.0,
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        f32::INFINITY,
        f32::NAN,
    ]);
    let n = x.len();
    let mut memory = DeviceMemory::new();
    let dx = upload(&mut memory, &x);
    let (dh, db, dback) = (
        memory.alloc(n * 2).unwrap(),
        memory.alloc(n * 2).unwrap(),
        memory.alloc(n * 8).unwrap(),
    );
    let args = [
        Arg::U64(dx),
        Arg::U64(dh),
        Arg::U64(db),
        Arg::U64(dback),
        Arg::I32(n as i32),
    ];
    run(
        &module,
        "halves",
        &mut memory,
        n.div_ceil(128) as u32,
        128,
        0,
        &args,
    )
    .unwrap();
    let h: Vec<u16> = download(&memory, dh, n);
    let b: Vec<u16> = download(&memory, db, n);
    let back: Vec<f32> = download(&memory, dback, 2 * n);
    for i in 0..n {
        let eh = half::f16::from_f32(x[i]);
        let eb = half::bf16::from_f32(x[i]);
        if x[i].is_nan() {
            assert!(
                eh.is_nan()
                    && half::f16::from_bits(h[i]).is_nan()
                    && half::bf16::from_bits(b[i]).is_nan()
            );
            continue;
        }
        assert_eq!(h[i], eh.to_bits(), "f16 of {:e}", x[i]);
        assert_eq!(b[i], eb.to_bits(), "bf16 of {:e}", x[i]);
        assert_eq!(back[2 * i], eh.to_f32(), "f16 back of {:e}", x[i]);
        assert_eq!(back[2 * i + 1], eb.to_f32(), "bf16 back of {:e}", x[i]);
    }
}

#[test]
fn expf_rsqrtf_erff_tanhf_match_within_a_few_ulp() {
    let Some(module) = module() else { return };
    let n = 3000;
    let x = random_f32(7, n, -3.0, 3.0);
    let mut memory = DeviceMemory::new();
    let dx = upload(&mut memory, &x);
    let dout = memory.alloc(n * 6 * 4).unwrap();
    run(
        &module,
        "math",
        &mut memory,
        n.div_ceil(256) as u32,
        256,
        0,
        &[Arg::U64(dx), Arg::U64(dout), Arg::I32(n as i32)],
    )
    .unwrap();
    let out: Vec<f32> = download(&memory, dout, n * 6);
    // CUDA's documented maximum errors (Programming Guide, "Mathematical Functions"): expf 2 ulp, rsqrtf 2 ulp,
    // erff 2 ulp, tanhf 2 ulp, logf 1 ulp, sqrtf and division correctly rounded. The simulator runs CUDA's own
    // instruction sequences, so its results must stay within those bounds of the exact values (+1 for the
    // reference's final rounding).
    let mut worst = [0u64; 6];
    for i in 0..n {
        let v = f64::from(x[i]);
        let exact = [
            v.exp(),
            1.0 / f64::from(x[i].abs() + 0.25).sqrt(),
            erf_reference(v),
            v.tanh(),
            f64::from(x[i].abs() + 0.001).ln(),
            f64::from((x[i].abs().sqrt()) / (1.0 + x[i].abs())),
        ];
        for k in 0..6 {
            let got = out[6 * i + k];
            let reference = exact[k] as f32;
            let d = if got == 0.0 && reference.abs() < 1e-30 {
                0
            } else {
                ulps(got, reference)
            };
            worst[k] = worst[k].max(d);
        }
    }
    let bounds = [3, 3, 3, 3, 2, 0];
    for k in 0..6 {
        assert!(
            worst[k] <= bounds[k],
            "function {k}: {} ulp off (bound {}), worst over all inputs",
            worst[k],
            bounds[k]
        );
    }
}

#[test]
fn integer_division_remainder_and_64_bit_indexing() {
    let Some(module) = module() else { return };
    let n = 1500usize;
    let mut r = rng(8);
    let a: Vec<i64> = (0..n)
        .map(|_| r.gen_range(-(1i64 << 40)..(1i64 << 40)))
        .collect();
    let b: Vec<i32> = (0..n)
        .map(|_| loop {
            let v = r.gen_range(-100_000..100_000);
            if v != 0 {
                break v;
            }
        })
        .collect();
    let mut memory = DeviceMemory::new();
    let (da, db) = (upload(&mut memory, &a), upload(&mut memory, &b));
    let (dq, dr, du) = (
        memory.alloc(n * 8).unwrap(),
        memory.alloc(n * 4).unwrap(),
        memory.alloc(n * 4).unwrap(),
    );
    let args = [
        Arg::U64(da),
        Arg::U64(db),
        Arg::U64(dq),
        Arg::U64(dr),
        Arg::U64(du),
        Arg::I64(n as i64),
        Arg::I64(1 << 33),
    ];
    run(
        &module,
        "int_ops",
        &mut memory,
        n.div_ceil(128) as u32,
        128,
        0,
        &args,
    )
    .unwrap();
    let q: Vec<i64> = download(&memory, dq, n);
    let rem: Vec<i32> = download(&memory, dr, n);
    let u: Vec<u32> = download(&memory, du, n);
    for i in 0..n {
        assert_eq!(q[i], a[i] / i64::from(b[i]), "q {i}");
        assert_eq!(rem[i], (a[i] as i32).wrapping_rem(b[i]), "r {i}");
        let x = a[i] as u32;
        assert_eq!(
            u[i],
            (x / (b[i] as u32 | 1)) ^ (x % 7) ^ (x >> (i & 31)),
            "u {i}"
        );
    }
}

/// `x` (exact in f64) rounded to f32 toward -inf, +inf or zero: the neighbouring f32 on the right side of the
/// nearest one.
fn directed(x: f64, mode: char) -> f32 {
    let r = x as f32;
    let below = f64::from(r) > x;
    let above = f64::from(r) < x;
    match mode {
        'm' if below => r.next_down(),
        'p' if above => r.next_up(),
        'z' if r > 0.0 && below => r.next_down(),
        'z' if r < 0.0 && above => r.next_up(),
        _ => r,
    }
}

#[test]
fn rounding_modes_of_fma_add_mul_and_cvt() {
    let Some(module) = module() else { return };
    let n = 2000;
    let mut r = rng(9);
    // 24-bit significands in [1, 2) and [-2, -1): a·b + c and a + c are exact in f64, so the reference rounds once.
    let mut sig = || {
        let v = 1.0 + f64::from(r.gen_range(0u32..1 << 23)) / f64::from(1u32 << 23);
        (if r.gen_bool(0.5) { -v } else { v }) as f32
    };
    let (a, b, c): (Vec<f32>, Vec<f32>, Vec<f32>) = (0..n).map(|_| (sig(), sig(), sig())).fold(
        (Vec::new(), Vec::new(), Vec::new()),
        |(mut a, mut b, mut c), (x, y, z)| {
            a.push(x);
            b.push(y);
            c.push(z);
            (a, b, c)
        },
    );
    let mut memory = DeviceMemory::new();
    let (da, db, dc) = (
        upload(&mut memory, &a),
        upload(&mut memory, &b),
        upload(&mut memory, &c),
    );
    let (dout, dints) = (
        memory.alloc(n * 12 * 4).unwrap(),
        memory.alloc(n * 4 * 4).unwrap(),
    );
    let args = [
        Arg::U64(da),
        Arg::U64(db),
        Arg::U64(dc),
        Arg::U64(dout),
        Arg::U64(dints),
        Arg::I32(n as i32),
    ];
    run(
        &module,
        "rounding",
        &mut memory,
        n.div_ceil(128) as u32,
        128,
        0,
        &args,
    )
    .unwrap();
    let out: Vec<f32> = download(&memory, dout, n * 12);
    let ints: Vec<i32> = download(&memory, dints, n * 4);
    let mut inexact = 0;
    for i in 0..n {
        let (x, y, z) = (f64::from(a[i]), f64::from(b[i]), f64::from(c[i]));
        let (fma, add, mul) = (x * y + z, x + z, x * y);
        inexact += usize::from(f64::from(fma as f32) != fma);
        let s = a[i] * 100.0;
        let expected = [
            fma as f32,
            directed(fma, 'z'),
            directed(fma, 'm'),
            directed(fma, 'p'),
            directed(add, 'z'),
            directed(add, 'm'),
            directed(add, 'p'),
            directed(mul, 'z'),
            directed(mul, 'm'),
            directed(mul, 'p'),
            s.round_ties_even(),
            s.trunc(),
        ];
        assert_eq!(
            out[12 * i..12 * i + 12],
            expected,
            "inputs {x:e} {y:e} {z:e}"
        );
        let expected_ints = [
            s.round_ties_even() as i32,
            s.trunc() as i32,
            s.floor() as i32,
            s.ceil() as i32,
        ];
        assert_eq!(ints[4 * i..4 * i + 4], expected_ints, "cvt of {s:e}");
    }
    // The inputs exercise rounding: almost every fma result is inexact in f32.
    assert!(inexact > n * 9 / 10, "{inexact} of {n} inexact");
}

#[test]
fn atomics_on_shared_and_global_memory() {
    let Some(module) = module() else { return };
    let n = 3000usize;
    let mut r = rng(10);
    let x: Vec<i32> = (0..n).map(|_| r.gen_range(0..1_000_000)).collect();
    let mut memory = DeviceMemory::new();
    let dx = upload(&mut memory, &x);
    let dcounts = upload(&mut memory, &[0i32; 17]);
    let dsum = upload(&mut memory, &[0f32]);
    let dfirst = upload(&mut memory, &[-1i32; 16]);
    let args = [
        Arg::U64(dx),
        Arg::U64(dcounts),
        Arg::U64(dsum),
        Arg::U64(dfirst),
        Arg::I32(n as i32),
    ];
    run(&module, "histogram", &mut memory, 3, 128, 0, &args).unwrap();
    let counts: Vec<i32> = download(&memory, dcounts, 17);
    let sum: Vec<f32> = download(&memory, dsum, 1);
    let first: Vec<i32> = download(&memory, dfirst, 16);
    let mut expected = [0i32; 16];
    for &v in &x {
        expected[(v & 15) as usize] += 1;
    }
    assert_eq!(counts[..16], expected);
    assert_eq!(counts[16], *x.iter().max().unwrap());
    // Small integers: the f32 sum is exact in any order.
    assert_eq!(sum[0], x.iter().map(|&v| (v & 15) as f32).sum::<f32>());
    // Each bin's claim holds an index of an element of that bin (which one depends on the order of threads).
    for (bin, &i) in first.iter().enumerate() {
        assert!(
            i >= 0 && (x[i as usize] & 15) as usize == bin,
            "bin {bin} claimed by {i}"
        );
    }
}
