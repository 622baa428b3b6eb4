//! Glue between compiled models and the reference: re-capture a model's graph from its embedded source, run the
//! f64 interpreter on the same weights and inputs, and compare with stated tolerances. The drift check
//! (`crate::drift`) runs on the same functions; the panicking forms here are for tests.

use fuse_kernels::front::capture_str;
use fuse_kernels::ir::Graph;
use fuse_runtime::{ModelSpec, Tensor};

use crate::drift::{compare, Tolerance};
use crate::reference::{interpret, Arithmetic, RefError, RefTensor};

/// Why a model's reference could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum ReferenceError {
    #[error("the embedded source of `{model}` does not capture: {message}")]
    Capture { model: String, message: String },
    #[error("the reference interpreter failed on `{model}`: {source}")]
    Interpret {
        model: String,
        #[source]
        source: Box<RefError>,
    },
}

/// The graph of `spec`'s model, captured again from its source by the compiler's front end.
pub fn try_graph_of(spec: &ModelSpec) -> Result<Graph, ReferenceError> {
    let fail = |message: String| ReferenceError::Capture {
        model: spec.name.to_string(),
        message,
    };
    let cap = capture_str(spec.source).map_err(|e| fail(e.to_string()))?;
    if let Some(errors) = cap.errors {
        return Err(fail(errors.to_string()));
    }
    cap.models
        .into_iter()
        .find(|m| m.name == spec.name)
        .map(|m| m.graph)
        .ok_or_else(|| fail("the model is not in its own source".into()))
}

/// [`try_graph_of`], panicking on failure (tests).
pub fn graph_of(spec: &ModelSpec) -> Graph {
    try_graph_of(spec).unwrap_or_else(|e| panic!("{e}"))
}

pub fn to_ref(t: &Tensor) -> RefTensor {
    let data = match t.as_i64() {
        Some(ids) => ids.iter().map(|&i| i as f64).collect(),
        None => t.to_f32_vec().into_iter().map(f64::from).collect(),
    };
    RefTensor::new(t.shape().to_vec(), data)
}

/// Reference outputs of `graph` (a model's graph, see [`try_graph_of`]) for its weights and inputs.
pub fn try_reference_of(
    graph: &Graph,
    spec: &ModelSpec,
    weights: &[Tensor],
    inputs: &[&Tensor],
) -> Result<Vec<RefTensor>, ReferenceError> {
    let inputs: Vec<RefTensor> = inputs.iter().map(|t| to_ref(t)).collect();
    let params: Vec<RefTensor> = weights.iter().map(to_ref).collect();
    interpret(graph, &inputs, &params).map_err(|source| ReferenceError::Interpret {
        model: spec.name.to_string(),
        source: Box::new(source),
    })
}

/// Reference outputs of a model with `#[state]` fields, followed by each state as the call leaves it, for the
/// states `states` it starts from.
pub fn try_reference_with_states(
    graph: &Graph,
    spec: &ModelSpec,
    weights: &[Tensor],
    inputs: &[&Tensor],
    states: &[Tensor],
) -> Result<Vec<RefTensor>, ReferenceError> {
    try_reference_in(graph, spec, weights, inputs, states, Arithmetic::F64)
}

/// [`try_reference_with_states`] in `arithmetic` (`states` empty for a model without state).
pub fn try_reference_in(
    graph: &Graph,
    spec: &ModelSpec,
    weights: &[Tensor],
    inputs: &[&Tensor],
    states: &[Tensor],
    arithmetic: Arithmetic,
) -> Result<Vec<RefTensor>, ReferenceError> {
    let inputs: Vec<RefTensor> = inputs.iter().map(|t| to_ref(t)).collect();
    let params: Vec<RefTensor> = weights.iter().map(to_ref).collect();
    let states: Vec<RefTensor> = states.iter().map(to_ref).collect();
    let (mut outputs, after) =
        crate::reference::interpret_with_states_in(graph, &inputs, &params, &states, arithmetic)
            .map_err(|source| ReferenceError::Interpret {
                model: spec.name.to_string(),
                source: Box::new(source),
            })?;
    outputs.extend(after);
    Ok(outputs)
}

