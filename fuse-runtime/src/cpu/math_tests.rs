//! Accuracy sweeps of `math` against f64 references (~1e6 points each; the measured maxima are printed with
//! `--nocapture`).

use super::*;

/// `n` points evenly spaced in [lo, hi].
fn linear(lo: f32, hi: f32, n: usize) -> impl Iterator<Item = f32> {
    let step = (f64::from(hi) - f64::from(lo)) / (n - 1) as f64;
    (0..n).map(move |i| (f64::from(lo) + step * i as f64) as f32)
}

/// About `n` f32 values evenly spaced in bit pattern between two non-negative floats, i.e. spread evenly over
/// the binades (every exponent gets the same share).
fn by_bits(lo: f32, hi: f32, n: u32) -> impl Iterator<Item = f32> {
    let (a, b) = (lo.to_bits(), hi.to_bits());
    let step = ((b - a) / n).max(1);
    (a..=b).step_by(step as usize).map(f32::from_bits)
}

/// Both signs of `by_bits(0, f32::MAX)`: a sweep over all finite f32.
fn all_finite(n: u32) -> impl Iterator<Item = f32> {
    by_bits(0.0, f32::MAX, n / 2).flat_map(|x| [x, -x])
}

/// Max over `xs` of `err(got, reference)`, returning the worst input too for the failure message.
fn worst(
    xs: impl Iterator<Item = f32>,
    f: impl Fn(f32) -> f32,
    reference: impl Fn(f64) -> f64,
    err: impl Fn(f64, f64) -> f64,
) -> (f64, f32) {
    let mut w = (0.0f64, 0.0f32);
    for x in xs {
        let got = f64::from(f(x));
        let want = reference(f64::from(x));
        let e = err(got, want);
        assert!(!e.is_nan(), "x = {x:e}: got {got:e}, want {want:e}");
        if e > w.0 {
            w = (e, x);
        }
    }
    w
}

fn abs_err(got: f64, want: f64) -> f64 {
    if got == want {
        0.0
    } else {
        (got - want).abs()
    }
}

fn rel_err(got: f64, want: f64) -> f64 {
    if got == want {
        0.0
    } else {
        (got - want).abs() / want.abs()
    }
}

/// Relative for |want| > 1, absolute below: the right scale for functions that grow like x (GELU, SiLU).
fn mixed_err(got: f64, want: f64) -> f64 {
    abs_err(got, want) / want.abs().max(1.0)
}

/// Error relative to the input's scale, max(1, |x|), over [-12, 12]: GELU's negative tail is a tiny value computed as
/// x · (1 + erf(..)) with 1 + erf cancelling, so its error follows |x|, not the result (the same holds for
/// any f32 GELU without a separate erfc).
fn input_scaled(f: fn(f32) -> f32, reference: fn(f64) -> f64) -> (f64, f32) {
    let mut w = (0.0f64, 0.0f32);
    for x in linear(-12.0, 12.0, 300_000) {
        let e = abs_err(f64::from(f(x)), reference(f64::from(x))) / f64::from(x.abs().max(1.0));
        if e > w.0 {
            w = (e, x);
        }
    }
    w
}

fn check(name: &str, (e, x): (f64, f32), bound: f64) {
    eprintln!("{name}: max error {e:.3e} at x = {x:e}");
    assert!(
        e <= bound,
        "{name}: error {e:e} at x = {x:e} exceeds {bound:e}"
    );
}

fn gelu_ref(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
}

