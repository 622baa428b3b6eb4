//! How far one tensor is from another: absolute, relative and ULP error, and where the worst element is. The
//! tests' tolerance checks (`harness::error_ratio`) and the drift report both measure with [`compare`].

/// A tolerance: element `got` is close to `want` when `|got − want| ≤ atol + rtol·|want|`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub atol: f64,
    pub rtol: f64,
}

impl Default for Tolerance {
    /// What the example models' tests hold their f32 plans to against the f64 reference.
    fn default() -> Self {
        Tolerance {
            atol: 1e-4,
            rtol: 1e-4,
        }
    }
}

/// Errors of `got` against `want` over every element.
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorStats {
    /// Largest `|got − want|`.
    pub max_abs: f64,
    /// Largest `|got − want| / max(|want|, atol)`: relative error, floored where `want` is about zero.
    pub max_rel: f64,
    /// Median and largest distance in units in the last place, between `got` and `want` rounded to f32, over the
    /// elements with `|want| ≥ atol` (and every NaN). Below that, ULPs measure nothing: a sum that cancels to
    /// 1e-9 where the reference has 1e-12 is millions of ULPs off and well within any useful tolerance, and those
    /// elements would set the maximum of every tensor that crosses zero. Such elements are still in `max_abs`
    /// and `ratio`.
    pub ulp_median: u64,
    pub ulp_max: u64,
    /// Largest `|got − want| / (atol + rtol·|want|)`: at most 1 means within tolerance (a NaN or infinity
    /// counts as infinite, unless `want` has the same there: NaN and ±∞ pass on as in PyTorch).
    pub ratio: f64,
    /// The element with the largest ratio: its index in each axis, and both values.
    pub worst_at: Vec<usize>,
    pub worst_got: f64,
    pub worst_want: f64,
}

impl ErrorStats {
    pub fn within(&self) -> bool {
        self.ratio <= 1.0
    }
}

/// Measures `got` against `want`, both row-major over `shape`. Panics if their lengths differ from the shape's.
pub fn compare(
    got: impl IntoIterator<Item = f64>,
    want: &[f64],
    shape: &[usize],
    tol: Tolerance,
) -> ErrorStats {
    let mut stats = ErrorStats {
        max_abs: 0.0,
        max_rel: 0.0,
        ulp_median: 0,
        ulp_max: 0,
        ratio: 0.0,
        worst_at: vec![0; shape.len()],
        worst_got: want.first().copied().unwrap_or(0.0),
        worst_want: want.first().copied().unwrap_or(0.0),
    };
    let mut ulps: Vec<u64> = Vec::with_capacity(want.len());
    let mut worst = 0;
    let mut count = 0;
    for (i, (g, &w)) in got.into_iter().zip(want).enumerate() {
        count += 1;
        // The same NaN or infinity on both sides (`inf - inf` would be NaN) is no error.
        let same = g == w || (g.is_nan() && w.is_nan());
        let err = if same { 0.0 } else { (g - w).abs() };
        // Against an infinite `want`, the bound is NaN or ∞ and the quotient NaN: infinitely far unless the same.
        let ratio = match err / (tol.atol + tol.rtol * w.abs()) {
            _ if same => 0.0,
            r if r.is_nan() => f64::INFINITY,
            r => r,
        };
        stats.max_abs = stats
            .max_abs
            .max(if err.is_nan() { f64::INFINITY } else { err });
        stats.max_rel = stats.max_rel.max(err / w.abs().max(tol.atol));
        // The same NaN or infinity on both sides is no distance either (`ulp_distance` has NaN infinitely far).
        if (!same || w.is_finite()) && (w.abs() >= tol.atol || g.is_nan() || w.is_nan()) {
            ulps.push(ulp_distance(g as f32, w as f32));
        }
        if i == 0 || ratio > stats.ratio {
            stats.ratio = ratio;
            worst = i;
            stats.worst_got = g;
            stats.worst_want = w;
        }
    }
    assert_eq!(count, want.len(), "compare: got and want differ in length");
    assert_eq!(
        count,
        shape.iter().product::<usize>(),
        "compare: values do not fill shape {shape:?}"
    );
    stats.worst_at = unravel(worst, shape);
    if !ulps.is_empty() {
        let mid = ulps.len() / 2;
        stats.ulp_median = *ulps.select_nth_unstable(mid).1;
        stats.ulp_max = ulps.iter().copied().max().unwrap_or(0);
    }
    stats
}

