//! The per-model check every parity test uses: fused == eager == the f64 reference, within stated tolerances.

use fuse_runtime::{CompiledModel, PlanMode, Tensor};

use crate::harness::{assert_close, reference};

/// Runs both plans of `model` on `inputs` and compares each output with the reference.
#[track_caller]
pub fn check_model(what: &str, model: &CompiledModel, inputs: &[&Tensor], atol: f64, rtol: f64) {
    let want = reference(model.spec(), model.weights(), inputs);
    for mode in [PlanMode::Fused, PlanMode::Eager] {
        let got = model
            .run(mode, inputs)
            .unwrap_or_else(|e| panic!("{what} {mode:?}: {e}"));
        assert_eq!(got.len(), want.len(), "{what}: output count");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_close(&format!("{what} {mode:?} output {i}"), g, w, atol, rtol);
        }
    }
}
