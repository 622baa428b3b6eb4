//! Generates tokens with the example Llama (`examples/src/models/llama.rs`), printing each as it comes.
//!
//! ```text
//! generate [--model tiny|smollm] [--weights model.safetensors] [--prompt 1,17,42] [--max-new 32]
//!          [--temperature T] [--top-k K] [--top-p P] [--seed S] [--stop 2,0]
//! generate --bench [--json]      benchmark W5's prefill: SmolLM-135M's shape, 128 tokens, batch 1
//!                                (FUSE_PROFILE=1: its slowest kernels too)
//! ```
//! Without `--weights` the model has seeded random weights (`--seed`), so the tokens are a demonstration of the
//! loop, not of language. With no sampling option, decoding is greedy. There is no tokenizer: prompts and output
//! are token ids. There is no KV cache yet: each step runs the whole sequence again.

use std::ops::ControlFlow;

use fuse_examples::models::llama::{inputs, last_logits, smollm::SmolLm, tiny::TinyLlama};
use fuse_examples::timing::{cpu_line, json_line, sample_ms, threads};
use fuse_runtime::generate::{generate, Decoding, GenerateOptions, Sampler, Sampling};
use fuse_runtime::{CompiledModel, PlanMode, Tensor};

/// Rotary base of both configurations (Hugging Face's Llama default, and SmolLM-135M's).
const THETA: f64 = 10_000.0;

/// A loaded configuration: its compiled model, head width and vocabulary.
struct Loaded {
    model: CompiledModel,
    head_dim: usize,
    vocab: usize,
}

fn load(
    name: &str,
    weights: Option<&str>,
    seed: u64,
) -> Result<Loaded, Box<dyn std::error::Error>> {
    use fuse_examples::models::llama::{smollm, tiny};
    Ok(match name {
        "tiny" => Loaded {
            model: match weights {
                Some(path) => TinyLlama::load(path)?,
                None => TinyLlama::try_random(seed)?,
            }
            .into_compiled(),
            head_dim: tiny::HEAD_DIM,
            vocab: tiny::VOCAB,
        },
        "smollm" => Loaded {
            model: match weights {
                Some(path) => SmolLm::load(path)?,
                None => SmolLm::try_random(seed)?,
            }
            .into_compiled(),
            head_dim: smollm::HEAD_DIM,
            vocab: smollm::VOCAB,
        },
        other => return Err(format!("unknown model `{other}`: tiny or smollm").into()),
    })
}

/// The next-token logits of one sequence (the whole prefix run again).
fn next_logits(m: &Loaded, sequence: &[i64]) -> fuse_runtime::Result<Vec<f32>> {
    let inputs = inputs(&[sequence], m.head_dim, THETA)?;
    let logits = m
        .model
        .run_one(PlanMode::Fused, &inputs.iter().collect::<Vec<_>>())?;
    Ok(last_logits(&logits, m.vocab).remove(0))
}

fn ids(list: &str) -> Result<Vec<i64>, String> {
    list.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.trim()
                .parse()
                .map_err(|_| format!("`{s}` is not a token id"))
        })
        .collect()
}

/// W5's prefill: one forward over 128 tokens at batch 1, SmolLM-135M's shape, seeded weights.
fn bench(json: bool) -> Result<(), Box<dyn std::error::Error>> {
    let m = load("smollm", None, 1)?;
    let prompt: Vec<i64> = (0..128).map(|i| (i * 7919 % m.vocab) as i64).collect();
    let inputs = inputs(&[&prompt], m.head_dim, THETA)?;
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let runs = 5;
    for mode in [PlanMode::Fused, PlanMode::Eager] {
        let sample = sample_ms(runs, || m.model.run_one(mode, &refs).map(drop))?;
        let name = if mode == PlanMode::Fused {
            "fused"
        } else {
            "eager"
        };
        if json {
            let mut line = json_line("W5", name, sample, runs);
            line["phase"] = "prefill".into();
            line["tokens"] = 128.into();
            println!("{line}");
        } else {
            println!(
                "W5 prefill (SmolLM-135M shape, 128 tokens, batch 1), {name}: {:.1} ms (min {:.1}, max {:.1})",
                sample.median, sample.min, sample.max
            );
        }
    }
    if !json {
        println!("cpu: {}\nthreads: {}", cpu_line(), threads());
    }
    if std::env::var_os("FUSE_PROFILE").is_some() {
        // The kernels taking most of the fused prefill, summed over the layers by kernel function.
        let mut rows = m.model.profile(PlanMode::Fused, &refs, 3)?;
        rows.sort_by(|a, b| b.1.total_cmp(&a.1));
        for (name, ms) in rows.iter().take(12) {
            println!("  {name:<24} {ms:8.3} ms");
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--bench") {
        return bench(args.iter().any(|a| a == "--json"));
    }
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .map(String::as_str)
    };
    let number = |flag: &str| -> Result<Option<f64>, String> {
        value(flag)
            .map(|v| {
                v.parse()
                    .map_err(|_| format!("{flag} takes a number, got `{v}`"))
            })
            .transpose()
    };
    let seed = number("--seed")?.unwrap_or(0.0) as u64;
    let m = load(value("--model").unwrap_or("tiny"), value("--weights"), seed)?;
    let prompt = ids(value("--prompt").unwrap_or("1"))?;
    let (temperature, top_k, top_p) = (
        number("--temperature")?,
        number("--top-k")?,
        number("--top-p")?,
    );
    let decoding = if temperature.is_none() && top_k.is_none() && top_p.is_none() {
        Decoding::Greedy
    } else {
        Decoding::Sample(Sampling {
            temperature: temperature.unwrap_or(1.0) as f32,
            top_k: top_k.map(|k| k as usize),
            top_p: top_p.map(|p| p as f32),
            seed,
        })
    };
    let options = GenerateOptions {
        decoding,
        max_new_tokens: number("--max-new")?.unwrap_or(32.0) as usize,
        stop_tokens: ids(value("--stop").unwrap_or(""))?,
    };
    // Options out of range are refused before anything is printed.
    Sampler::new(&options.decoding)?;
    print!(
        "{}",
        prompt
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );
    let done = generate(
        &prompt,
        &options,
        |sequence| next_logits(&m, sequence),
        |token| {
            use std::io::Write;
            print!(" {token}");
            let _ = std::io::stdout().flush();
            ControlFlow::Continue(())
        },
    )?;
    println!(
        "\n({} new tokens, finished by {:?})",
        done.tokens.len(),
        done.finish
    );
    Ok(())
}