/// A function's plain form and its form with fused multiply-adds (`Fused` runs the library's `fmaf` here, which
/// rounds as `vfmadd` does, so this covers the FMA copies of `par::simd_run` and the softmax's too).
type Forms = [(&'static str, fn(f32) -> f32); 2];

#[test]
fn exp_accuracy() {
    let forms: Forms = [("exp", exp), ("exp fused", exp_in::<Fused>)];
    for (name, f) in forms {
        check(
            name,
            worst(linear(-87.0, 88.0, 1_000_000), f, f64::exp, rel_err),
            4e-7,
        );
        assert_eq!(f(0.0), 1.0);
        assert_eq!(f(f32::NEG_INFINITY), 0.0);
        assert_eq!(f(-200.0), 0.0);
        assert_eq!(f(89.0), f32::INFINITY);
        assert_eq!(f(f32::INFINITY), f32::INFINITY);
        assert!(f(f32::NAN).is_nan());
        // Gradual underflow: exp(-100) ≈ 3.7e-44 is a subnormal, not 0.
        assert!(
            (f64::from(f(-100.0)) - (-100f64).exp()).abs() < 2e-45,
            "{name}"
        );
    }
}

/// `exp_zmm` (the softmax's AVX-512 exp) takes `exp_in::<Fused>`'s values wherever those are normal floats, and
/// its special cases; below the normal range it rounds once, to the subnormal nearest its polynomial's value.
#[cfg(target_arch = "x86_64")]
#[test]
fn exp_zmm_matches_the_fused_form() {
    #[target_feature(enable = "avx512f")]
    fn lanes(xs: &[f32]) -> [f32; 16] {
        use std::arch::x86_64::*;
        let mut out = [0.0; 16];
        // SAFETY: 16 floats each side; the caller checked AVX-512F.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), exp_zmm(_mm512_loadu_ps(xs.as_ptr()))) };
        out
    }
    if !dispatch_avx512() {
        eprintln!("no AVX-512 on this CPU; skipped");
        return;
    }
    let special = [
        f32::NEG_INFINITY,
        f32::INFINITY,
        f32::NAN,
        -f32::MAX,
        -1e7,
        -200.0,
        -100.0,
        0.0,
        88.7,
        89.0,
        1e7,
        f32::MAX,
    ];
    let xs: Vec<f32> = linear(-105.0, 90.0, 1_000_000).chain(special).collect();
    for chunk in xs.chunks(16) {
        let mut padded = [0.0; 16];
        padded[..chunk.len()].copy_from_slice(chunk);
        // SAFETY: dispatch_avx512 confirmed AVX-512F.
        let got = unsafe { lanes(&padded) };
        for (&x, &g) in chunk.iter().zip(&got) {
            let want = exp_in::<Fused>(x);
            if want.is_nan() {
                assert!(g.is_nan(), "x = {x:e}: {g:e}");
            } else if want == 0.0 || want.is_infinite() || want >= f32::MIN_POSITIVE {
                assert_eq!(g.to_bits(), want.to_bits(), "x = {x:e}: {g:e} vs {want:e}");
            } else {
                let exact = f64::from(x).exp();
                // Half a step of the subnormal grid, plus exp's relative error before that rounding.
                let least = 1.401_298_464e-45;
                let ulps = (f64::from(g) - exact).abs() / least;
                assert!(
                    ulps <= 0.5 + 4e-7 * exact / least,
                    "x = {x:e}: {g:e} vs {exact:e}, {ulps} of the least subnormal; fused {want:e}"
                );
            }
        }
    }
}

#[test]
fn log_accuracy() {
    check(
        "log",
        worst(
            by_bits(f32::MIN_POSITIVE, f32::MAX, 1_000_000),
            log,
            f64::ln,
            rel_err,
        ),
        4e-7,
    );
    check(
        "log near 1",
        worst(linear(0.5, 2.0, 200_000), log, f64::ln, rel_err),
        4e-7,
    );
    check(
        "log subnormal",
        worst(
            by_bits(1e-45, f32::MIN_POSITIVE, 10_000),
            log,
            f64::ln,
            rel_err,
        ),
        4e-7,
    );
    assert_eq!(log(1.0), 0.0);
    assert_eq!(log(0.0), f32::NEG_INFINITY);
    assert_eq!(log(f32::INFINITY), f32::INFINITY);
    assert!(log(-1.0).is_nan());
    assert!(log(f32::NAN).is_nan());
}

#[test]
fn tanh_accuracy() {
    let forms: Forms = [("tanh", tanh), ("tanh fused", tanh_in::<Fused>)];
    check_saturating(forms, 10.0, f64::tanh);
}

#[test]
fn erf_accuracy() {
    let forms: Forms = [("erf", erf), ("erf fused", erf_in::<Fused>)];
    check_saturating(forms, 5.0, libm::erf);
}

/// Both forms of an odd function that saturates at ±1 (tanh, erf): within 5e-7 of `reference` over
/// `[-span, span]` and over all of f32, 0 at 0, ±1 at ±∞, NaN at NaN.
fn check_saturating(forms: Forms, span: f32, reference: fn(f64) -> f64) {
    for (name, f) in forms {
        check(
            name,
            worst(linear(-span, span, 500_000), f, reference, abs_err),
            5e-7,
        );
        check(
            &format!("{name}, all f32"),
            worst(all_finite(500_000), f, reference, abs_err),
            5e-7,
        );
        assert_eq!(f(0.0), 0.0);
        assert_eq!(f(f32::INFINITY), 1.0);
        assert_eq!(f(f32::NEG_INFINITY), -1.0);
        assert!(f(f32::NAN).is_nan());
    }
}

#[test]
fn activations_accuracy() {
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    let gelu_tanh_ref = |x: f64| {
        let k = (2.0 / std::f64::consts::PI).sqrt();
        0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
    };
    let plain = [sigmoid, silu, gelu, gelu_tanh];
    let fused = [
        sigmoid_in::<Fused>,
        silu_in::<Fused>,
        gelu_in::<Fused>,
        gelu_tanh_in::<Fused>,
    ];
    for (form, [sigmoid, silu, gelu, gelu_tanh]) in [("", plain), (" fused", fused)] {
        check(
            &format!("sigmoid{form}"),
            worst(linear(-30.0, 30.0, 300_000), sigmoid, sig, abs_err),
            4e-7,
        );
        check(
            &format!("silu{form}"),
            worst(
                linear(-30.0, 30.0, 300_000),
                silu,
                |x| x * sig(x),
                mixed_err,
            ),
            5e-7,
        );
        check(
            &format!("gelu{form} (abs, scaled by max(1, |x|))"),
            input_scaled(gelu, gelu_ref),
            3e-7,
        );
        check(
            &format!("gelu{form}, x >= -3"),
            worst(linear(-3.0, 12.0, 300_000), gelu, gelu_ref, mixed_err),
            5e-7,
        );
        check(
            &format!("gelu_tanh{form} (abs, scaled by max(1, |x|))"),
            input_scaled(gelu_tanh, gelu_tanh_ref),
            3e-7,
        );
        for f in [sigmoid, silu, gelu, gelu_tanh] {
            assert!(f(f32::NAN).is_nan());
        }
        for f in [silu, gelu, gelu_tanh] {
            assert_eq!(f(0.0), 0.0);
        }
        assert_eq!(sigmoid(0.0), 0.5);
        assert_eq!(sigmoid(f32::INFINITY), 1.0);
        assert_eq!(sigmoid(f32::NEG_INFINITY), 0.0);
        assert_eq!(gelu(-20.0), 0.0);
        assert_eq!(gelu(20.0), 20.0);
    }
    check(
        "rsqrt",
        worst(
            by_bits(f32::MIN_POSITIVE, f32::MAX, 100_000),
            rsqrt,
            |x| 1.0 / x.sqrt(),
            rel_err,
        ),
        2.5e-7,
    );
}

/// A loop compiled with AVX2/FMA enabled must compute what the baseline build computes (no contraction into
/// FMA happens without explicit `mul_add`, so this is exact in practice; 2e-7 allows for a different LLVM).
#[cfg(target_arch = "x86_64")]
#[test]
fn target_feature_copy_matches_baseline() {
    #[target_feature(enable = "avx2,fma")]
    fn gelu_avx2(xs: &[f32], out: &mut [f32]) {
        for (o, &x) in out.iter_mut().zip(xs) {
            *o = gelu(x);
        }
    }
    if !dispatch_avx2() {
        eprintln!("no AVX2 on this CPU; skipped");
        return;
    }
    let xs: Vec<f32> = linear(-8.0, 8.0, 100_003).collect();
    let base: Vec<f32> = xs.iter().map(|&x| gelu(x)).collect();
    let mut fast = vec![0.0; xs.len()];
    // SAFETY: dispatch_avx2 confirmed AVX2 and FMA.
    unsafe { gelu_avx2(&xs, &mut fast) };
    for ((&x, &a), &b) in xs.iter().zip(&base).zip(&fast) {
        assert!((a - b).abs() <= 2e-7, "x = {x}: {a} vs {b}");
    }
    assert!(!dispatch_avx512() || dispatch_avx2());
}

/// `relu`, `maximum` and `minimum` are NaN where an operand is (`f32::max` returns the other operand), and the
/// plain functions elsewhere.
#[test]
fn relu_maximum_and_minimum_keep_nan() {
    let special = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 0.5, -2.0];
    let agrees = |got: f32, nan: bool, plain: f32| if nan { got.is_nan() } else { got == plain };
    for x in special {
        assert!(agrees(relu(x), x.is_nan(), x.max(0.0)), "relu({x})");
        for y in special {
            let nan = x.is_nan() || y.is_nan();
            assert!(agrees(maximum(x, y), nan, x.max(y)), "maximum({x}, {y})");
            assert!(agrees(minimum(x, y), nan, x.min(y)), "minimum({x}, {y})");
        }
    }
}
