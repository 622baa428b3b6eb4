//! The drift check locates a kernel that computes wrong numbers: each kernel of the encoder's fused plan in
//! turn is made to write a wrong value (a hand-made copy of the plan, the same kernels but for that one), and
//! the check must name that kernel as the first where the fused plan parts from the eager one.

use std::sync::Mutex;

use fuse_examples::models::{encoder::encoder::EncoderLayer, mlp::mlp::Mlp};
use fuse_runtime::exec::{Ctx, EmbeddedProgram, KernelFn};
use fuse_runtime::{CompiledModel, ModelSpec};
use fuse_tests::drift::{self, DriftError, Tolerance};

/// The kernel function the perturbed call wraps (one perturbed model exists at a time: the test that uses it
/// builds them one after another).
static WRAPPED: Mutex<Option<KernelFn>> = Mutex::new(None);

/// Runs the wrapped kernel, then spoils one element of its output: by 0.5 plus 1%, so it is far outside the
/// tolerance whatever the value's size (the encoder's mask bias is in the thousands).
fn spoiled(ctx: &Ctx<'_>, buffers: &[usize]) {
    let wrapped = WRAPPED
        .lock()
        .map(|f| *f)
        .unwrap_or_else(|e| *e.into_inner());
    if let Some(run) = wrapped {
        run(ctx, buffers);
    }
    if let Some(&out) = buffers.first() {
        if let Some(v) = ctx.out_f32(out).get_mut(3) {
            *v += 0.5 + 0.01 * v.abs();
        }
    }
}

/// `spec` with kernel `k` of its fused program spoiled; everything else (buffers, plan hash) is the model's own.
/// Kernel `k` gets a function of its own (the others keep sharing theirs) that runs its own and spoils the result.
fn spoiled_spec(spec: &'static ModelSpec, k: usize) -> &'static ModelSpec {
    let fused = spec.fused.decode().expect("the plan decodes");
    let mut tables = fused.tables.clone();
    let mut functions = fused.functions.to_vec();
    *WRAPPED.lock().unwrap_or_else(|e| e.into_inner()) =
        Some(functions[tables.kernels[k].function]);
    tables.kernels[k].function = functions.len();
    functions.push(spoiled);
    let program: &'static EmbeddedProgram = Box::leak(Box::new(EmbeddedProgram::new(
        fused.model,
        fused.mode,
        fused.plan_hash,
        Box::leak(functions.into_boxed_slice()),
        Box::leak(fuse_tables::encode(&tables).into_boxed_str()),
        fused.dump,
        fused.dot,
    )));
    Box::leak(Box::new(ModelSpec {
        fused: program,
        cuda: None,
        ..*spec
    }))
}

#[test]
fn a_spoiled_kernel_is_the_first_divergence() {
    let model = EncoderLayer::random(5);
    let inputs = drift::random_inputs(EncoderLayer::spec(), &[("batch", 2), ("seq", 9)], 3)
        .expect("random inputs");
    let refs: Vec<_> = inputs.iter().collect();
    let tol = Tolerance::default();

    let clean = drift::check(model.compiled(), &refs, tol).expect("drift check runs");
    assert!(clean.within_reference(), "{clean}");
    assert!(clean.plans_agree(), "{clean}");
    let kernels = &EncoderLayer::spec()
        .fused
        .decode()
        .expect("the plan decodes")
        .kernel_info;
    assert_eq!(
        clean.kernels_compared + clean.not_compared.len(),
        kernels.len()
    );
    assert!(clean.kernels_compared >= kernels.len() - 1, "{clean}");

    for (k, info) in kernels.iter().enumerate() {
        let spec = spoiled_spec(EncoderLayer::spec(), k);
        let spoiled =
            CompiledModel::from_weights(spec, model.weights().expect("f32 weights").to_vec())
                .expect("the spoiled model takes the same weights");
        let report = drift::check(&spoiled, &refs, tol).expect("drift check runs");
        assert!(!report.plans_agree(), "kernel {k} spoiled:\n{report}");
        let found = report
            .first_divergence
            .as_ref()
            .unwrap_or_else(|| panic!("kernel {k} spoiled, no divergence found:\n{report}"));
        if report.not_compared.contains(&info.name) {
            // A copy the eager plan does not make shows up in the first kernel that reads it.
            assert!(found.index > k, "kernel {k} spoiled:\n{report}");
        } else {
            assert_eq!(found.index, k, "kernel {k} spoiled:\n{report}");
            assert_eq!(found.name, info.name);
            assert!(
                found.stats.max_abs >= 0.5 && found.stats.ratio > 100.0,
                "{report}"
            );
        }
    }
}

#[test]
fn the_report_measures_both_plans_against_the_reference() {
    let model = Mlp::random(2);
    let report = drift::check_random(model.compiled(), &[("batch", 3)], 9, Tolerance::default())
        .expect("drift check runs");
    let text = report.to_string();
    assert!(text.contains("drift of `Mlp` at batch = 3"), "{text}");
    let out = &report.outputs[0];
    assert_eq!(out.shape, vec![3, 1024]);
    // Real f32 arithmetic against f64: some error, within tolerance, and a few ULPs typical.
    assert!(out.fused.max_abs > 0.0 && out.fused.within(), "{text}");
    assert!(
        out.eager.ulp_median < 64 && out.fused.ulp_max >= out.fused.ulp_median,
        "{text}"
    );
    assert_eq!(report.kernels_compared, 3, "{text}");

    // A tolerance no f32 plan meets is reported as missed, not passed.
    let strict = Tolerance {
        atol: 0.0,
        rtol: 1e-12,
    };
    let strict = drift::check_random(model.compiled(), &[("batch", 3)], 9, strict).expect("runs");
    assert!(!strict.within_reference());
}

#[test]
fn random_inputs_need_every_dynamic_dim() {
    match drift::random_inputs(EncoderLayer::spec(), &[("batch", 2)], 0) {
        Err(DriftError::MissingDim { dim, .. }) => assert_eq!(dim, "seq"),
        other => panic!("expected MissingDim, got {:?}", other.map(|v| v.len())),
    }
}
