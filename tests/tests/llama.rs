//! The example Llama (`examples/src/models/llama.rs`: RMSNorm, rotary embeddings, grouped-query attention,
//! SwiGLU, untied `lm_head`, Hugging Face's parameter names) in its `tiny` configuration, against `transformers`'
//! `LlamaForCausalLM` on the same weights: the greedy continuation of each prompt, token for token, and the
//! logits at several steps.
//!
//! The reference is `tests/data/llama_greedy.json` (and `llama3_greedy.json` for Llama 3.1's rope scaling, in the
//! `tiny_llama3` configuration), made by `scripts/llama_reference.py` (which says how); the
//! weights come from the generator that script uses, repeated in [`weight`], so no checkpoint is committed. The
//! uncached model runs the whole prefix again at each step (the ids and the padding mask are its inputs; the
//! positions, the rotary tables and the causal mask are made inside the model); the cached one (`TinyLlamaCached`, same weights) prefills once and then
//! runs one token per step. The prompts run as one left-padded batch, so the test also shows that a batch of
//! prompts of different lengths gives each its own tokens.

use std::ops::ControlFlow;
use std::path::Path;

use fuse_examples::models::llama::{inputs, last_logits, step_inputs, tiny, CachedDecoder};
use fuse_runtime::generate::{
    generate_batch, generate_batch_indexed, Decoding, Finish, GenerateOptions,
};
use fuse_runtime::{PlanMode, Tensor};
use fuse_tests::harness::named_weight as weight;

use tiny::*;

/// What `tests/data/llama_greedy.json` holds.
struct Reference {
    min_margin: f64,
    config: serde_json::Value,
    cases: Vec<Case>,
}

struct Case {
    prompt: Vec<i64>,
    tokens: Vec<i64>,
    /// Step → the last position's logits at that step.
    logits: Vec<(usize, Vec<f64>)>,
}

fn reference() -> Reference {
    reference_in("llama_greedy.json")
}

/// A reference file of `tests/data/`, made by `scripts/llama_reference.py`.
fn reference_in(file: &str) -> Reference {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data")
        .join(file);
    let text = std::fs::read_to_string(&path).expect("the reference is committed in tests/data");
    let doc: serde_json::Value = serde_json::from_str(&text).expect("the reference parses");
    let ints = |v: &serde_json::Value| -> Vec<i64> {
        v.as_array()
            .expect("a list")
            .iter()
            .map(|x| x.as_i64().expect("an integer"))
            .collect()
    };
    let cases = doc["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| Case {
            prompt: ints(&c["prompt"]),
            tokens: ints(&c["tokens"]),
            logits: c["logits"]
                .as_object()
                .expect("logits by step")
                .iter()
                .map(|(step, values)| {
                    let values = values.as_array().expect("logits");
                    let values = values.iter().map(|x| x.as_f64().expect("a logit"));
                    (step.parse().expect("a step"), values.collect())
                })
                .collect(),
        })
        .collect();
    Reference {
        min_margin: doc["min_margin"].as_f64().expect("min_margin"),
        config: doc["config"].clone(),
        cases,
    }
}

/// The model with the reference's weights, by Hugging Face's names.
fn model() -> TinyLlama {
    let spec = TinyLlama::spec();
    let weights = spec
        .params
        .iter()
        .map(|p| {
            let (scale, offset) = if p.name.ends_with("norm.weight") {
                (0.2, 1.0)
            } else if p.name == "model.embed_tokens.weight" {
                (1.0, 0.0)
            } else {
                let fan_in = (3.0 / p.shape[1] as f64).sqrt();
                let wider = if p.name == "lm_head.weight" { 4.0 } else { 1.0 };
                (fan_in * wider, 0.0)
            };
            weight(p.name, p.shape, scale, offset)
        })
        .collect();
    TinyLlama::from_weights(weights).expect("weights fit the model")
}