/// Floats apart, counting every representable f32 between them (+0 and −0 are one value; NaN is infinitely far).
pub fn ulp_distance(a: f32, b: f32) -> u64 {
    if a.is_nan() || b.is_nan() {
        return u64::MAX;
    }
    // Map the bit patterns onto a line where consecutive floats are consecutive integers.
    let ordered = |x: f32| {
        let bits = x.to_bits() as i32;
        if bits < 0 {
            i64::from(i32::MIN) - i64::from(bits)
        } else {
            i64::from(bits)
        }
    };
    ordered(a).abs_diff(ordered(b))
}

/// The multi-index of row-major element `flat` in `shape`.
pub fn unravel(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    let mut index = vec![0; shape.len()];
    for (axis, &n) in shape.iter().enumerate().rev() {
        if n > 0 {
            index[axis] = flat % n;
            flat /= n;
        }
    }
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulps_count_representable_floats() {
        assert_eq!(ulp_distance(1.0, 1.0), 0);
        assert_eq!(ulp_distance(1.0, f32::from_bits(1.0f32.to_bits() + 3)), 3);
        assert_eq!(ulp_distance(0.0, -0.0), 0);
        assert_eq!(ulp_distance(-f32::from_bits(1), f32::from_bits(1)), 2);
        assert_eq!(ulp_distance(f32::NAN, 1.0), u64::MAX);
    }

    #[test]
    fn finds_the_worst_element_and_its_index() {
        let want = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let got = [1.0, 2.0, 3.0, 4.0, 5.5, 6.0];
        let tol = Tolerance {
            atol: 1e-3,
            rtol: 0.0,
        };
        let s = compare(got, &want, &[2, 3], tol);
        assert_eq!(s.worst_at, vec![1, 1]);
        assert_eq!((s.worst_got, s.worst_want), (5.5, 5.0));
        assert!((s.max_abs - 0.5).abs() < 1e-12 && (s.max_rel - 0.1).abs() < 1e-12);
        assert!(!s.within() && (s.ratio - 500.0).abs() < 1e-9);
        assert_eq!(s.ulp_median, 0);
        assert_eq!(s.ulp_max, ulp_distance(5.5, 5.0));
        assert!(compare(want, &want, &[6], tol).within());
        assert!(!compare([f64::NAN], &[1.0], &[1], tol).within());
        // The same NaN or infinity on both sides is no error; a NaN or infinity on one side only is.
        let special = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1.0];
        let same = compare(special, &special, &[4], tol);
        assert!(same.within() && same.ulp_max == 0);
        assert!(!compare([f64::INFINITY], &[f64::NEG_INFINITY], &[1], tol).within());
        assert!(!compare([1.0], &[f64::NAN], &[1], tol).within());
    }

    #[test]
    fn ulps_leave_out_values_below_atol_but_not_nan() {
        let tol = Tolerance {
            atol: 1e-6,
            rtol: 1e-4,
        };
        // 1e-9 against 1e-12 is far apart in ULPs and within tolerance; 1.0 one ULP off sets the maximum.
        let one_up = f64::from(f32::from_bits(1.0f32.to_bits() + 1));
        let s = compare([1e-9, one_up], &[1e-12, 1.0], &[2], tol);
        assert!(s.within());
        assert_eq!(s.ulp_max, 1);
        let s = compare([f64::NAN, 1.0], &[1e-12, 1.0], &[2], tol);
        assert_eq!(s.ulp_max, u64::MAX);
    }
}
