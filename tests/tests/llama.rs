//! A Llama (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU, untied `lm_head`) written as one
//! `#[fused_model]` with Hugging Face's parameter names, against `transformers`' `LlamaForCausalLM` on the same
//! weights: the greedy continuation of each prompt, token for token, and the logits at several steps.
//!
//! The reference is `tests/data/llama_greedy.json`, made by `scripts/llama_reference.py` (which says how); the
//! weights come from the generator that script uses, repeated in [`weight`], so no checkpoint is committed. The
//! model has no KV cache yet: each step runs the whole prefix again (positions, rotary tables and the causal mask
//! are inputs), which is what the reference's logits were computed with too.

use std::ops::ControlFlow;
use std::path::Path;

use fuse_runtime::generate::{generate_batch, Decoding, Finish, GenerateOptions};
use fuse_runtime::{fused_model, PlanMode, Tensor};

#[fused_model]
pub mod llama {
    pub const VOCAB: usize = 128;
    pub const HIDDEN: usize = 64;
    pub const FFN: usize = 160;
    pub const LAYERS: usize = 2;
    pub const HEADS: usize = 4;
    pub const KV_HEADS: usize = 2;
    pub const GROUPS: usize = HEADS / KV_HEADS;
    pub const HEAD_DIM: usize = HIDDEN / HEADS;
    pub const HALF: usize = HEAD_DIM / 2;
    pub const KV_DIM: usize = KV_HEADS * HEAD_DIM;
    pub const SCALE: f64 = 0.25; // 1 / sqrt(HEAD_DIM)
    pub const EPS: f64 = 1e-6;

    pub struct Linear<const IN: usize, const OUT: usize> {
        #[shape(OUT, IN)]
        weight: Tensor,
    }

    impl<const IN: usize, const OUT: usize> Linear<IN, OUT> {
        pub fn forward(&self, x: Tensor) -> Tensor {
            x.matmul(&self.weight.t())
        }
    }

    pub struct RmsNorm {
        #[shape(HIDDEN)]
        weight: Tensor,
    }

    impl RmsNorm {
        pub fn forward(&self, x: Tensor) -> Tensor {
            x.rms_norm(&self.weight, EPS)
        }
    }

    pub struct Embedding {
        #[shape(VOCAB, HIDDEN)]
        weight: Tensor,
    }

    impl Embedding {
        pub fn forward(&self, ids: Tensor) -> Tensor {
            embedding(&self.weight, &ids)
        }
    }

    pub struct Attention {
        q_proj: Linear<HIDDEN, HIDDEN>,
        k_proj: Linear<HIDDEN, KV_DIM>,
        v_proj: Linear<HIDDEN, KV_DIM>,
        o_proj: Linear<HIDDEN, HIDDEN>,
    }

    impl Attention {
        /// `x` is `[batch, seq, HIDDEN]` → `[batch, heads, seq, HEAD_DIM]`.
        fn heads(&self, x: Tensor, heads: usize) -> Tensor {
            let (b, s) = (x.dim(0), x.dim(1));
            x.reshape([b, s, heads, HEAD_DIM]).permute([0, 2, 1, 3])
        }

        /// Hugging Face's `x * cos + rotate_half(x) * sin`, `rotate_half(x) = [-x2, x1]`.
        fn rope(&self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor {
            let x1 = x.slice(3, 0, HALF);
            let x2 = x.slice(3, HALF, HEAD_DIM);
            let rotated = concat([x2.neg(), x1], 3);
            x * &cos + rotated * &sin
        }

        pub fn forward(&self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor) -> Tensor {
            let (b, s) = (x.dim(0), x.dim(1));
            let q = self.rope(self.heads(self.q_proj.forward(x), HEADS), cos, sin);
            let k = self.rope(self.heads(self.k_proj.forward(x), KV_HEADS), cos, sin);
            let v = self.heads(self.v_proj.forward(x), KV_HEADS);
            // Grouped-query attention: the query heads of one KV head share it through a broadcast batch dim.
            let q = q.reshape([b, KV_HEADS, GROUPS, s, HEAD_DIM]);
            let k = k.reshape([b, KV_HEADS, 1, s, HEAD_DIM]);
            let v = v.reshape([b, KV_HEADS, 1, s, HEAD_DIM]);
            let scores = q.matmul(&k.transpose(3, 4)) * SCALE + &mask;
            let out = scores.softmax(-1).matmul(&v);
            let out = out.reshape([b, HEADS, s, HEAD_DIM]).permute([0, 2, 1, 3]);
            self.o_proj.forward(out.reshape([b, s, HIDDEN]))
        }
    }

    pub struct Mlp {
        gate_proj: Linear<HIDDEN, FFN>,
        up_proj: Linear<HIDDEN, FFN>,
        down_proj: Linear<FFN, HIDDEN>,
    }