/// Each sequence's next-token logits, the whole batch left-padded into one run (recomputing every prefix).
fn next_logits(model: &TinyLlama, mode: PlanMode, sequences: &[&[i64]]) -> Vec<Vec<f32>> {
    let inputs = inputs(sequences).expect("inputs");
    let logits = model
        .compiled()
        .run_one(mode, &inputs.iter().collect::<Vec<_>>())
        .expect("the model runs");
    last_logits(&logits, VOCAB).expect("a last position")
}

#[test]
fn the_configuration_is_the_references() {
    let r = reference();
    let c = |key: &str| r.config[key].as_u64().expect("a size") as usize;
    assert_eq!(
        [
            c("vocab_size"),
            c("hidden_size"),
            c("intermediate_size"),
            c("num_hidden_layers"),
            c("num_attention_heads"),
            c("num_key_value_heads")
        ],
        [VOCAB, HIDDEN, FFN, LAYERS, HEADS, KV_HEADS]
    );
    assert_eq!(r.config["rope_theta"].as_f64(), Some(THETA as f64));
    // Hugging Face's names, so a real checkpoint loads by `TinyLlama::load`.
    let names: Vec<&str> = TinyLlama::spec().params.iter().map(|p| p.name).collect();
    for name in [
        "model.embed_tokens.weight",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.1.mlp.down_proj.weight",
        "model.layers.1.post_attention_layernorm.weight",
        "model.norm.weight",
        "lm_head.weight",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
}

/// An empty prompt runs, as in PyTorch, to logits of no position, which have no next token: `last_logits` (and so
/// decoding) refuses them, as it refuses logits of the wrong width. Before, it indexed the position before the
/// first and panicked.
#[test]
fn an_empty_prompt_has_no_next_token() {
    let model = TinyLlama::random(3);
    let empty: &[i64] = &[];
    let inputs = inputs(&[empty]).expect("inputs");
    let logits = model
        .compiled()
        .run_one(PlanMode::Fused, &inputs.iter().collect::<Vec<_>>())
        .expect("an empty sequence runs");
    assert_eq!(logits.shape(), [1, 0, VOCAB]);
    for (logits, vocab) in [
        (&logits, VOCAB),
        (&Tensor::zeros(&[1, 2, VOCAB]), VOCAB + 1),
    ] {
        match last_logits(logits, vocab) {
            Err(fuse_runtime::Error::Generation(_)) => {}
            other => panic!("{:?} as {vocab} wide: {other:?}", logits.shape()),
        }
    }
    // Each sequence's row is its last position's.
    let counted = Tensor::from_f32(&[2, 3, VOCAB], (0..6 * VOCAB).map(|i| i as f32).collect())
        .expect("logits");
    let rows = last_logits(&counted, VOCAB).expect("rows");
    for (b, row) in rows.iter().enumerate() {
        let start = (b * 3 + 2) * VOCAB;
        assert_eq!(
            row,
            &(start..start + VOCAB).map(|i| i as f32).collect::<Vec<_>>()
        );
    }
    assert_eq!(rows.len(), 2);
}

/// Greedy decoding through `fuse_runtime::generate`, the three prompts (5, 2 and 9 tokens) left-padded into one
/// batch, fused and eager plans: each prompt's 32 new tokens equal what transformers generates for it alone, and
/// its logits at the recorded steps agree within f32 tolerance.
#[test]
fn greedy_continuation_matches_transformers() {
    let r = reference();
    let model = model();
    let prompts: Vec<Vec<i64>> = r.cases.iter().map(|c| c.prompt.clone()).collect();
    let options = GenerateOptions {
        decoding: Decoding::Greedy,
        max_new_tokens: 32,
        stop_tokens: vec![],
    };
    for mode in [PlanMode::Fused, PlanMode::Eager] {
        let mut streamed = vec![Vec::new(); prompts.len()];
        let generated = generate_batch(
            &prompts,
            &options,
            |sequences| {
                let rows = next_logits(&model, mode, sequences);
                for (seq, logits) in sequences.iter().zip(&rows) {
                    let case = r.cases.iter().find(|c| seq.starts_with(&c.prompt)).expect("a prompt");
                    let step = seq.len() - case.prompt.len();
                    if let Some((_, reference)) = case.logits.iter().find(|(s, _)| *s == step) {
                        for (i, (&got, &want)) in logits.iter().zip(reference).enumerate() {
                            assert!(
                                (f64::from(got) - want).abs() <= 2e-4 + 2e-4 * want.abs(),
                                "{mode:?} prompt {:?} step {step} logit {i}: {got} vs transformers {want}",
                                case.prompt
                            );
                        }
                    }
                }
                Ok(rows)
            },
            |i, token| {
                streamed[i].push(token);
                ControlFlow::Continue(())
            },
        )
        .expect("generation runs");
        for ((case, g), streamed) in r.cases.iter().zip(&generated).zip(&streamed) {
            assert_eq!(
                g.tokens, case.tokens,
                "{mode:?} prompt {:?}: fuse's greedy tokens, then transformers' (the reference's smallest top-2 \
                 margin is {})",
                case.prompt, r.min_margin
            );
            assert_eq!((g.finish, streamed), (Finish::Length, &g.tokens));
        }
    }
}

/// RoPE's rotate-half (`slice`, `neg`, `concat`) is computed inside the kernel that applies the rotation to q
/// and to k: no concat or negation kernel of its own in any layer. The rotation of q is computed by the attention
/// kernel as it reads q, so it is no kernel either: one piecewise kernel per layer is left, k's. With a KV cache,
/// k's rotation is computed by the write into the cache, so no piecewise kernel is left. The causal mask is one
/// kernel, and the rotary tables four.
#[test]
fn rotary_embeddings_cost_one_kernel_for_k_and_none_for_q() {
    use fuse_kernels::ir::Op;
    use fuse_kernels::plan::{plan, KernelKind, Mode};
    use fuse_tests::harness::graph_of;
    let fused = plan(&graph_of(TinyLlama::spec()), Mode::Fused);
    let dump = fuse_kernels::plan::dump(&fused);
    let concats = fused
        .kernels
        .iter()
        .filter(|k| matches!(k.kind, KernelKind::Concat { .. }))
        .count();
    let rotations = fused
        .kernels
        .iter()
        .filter(|k| matches!(k.kind, KernelKind::Piecewise(_)))
        .count();
    let computing_q = fused
        .kernels
        .iter()
        .filter(|k| matches!(&k.kind, KernelKind::Attention(a) if a.query.is_some()))
        .count();
    assert_eq!(
        (concats, rotations, computing_q),
        (0, LAYERS, LAYERS),
        "{dump}"
    );
    // 41 kernels when the rotation cost a negation, a concat and the rotation itself, for q and for k; 34 when it
    // was one kernel for each; 32 with q's computed in attention; 30 with each attention writing its heads
    // straight into the layout of the output projection's input (no copy kernel after it). Five are
    // made once per call from the attention mask: the causal mask, and the rotary tables (each token's position
    // as a running count of the mask, the frequencies, the cosines, the sines). The casts of the `arange`s, the
    // comparisons and the selections are cheap values broadcast into their readers and recomputed there per
    // element: no cast is a kernel of its own (the causal mask alone took six kernels when each was).
    assert_eq!(fused.kernels.len(), 30, "{dump}");
    let copies = fused.kernels.iter().filter(|k| k.nodes.is_empty()).count();
    let placed = fused
        .kernels
        .iter()
        .filter(|k| matches!(k.kind, KernelKind::Attention(_)) && k.write.is_some())
        .count();
    assert_eq!((copies, placed), (0, LAYERS), "{dump}");
    let sizes_of_kernels_with_casts: Vec<usize> = fused
        .kernels
        .iter()
        .filter(|k| {
            k.nodes
                .iter()
                .any(|&n| matches!(fused.graph.node(n).op, Op::Cast(..)))
        })
        .map(|k| k.nodes.len())
        .collect();
    assert_eq!(sizes_of_kernels_with_casts, [10, 7, 7], "{dump}");

    let cached = plan(&graph_of(TinyLlamaCached::spec()), Mode::Fused);
    let dump = fuse_kernels::plan::dump(&cached);
    let count = |what: &dyn Fn(&KernelKind, usize) -> bool| {
        cached
            .kernels
            .iter()
            .filter(|k| what(&k.kind, k.nodes.len()))
            .count()
    };
    let rotations = count(&|kind, _| matches!(kind, KernelKind::Piecewise(_)));
    let computing_q =
        count(&|kind, _| matches!(kind, KernelKind::Attention(a) if a.query.is_some()));
    // A write that computes its value holds more nodes than the write.
    let writes = count(&|kind, _| matches!(kind, KernelKind::Write { .. }));
    let rotating_writes =
        count(&|kind, nodes| matches!(kind, KernelKind::Write { .. }) && nodes > 1);
    assert_eq!(
        (rotations, computing_q, writes, rotating_writes),
        (0, LAYERS, 2 * LAYERS, LAYERS),
        "{dump}"
    );
}

/// The cached model with the same weights as `uncached` (the same parameters, in the same order).
fn cached(uncached: &TinyLlama) -> TinyLlamaCached {
    let names = |spec: &'static fuse_runtime::ModelSpec| {
        spec.params.iter().map(|p| p.name).collect::<Vec<_>>()
    };
    assert_eq!(names(TinyLlama::spec()), names(TinyLlamaCached::spec()));
    TinyLlamaCached::from_weights(uncached.weights().expect("f32 weights").to_vec())
        .expect("the same weights fit")
}

