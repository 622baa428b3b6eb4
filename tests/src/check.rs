//! The per-model check every parity test uses: fused == eager == the f64 reference, within stated tolerances. It
//! is the drift check (`crate::drift`) with its verdict asserted.

use fuse_runtime::{CompiledModel, Tensor};

use crate::drift::{self, Tolerance};

/// Runs both plans of `model` on `inputs` and compares each output with the reference; a failure prints the
/// whole drift report.
#[track_caller]
pub fn check_model(what: &str, model: &CompiledModel, inputs: &[&Tensor], atol: f64, rtol: f64) {
    let report = drift::check(model, inputs, Tolerance { atol, rtol })
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    for (i, o) in report.outputs.iter().enumerate() {
        for (mode, stats) in [("Fused", &o.fused), ("Eager", &o.eager)] {
            assert!(
                stats.within(),
                "{what} {mode} output {i}: error {:.3}× the tolerance (atol {atol:e}, rtol {rtol:e})\n{report}",
                stats.ratio
            );
        }
    }
}