/// Reference outputs for a model's weights and inputs (panics on failure: tests).
pub fn reference(spec: &ModelSpec, weights: &[Tensor], inputs: &[&Tensor]) -> Vec<RefTensor> {
    try_reference_of(&graph_of(spec), spec, weights, inputs).unwrap_or_else(|e| panic!("{e}"))
}

/// Largest `|got - want| / (atol + rtol·|want|)`; ≤ 1 means within tolerance.
pub fn error_ratio(got: &Tensor, want: &RefTensor, atol: f64, rtol: f64) -> f64 {
    assert_eq!(got.shape(), want.shape.as_slice(), "output shape");
    let got = got.to_f32_vec().into_iter().map(f64::from);
    compare(got, &want.data, &want.shape, Tolerance { atol, rtol }).ratio
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

/// `‖got − want‖ / ‖want‖`, with each element of `want` taken to be at least `floor` in size: a sum that cancels
/// to near 0 (one output element of a few products, say) has the rounding error of its terms, not of its own.
/// An element that is not finite on one side only is an infinite error (a NaN would otherwise compare below every
/// bound); one that is the same NaN or infinity on both sides is no error.
pub fn rel_l2_floored(got: &Tensor, want: &Tensor, floor: f64) -> f64 {
    let (g, w) = (got.to_f32_vec(), want.to_f32_vec());
    let mut diff = 0.0f64;
    for (a, b) in g.iter().zip(&w) {
        match (a.is_finite(), b.is_finite()) {
            (true, true) => diff += (f64::from(*a) - f64::from(*b)).powi(2),
            (false, false) if a == b || (a.is_nan() && b.is_nan()) => {}
            _ => return f64::INFINITY,
        }
    }
    let norm: f64 = w
        .iter()
        .filter(|b| b.is_finite())
        .map(|b| f64::from(*b).powi(2))
        .sum();
    let floor = floor * floor * w.len() as f64;
    (diff / norm.max(floor).max(1e-30)).sqrt()
}

/// The weights of the tests that compare with transformers (`weight` in `scripts/llama_reference.py`, which the
/// MPNet, RoBERTa, T5 and GPT-2 scripts import): `offset + scale·u`, u uniform in [-1, 1) from splitmix64 seeded by
/// the FNV-1a hash of the tensor's name (the top 24 bits of each draw), so no checkpoint is committed.
pub fn named_weight(name: &str, shape: &[usize], scale: f64, offset: f64) -> Tensor {
    let mut state = name.bytes().fold(0xCBF2_9CE4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01B3)
    });
    let count: usize = shape.iter().product();
    let data = (0..count)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            let u = (z >> 40) as f64 / f64::from(1u32 << 23) - 1.0;
            (offset + scale * u) as f32
        })
        .collect();
    Tensor::from_f32(shape, data).expect("shape matches")
}

/// Every parameter of a BERT-like model, in `spec` order, drawn by [`bert_weight`].
pub fn bert_weights(spec: &ModelSpec) -> Vec<Tensor> {
    spec.params
        .iter()
        .map(|p| bert_weight(p.name, p.shape))
        .collect()
}

/// A BERT-like model's parameter `name`, drawn as `init_weights` in `scripts/mpnet_reference.py` draws it (the
/// RoBERTa script imports it): norms' weights near 1, relative-bias tables ±2, embeddings ±1, biases ±0.1, and
/// products' weights uniform with a spread of 1/√fan_in.
pub fn bert_weight(name: &str, shape: &[usize]) -> Tensor {
    let (scale, offset) = if name.contains("LayerNorm.weight") {
        (0.2, 1.0)
    } else if name.ends_with("relative_attention_bias.weight") {
        (2.0, 0.0)
    } else if name.contains("embeddings") {
        (1.0, 0.0)
    } else if name.ends_with("bias") {
        (0.1, 0.0)
    } else {
        ((3.0 / shape[1] as f64).sqrt(), 0.0)
    };
    named_weight(name, shape, scale, offset)
}