/// `model` (a cached configuration) decoding the reference's prompts through its KV cache, prefilled once as a
/// left-padded batch, then one token per step per sequence, greedily for 32 tokens: whether each prompt's tokens are
/// the reference's, and the largest error of a logit at the recorded steps, relative to `2e-4 + 2e-4·|logit|` (the
/// tolerance: 1 is at its edge).
fn cached_greedy_against(
    model: &fuse_runtime::CompiledModel,
    r: &Reference,
    mode: PlanMode,
) -> (Vec<bool>, f64) {
    let prompts: Vec<Vec<i64>> = r.cases.iter().map(|c| c.prompt.clone()).collect();
    let options = GenerateOptions {
        decoding: Decoding::Greedy,
        max_new_tokens: 32,
        stop_tokens: vec![],
    };
    let mut decoder = CachedDecoder::new(model, mode, prompts.len(), VOCAB).expect("a session");
    let mut worst = 0f64;
    let generated = generate_batch_indexed(
        &prompts,
        &options,
        |running, sequences| {
            let rows = decoder.next_logits(running, sequences)?;
            for (&i, (seq, logits)) in running.iter().zip(sequences.iter().zip(&rows)) {
                let case = &r.cases[i];
                let step = seq.len() - case.prompt.len();
                if let Some((_, reference)) = case.logits.iter().find(|(s, _)| *s == step) {
                    for (&got, &want) in logits.iter().zip(reference) {
                        let error = (f64::from(got) - want).abs() / (2e-4 + 2e-4 * want.abs());
                        worst = worst.max(error);
                    }
                }
            }
            Ok(rows)
        },
        |_, _| ControlFlow::Continue(()),
    )
    .expect("cached generation runs");
    let same = r
        .cases
        .iter()
        .zip(&generated)
        .map(|(case, g)| g.tokens == case.tokens)
        .collect();
    (same, worst)
}

