//! A Llama (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU, untied `lm_head`) written as one
//! `#[fused_model]` with Hugging Face's parameter names, against `transformers`' `LlamaForCausalLM` on the same
//! weights: the greedy continuation of each prompt, token for token, and the logits at several steps.
//!
//! The reference is `tests/data/llama_greedy.json`, made by `scripts/llama_reference.py` (which says how); the
//! weights come from the generator that script uses, repeated in [`weight`], so no checkpoint is committed. The
//! model has no KV cache yet: each step runs the whole prefix again (positions, rotary tables and the causal mask
//! are inputs), which is what the reference's logits were computed with too. The prompts run as one left-padded
//! batch, so the test also shows that a batch of prompts of different lengths gives each its own tokens.

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

        /// Hugging Face's `x * cos + rotate_half(x) * sin`, `rotate_half(x) = [-x2, x1]`; `cos`/`sin` are
        /// `[batch, 1, seq, HEAD_DIM]`.
        fn rope(&self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor {
            let x1 = x.slice(3, 0, HALF);
            let x2 = x.slice(3, HALF, HEAD_DIM);
            let rotated = concat([x2.neg(), x1], 3);
            x * &cos + rotated * &sin
        }

        pub fn forward(&self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor) -> Tensor {
            let (b, s) = (x.dim(0), x.dim(1));
            let (cos, sin) = (
                cos.reshape([b, 1, s, HEAD_DIM]),
                sin.reshape([b, 1, s, HEAD_DIM]),
            );
            let mask = mask.reshape([b, 1, 1, s, s]);
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
        /// `cos`/`sin`: the rotary tables at each token's position; `mask`: 0 where a token may attend, a large
        /// negative number where it may not (later tokens, padding). Returns the logits `[batch, seq, VOCAB]`.
        pub fn forward(
            &self,
            #[shape(batch, seq)] ids: Tensor<i64>,
            #[shape(batch, seq, HEAD_DIM)] cos: Tensor,
            #[shape(batch, seq, HEAD_DIM)] sin: Tensor,
            #[shape(batch, seq, seq)] mask: Tensor,
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

/// The inputs for a batch of sequences of different lengths, left-padded to the longest (as Hugging Face pads for
/// generation): ids (0 in the padding), the rotary tables at each token's position (counted from its first real
/// token) and a mask that lets a token see itself and the real tokens before it. Every sequence's last token is in
/// the last column.
fn batch_inputs(sequences: &[&[i64]], theta: f64) -> [Tensor; 4] {
    let batch = sequences.len();
    let seq = sequences.iter().map(|s| s.len()).max().unwrap_or(0);
    let (mut ids, mut cos, mut sin, mut mask) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for tokens in sequences {
        let pad = seq - tokens.len();
        ids.extend(std::iter::repeat_n(0, pad).chain(tokens.iter().copied()));
        for col in 0..seq {
            let pos = col.saturating_sub(pad);
            for i in 0..HEAD_DIM {
                let inv_freq = 1.0 / theta.powf((2 * (i % HALF)) as f64 / HEAD_DIM as f64);
                let angle = pos as f64 * inv_freq;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        for row in 0..seq {
            for col in 0..seq {
                let visible = col == row || (col >= pad && col < row);
                mask.push(if visible { 0.0 } else { -1e9 });
            }
        }
    }
    let table = [batch, seq, HEAD_DIM];
    [
        Tensor::from_i64(&[batch, seq], ids).expect("ids"),
        Tensor::from_f32(&table, cos).expect("cos"),
        Tensor::from_f32(&table, sin).expect("sin"),
        Tensor::from_f32(&[batch, seq, seq], mask).expect("mask"),
    ]
}

/// Each sequence's next-token logits, the whole batch in one run (recomputing every prefix).
fn next_logits(model: &Llama, mode: PlanMode, sequences: &[&[i64]], theta: f64) -> Vec<Vec<f32>> {
    let inputs = batch_inputs(sequences, theta);
    let seq = inputs[0].shape()[1];
    let logits = model
        .compiled()
        .run_one(mode, &inputs.iter().collect::<Vec<_>>())
        .expect("the model runs")
        .to_f32_vec();
    (0..sequences.len())
        .map(|b| logits[((b + 1) * seq - 1) * VOCAB..(b + 1) * seq * VOCAB].to_vec())
        .collect()
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

/// Greedy decoding through `fuse_runtime::generate`, the three prompts (5, 2 and 9 tokens) left-padded into one
/// batch, fused and eager plans: each prompt's 32 new tokens equal what transformers generates for it alone, and
/// its logits at the recorded steps agree within f32 tolerance.
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
                let rows = next_logits(&model, mode, sequences, theta);
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
