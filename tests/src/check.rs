//! The per-model check every parity test uses: fused == eager == the f64 reference, within stated tolerances. It
//! is the drift check (`crate::drift`) with its verdict asserted.

use fuse_runtime::{CompiledModel, Session, Tensor};

use crate::drift::{self, Tolerance};

/// Runs both plans of `model` on `inputs` and compares each output with the reference; a failure prints the
/// whole drift report.
#[track_caller]
pub fn check_model(what: &str, model: &CompiledModel, inputs: &[&Tensor], atol: f64, rtol: f64) {
    check_inner(what, model, None, inputs, atol, rtol);
}

/// [`check_model`] for a model with state: both plans start from `session`'s states (each on its own copy), and
/// the states they leave are checked against the reference's like outputs (numbered after the model's outputs).
#[track_caller]
pub fn check_stateful(
    what: &str,
    model: &CompiledModel,
    session: &mut Session,
    inputs: &[&Tensor],
    atol: f64,
    rtol: f64,
) {
    check_inner(what, model, Some(session), inputs, atol, rtol);
}

#[track_caller]
fn check_inner(
    what: &str,
    model: &CompiledModel,
    session: Option<&mut Session>,
    inputs: &[&Tensor],
    atol: f64,
    rtol: f64,
) {
    let report = drift::check_with_session(model, session, inputs, Tolerance { atol, rtol })
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