/// [`cached_greedy_against`] in both plans: every prompt's tokens, and every recorded logit within tolerance.
fn matches_in_both_plans(model: &fuse_runtime::CompiledModel, r: &Reference) {
    for mode in [PlanMode::Fused, PlanMode::Eager] {
        let (same, worst) = cached_greedy_against(model, r, mode);
        assert!(
            worst <= 1.0,
            "{mode:?}: a logit is {worst:.2} tolerances from transformers'"
        );
        assert_eq!(
            same,
            vec![true; r.cases.len()],
            "{mode:?}: which prompts' tokens are transformers'"
        );
    }
}

/// The transformers check through the KV cache, fused and eager plans: the same tokens and the same logits at the
/// recorded steps.
#[test]
fn cached_greedy_continuation_matches_transformers() {
    let r = reference();
    let model = cached(&model());
    matches_in_both_plans(model.compiled(), &r);
}

/// Llama 3.1's rope scaling (`tiny_llama3`: `tiny`'s weights, `Llama3Rotary`) against transformers'
/// `LlamaForCausalLM` with `rope_scaling: {rope_type: llama3, ..}` (`tests/data/llama3_greedy.json`): every
/// prompt's 32 greedy tokens and the logits at the recorded steps, fused and eager plans. The unscaled model on the
/// same weights misses that reference, so it is the scaling that is checked.
#[test]
fn llama3_rope_scaling_matches_transformers() {
    use fuse_examples::models::llama::tiny_llama3::{self, TinyLlama3Cached};
    let r = reference_in("llama3_greedy.json");
    let scaling = &r.config["rope_scaling"];
    assert_eq!(scaling["rope_type"], "llama3");
    let number = |key: &str| scaling[key].as_f64().expect("a number");
    assert_eq!(
        [
            number("factor"),
            number("low_freq_factor"),
            number("high_freq_factor"),
            number("original_max_position_embeddings")
        ],
        [
            tiny_llama3::FACTOR,
            tiny_llama3::LOW_FREQ_FACTOR,
            tiny_llama3::HIGH_FREQ_FACTOR,
            tiny_llama3::ORIGINAL_CONTEXT
        ]
        .map(|v| v as f64)
    );
    let weights = model().weights().expect("f32 weights").to_vec();
    let scaled = TinyLlama3Cached::from_weights(weights.clone()).expect("tiny's weights fit");
    matches_in_both_plans(scaled.compiled(), &r);
    let unscaled = TinyLlamaCached::from_weights(weights).expect("the weights fit");
    let (same, worst) = cached_greedy_against(unscaled.compiled(), &r, PlanMode::Fused);
    assert!(
        worst > 100.0 && same.contains(&false),
        "without the scaling: {worst:.1} tolerances, tokens {same:?}"
    );
}

