//! Glue between compiled models and the reference: re-capture a model's graph from its embedded source, run the
//! f64 interpreter on the same weights and inputs, and compare with stated tolerances.

use fuse_kernels::front::capture_str;
use fuse_kernels::ir::Graph;
use fuse_runtime::{ModelSpec, Tensor};

use crate::reference::{interpret, RefTensor};

/// The graph of `spec`'s model, captured again from its source by the compiler's front end.
pub fn graph_of(spec: &ModelSpec) -> Graph {
    let cap = capture_str(spec.source).expect("embedded model source parses");
    assert!(cap.errors.is_none(), "embedded model source captures");
    cap.models
        .into_iter()
        .find(|m| m.name == spec.name)
        .expect("model present in its own source")
        .graph
}

pub fn to_ref(t: &Tensor) -> RefTensor {
    let data = match t.as_i64() {
        Some(ids) => ids.iter().map(|&i| i as f64).collect(),
        None => t.to_f32_vec().into_iter().map(f64::from).collect(),
    };
    RefTensor::new(t.shape().to_vec(), data)
}

/// Reference outputs for a model's weights and inputs.
pub fn reference(spec: &ModelSpec, weights: &[Tensor], inputs: &[&Tensor]) -> Vec<RefTensor> {
    let g = graph_of(spec);
    let inputs: Vec<RefTensor> = inputs.iter().map(|t| to_ref(t)).collect();
    let params: Vec<RefTensor> = weights.iter().map(to_ref).collect();
    interpret(&g, &inputs, &params).expect("reference interpreter runs")
}

/// Largest `|got - want| / (atol + rtol·|want|)`; ≤ 1 means within tolerance.
pub fn error_ratio(got: &Tensor, want: &RefTensor, atol: f64, rtol: f64) -> f64 {
    assert_eq!(got.shape(), want.shape.as_slice(), "output shape");
    got.to_f32_vec()
        .iter()
        .zip(&want.data)
        .map(|(&g, &w)| {
            let err = (f64::from(g) - w).abs();
            if err.is_nan() {
                f64::INFINITY
            } else {
                err / (atol + rtol * w.abs())
            }
        })
        .fold(0.0, f64::max)
}

/// Asserts every element is within `atol + rtol·|want|`, naming the worst one.
#[track_caller]
pub fn assert_close(what: &str, got: &Tensor, want: &RefTensor, atol: f64, rtol: f64) {
    let ratio = error_ratio(got, want, atol, rtol);
    assert!(
        ratio <= 1.0,
        "{what}: error {ratio:.3}× the tolerance (atol {atol:e}, rtol {rtol:e})"
    );
}
