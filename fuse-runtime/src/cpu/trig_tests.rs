//! Sweeps of `sin` and `cos` against f64 `sin`/`cos` of the same f32 input (the platform's f64 functions reduce
//! exactly over the whole range, so they are an independent reference for the large-argument reduction too).

use super::*;

/// Max absolute error of `f` against `reference` over `xs`, with the worst input.
fn worst(
    xs: impl Iterator<Item = f32>,
    f: fn(f32) -> f32,
    reference: fn(f64) -> f64,
) -> (f64, f32) {
    let mut w = (0.0f64, 0.0f32);
    for x in xs {
        let (got, want) = (f64::from(f(x)), reference(f64::from(x)));
        let e = (got - want).abs();
        assert!(!e.is_nan(), "x = {x:e}: got {got:e}, want {want:e}");
        if e > w.0 {
            w = (e, x);
        }
    }
    w
}

/// About `n` values of each sign spread evenly by bit pattern over [0, hi]: every binade gets the same share.
fn by_bits(hi: f32, n: u32) -> impl Iterator<Item = f32> {
    let step = (hi.to_bits() / n).max(1);
    (0..=hi.to_bits())
        .step_by(step as usize)
        .map(f32::from_bits)
        .flat_map(|x| [x, -x])
}

/// `n` points evenly spaced in [-hi, hi].
fn linear(hi: f32, n: usize) -> impl Iterator<Item = f32> {
    (0..n).map(move |i| (-f64::from(hi) + 2.0 * f64::from(hi) * i as f64 / (n - 1) as f64) as f32)
}

fn check(name: &str, (e, x): (f64, f32), bound: f64) {
    eprintln!("{name}: max error {e:.3e} at x = {x:e}");
    assert!(
        e <= bound,
        "{name}: error {e:e} at x = {x:e} exceeds {bound:e}"
    );
}

/// A function under test, its name and its f64 reference.
type Case = (&'static str, fn(f32) -> f32, fn(f64) -> f64);

const FUNCTIONS: [Case; 2] = [("sin", sin, f64::sin), ("cos", cos, f64::cos)];

#[test]
fn sin_and_cos_are_accurate_near_zero_and_at_rotary_angles() {
    // Dense where models use them: a few periods, and rotary angles up to 2¹⁷ positions.
    for (name, f, reference) in FUNCTIONS {
        for hi in [10.0, 131_072.0] {
            let what = format!("{name} [-{hi}, {hi}]");
            check(&what, worst(linear(hi, 1_000_000), f, reference), 1e-7);
        }
    }
}

#[test]
fn sin_and_cos_are_accurate_over_all_finite_floats() {
    // 4000 consecutive floats either side of the switch between the two reductions, and around 10⁶ and 10³⁰.
    let edges: Vec<f32> = (-2000..2000)
        .flat_map(|k| {
            [SMALL.to_bits(), 1e6f32.to_bits(), 1e30f32.to_bits()]
                .map(|b| f32::from_bits((b as i32 + k) as u32))
        })
        .collect();
    for (name, f, reference) in FUNCTIONS {
        let all = worst(by_bits(f32::MAX, 1_000_000), f, reference);
        check(&format!("{name}, all finite"), all, 1e-7);
        let at_edges = worst(edges.iter().copied(), f, reference);
        check(&format!("{name} at the edges"), at_edges, 1e-7);
    }
}

#[test]
fn special_values() {
    assert_eq!(sin(0.0).to_bits(), 0.0f32.to_bits());
    assert_eq!(sin(-0.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(cos(0.0), 1.0);
    assert_eq!(cos(-0.0), 1.0);
    for x in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
        assert!(sin(x).is_nan() && cos(x).is_nan(), "{x}");
    }
}