/// Random weights and prompts: each cached step's logits equal those of running the whole prefix again, in both
/// plans, within f32 tolerance.
#[test]
fn cached_decoding_gives_the_logits_of_recomputing_the_prefix() {
    let full = TinyLlama::random(7);
    let model = cached(&full);
    let prompts: Vec<Vec<i64>> = vec![vec![3, 90, 17, 4], vec![111], vec![5, 6, 7, 8, 9, 10, 11]];
    for mode in [PlanMode::Fused, PlanMode::Eager] {
        let mut decoder = CachedDecoder::new(model.compiled(), mode, prompts.len(), VOCAB).unwrap();
        let mut sequences = prompts.clone();
        let mut worst = 0f32;
        for step in 0..12 {
            let views: Vec<&[i64]> = sequences.iter().map(Vec::as_slice).collect();
            // Sequence 1 stops after 5 steps: the others go on without it.
            let running: Vec<usize> = (0..sequences.len())
                .filter(|&i| i != 1 || step < 5)
                .collect();
            let running_views: Vec<&[i64]> = running.iter().map(|&i| views[i]).collect();
            let got = decoder.next_logits(&running, &running_views).unwrap();
            for (&i, row) in running.iter().zip(&got) {
                let want = next_logits(&full, mode, &[views[i]]).remove(0);
                for (a, b) in row.iter().zip(&want) {
                    let err = (a - b).abs() / (1e-4 + 1e-4 * b.abs());
                    worst = worst.max(err);
                }
            }
            for (&i, row) in running.iter().zip(&got) {
                let token = row
                    .iter()
                    .enumerate()
                    .max_by(|a, b| a.1.total_cmp(b.1))
                    .map(|(t, _)| t as i64)
                    .unwrap();
                sequences[i].push(token);
            }
        }
        assert!(
            worst <= 1.0,
            "{mode:?}: cached logits off by {worst}x the tolerance"
        );
    }
}