    impl Mlp {
        pub fn forward(&self, x: Tensor) -> Tensor {
            self.down_proj
                .forward(self.gate_proj.forward(x).silu() * self.up_proj.forward(x))
        }
    }

    pub struct DecoderLayer {
        input_layernorm: RmsNorm,
        self_attn: Attention,
        post_attention_layernorm: RmsNorm,
        mlp: Mlp,
    }

    impl DecoderLayer {
        pub fn forward(&self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor) -> Tensor {
            let x = x + self
                .self_attn
                .forward(self.input_layernorm.forward(x), cos, sin, mask);
            x + self.mlp.forward(self.post_attention_layernorm.forward(x))
        }
    }

    pub struct LlamaModel {
        embed_tokens: Embedding,
        layers: [DecoderLayer; LAYERS],
        norm: RmsNorm,
    }

    impl LlamaModel {
        pub fn forward(&self, ids: Tensor, cos: Tensor, sin: Tensor, mask: Tensor) -> Tensor {
            let mut x = self.embed_tokens.forward(ids);
            for layer in &self.layers {
                x = layer.forward(x, cos, sin, mask);
            }
            self.norm.forward(x)
        }
    }

    pub struct Llama {
        model: LlamaModel,
        lm_head: Linear<HIDDEN, VOCAB>,
    }

    impl Llama {
        /// `cos`/`sin`: the rotary tables at the positions of `ids`; `mask`: 0 where a position may attend, a large
        /// negative number where it may not (the causal mask). Returns the logits `[batch, seq, VOCAB]`.
        pub fn forward(
            &self,
            #[shape(batch, seq)] ids: Tensor<i64>,
            #[shape(seq, HEAD_DIM)] cos: Tensor,
            #[shape(seq, HEAD_DIM)] sin: Tensor,
            #[shape(seq, seq)] mask: Tensor,
        ) -> Tensor {
            self.lm_head
                .forward(self.model.forward(ids, cos, sin, mask))
        }
    }
}

use llama::*;

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
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/llama_greedy.json");
    let text = std::fs::read_to_string(&path).expect("tests/data/llama_greedy.json is committed");
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

/// The reference script's generator: `offset + scale·u`, u uniform in [-1, 1) from splitmix64 seeded by the
/// FNV-1a hash of the tensor's name (the top 24 bits of each draw).
fn weight(name: &str, shape: &[usize], scale: f64, offset: f64) -> Tensor {
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

/// The model with the reference's weights, by Hugging Face's names.
fn model() -> Llama {
    let spec = Llama::spec();
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
    Llama::from_weights(weights).expect("weights fit the model")
}

/// Rotary tables for positions `0..seq` (Hugging Face's layout: the frequencies twice) and the causal mask.
fn position_inputs(seq: usize, theta: f64) -> (Tensor, Tensor, Tensor) {
    let (mut cos, mut sin) = (Vec::new(), Vec::new());
    for pos in 0..seq {
        for i in 0..HEAD_DIM {
            let j = i % HALF;
            let inv_freq = 1.0 / theta.powf((2 * j) as f64 / HEAD_DIM as f64);
            let angle = pos as f64 * inv_freq;
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
    }
    let mask = (0..seq * seq)
        .map(|i| if i % seq > i / seq { -1e9 } else { 0.0 })
        .collect();
    let shape = [seq, HEAD_DIM];
    (
        Tensor::from_f32(&shape, cos).expect("cos"),
        Tensor::from_f32(&shape, sin).expect("sin"),
        Tensor::from_f32(&[seq, seq], mask).expect("mask"),
    )
}

/// The last position's logits for `tokens` (one sequence), recomputing the whole prefix.
fn last_logits(model: &Llama, mode: PlanMode, tokens: &[i64], theta: f64) -> Vec<f32> {
    let seq = tokens.len();
    let ids = Tensor::from_i64(&[1, seq], tokens.to_vec()).expect("ids");
    let (cos, sin, mask) = position_inputs(seq, theta);
    let logits = model
        .compiled()
        .run_one(mode, &[&ids, &cos, &sin, &mask])
        .expect("the model runs")
        .to_f32_vec();
    logits[(seq - 1) * VOCAB..].to_vec()
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
    // Hugging Face's names, so a real checkpoint loads by `Llama::load`.
    let names: Vec<&str> = Llama::spec().params.iter().map(|p| p.name).collect();
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

/// Greedy decoding through `fuse_runtime::generate`, all prompts in one batch, fused and eager plans: token for
/// token against transformers for 32 new tokens, and the logits at the recorded steps within f32 tolerance.
#[test]
fn greedy_continuation_matches_transformers() {
    let r = reference();
    let model = model();
    let theta = r.config["rope_theta"].as_f64().expect("rope_theta");
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
                let mut rows = Vec::new();
                for seq in sequences {
                    let logits = last_logits(&model, mode, seq, theta);
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
                    rows.push(logits);
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