/// A step past the cache's `MAX_SEQ` positions is a typed error, never a write past the buffer.
#[test]
fn decoding_past_the_cache_is_a_typed_error() {
    let model = cached(&TinyLlama::random(8));
    let mut session = model.session(&[("batch", 1)]).unwrap();
    let [ids, mask] = step_inputs(&[1], &[0], MAX_SEQ).unwrap();
    let err = model
        .forward(&mut session, &ids, &mask, MAX_SEQ)
        .expect_err("past the cache");
    assert!(
        matches!(
            err,
            fuse_runtime::Error::StateWriteOutOfRange {
                start: 64,
                len: 1,
                size: 64,
                ..
            }
        ),
        "{err:?}"
    );
    // The last position fits.
    let [ids, mask] = step_inputs(&[1], &[0], MAX_SEQ - 1).unwrap();
    assert!(model
        .forward(&mut session, &ids, &mask, MAX_SEQ - 1)
        .is_ok());
}

/// The per-kernel profile runs a decoding step with its session: one time per kernel, the call's time covering
/// theirs, the cache after the profile's repeated step the cache after one step, and a session of another batch
/// refused with the error `forward` gives.
#[test]
fn a_decoding_step_profiles_with_its_session() {
    let model = cached(&TinyLlama::random(9));
    let compiled = model.compiled();
    let prompt = [[4i64, 8, 15, 16, 23]];
    let views: Vec<&[i64]> = prompt.iter().map(|p| p.as_slice()).collect();
    let prefill = inputs(&views).unwrap();
    let zero = fuse_runtime::exec::dim_arg(0).unwrap();
    let mut once = compiled.session(&[("batch", 1)]).unwrap();
    let mut refs: Vec<&Tensor> = prefill.iter().collect();
    refs.push(&zero);
    compiled
        .run_session(PlanMode::Fused, &mut once, &refs)
        .unwrap();
    let mut profiled = once.try_clone().unwrap();
    let step = step_inputs(&[42], &[0], 5).unwrap();
    let past = fuse_runtime::exec::dim_arg(5).unwrap();
    let mut refs: Vec<&Tensor> = step.iter().collect();
    refs.push(&past);
    let logits = compiled
        .run_one_session(PlanMode::Fused, &mut once, &refs)
        .unwrap();
    let profile = compiled
        .profile_session(PlanMode::Fused, &mut profiled, &refs, 3)
        .unwrap();
    assert_eq!(
        profile.kernels.len(),
        compiled.report(PlanMode::Fused).kernel_count()
    );
    let kernels: f64 = profile.kernels.iter().map(|k| k.ms).sum();
    assert!(profile
        .kernels
        .iter()
        .all(|k| k.ms >= 0.0 && !k.ops.is_empty()));
    assert!(
        kernels > 0.0 && profile.call_ms >= kernels,
        "{kernels} > {}",
        profile.call_ms
    );
    for (a, b) in once
        .states()
        .unwrap()
        .iter()
        .zip(profiled.states().unwrap())
    {
        assert_eq!(a.as_f32(), b.as_f32(), "the cache after profiling one step");
    }
    // The profiled session decodes on as the other does.
    let next = step_inputs(&[7], &[0], 6).unwrap();
    let past = fuse_runtime::exec::dim_arg(6).unwrap();
    let mut refs_next: Vec<&Tensor> = next.iter().collect();
    refs_next.push(&past);
    let a = compiled
        .run_one_session(PlanMode::Fused, &mut once, &refs_next)
        .unwrap();
    let b = compiled
        .run_one_session(PlanMode::Fused, &mut profiled, &refs_next)
        .unwrap();
    assert_eq!(a.as_f32(), b.as_f32());
    assert!(logits.as_f32().unwrap().iter().all(|x| x.is_finite()));
    let mut other = compiled.session(&[("batch", 2)]).unwrap();
    let err = compiled
        .profile_session(PlanMode::Fused, &mut other, &refs, 1)
        .expect_err("a session of batch 2 for a batch-1 step");
    assert!(
        matches!(err, fuse_runtime::Error::StateShape { .. }),
        "{err:?}"
    );
}

/// Weights in `precision` through the KV cache, teacher-forced on transformers' greedy tokens: every step's
/// logits keep a cosine of at least `min_cosine` to the f32 model's, and its greedy token is f32's wherever f32's
/// top two logits are apart by more than `margin` of the largest (what the precision's error could close).
fn decoding_stays_close_to_f32(
    precision: fuse_runtime::CpuPrecision,
    min_cosine: f32,
    margin_share: f32,
) {
    use fuse_examples::minilm_run::cosine;
    let r = reference();
    let exact = cached(&model()).into_compiled();
    let reduced = cached(&model())
        .into_compiled()
        .with_cpu_precision(precision)
        .expect("the weights pack");
    let decoder = |m| CachedDecoder::new(m, PlanMode::Fused, r.cases.len(), VOCAB);
    let (mut exact_decoder, mut reduced_decoder) =
        (decoder(&exact).unwrap(), decoder(&reduced).unwrap());
    let (mut worst, mut disagreements) = (1f32, 0);
    for step in 0..32 {
        let sequences: Vec<Vec<i64>> = r
            .cases
            .iter()
            .map(|c| [&c.prompt[..], &c.tokens[..step]].concat())
            .collect();
        let views: Vec<&[i64]> = sequences.iter().map(Vec::as_slice).collect();
        let running: Vec<usize> = (0..views.len()).collect();
        let want = exact_decoder.next_logits(&running, &views).unwrap();
        let got = reduced_decoder.next_logits(&running, &views).unwrap();
        for (w, g) in want.iter().zip(&got) {
            let c = cosine(w, g);
            worst = worst.min(c);
            let argmax = |v: &[f32]| {
                let mut order: Vec<usize> = (0..v.len()).collect();
                order.sort_by(|&a, &b| v[b].total_cmp(&v[a]));
                (order[0], v[order[0]] - v[order[1]])
            };
            let ((want_token, margin), (got_token, _)) = (argmax(w), argmax(g));
            let scale = w.iter().map(|x| x.abs()).fold(0f32, f32::max);
            if want_token != got_token {
                disagreements += 1;
                assert!(
                    margin <= margin_share * scale,
                    "step {step}: {precision} picked {got_token}, f32 {want_token} by a margin of {margin} \
                     (largest logit {scale}, cosine {c})"
                );
            }
        }
    }
    eprintln!(
        "{precision} vs f32 over 32 teacher-forced steps: worst logit cosine {worst}, {disagreements} greedy \
         tokens differ"
    );
    assert!(worst >= min_cosine, "worst logit cosine {worst}");
}

#[test]
fn int8_decoding_stays_close_to_f32() {
    decoding_stays_close_to_f32(fuse_runtime::CpuPrecision::Int8, 0.999, 0.02);
}

#[test]
fn bf16_decoding_stays_close_to_f32() {
    decoding_stays_close_to_f32(fuse_runtime::CpuPrecision::Bf16, 0.9999, 0.005);
}

#[test]
fn f16_decoding_stays_close_to_f32() {
    decoding_stays_close_to_f32(fuse_runtime::CpuPrecision::F16, 0.999999, 0.001);
}
