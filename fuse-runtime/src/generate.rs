//! Text generation over a model's next-token logits: greedy and sampled decoding (temperature, top-k, top-p, a
//! seeded RNG), stop tokens, a maximum length, and each token handed to the caller as it comes.
//!
//! The loop does not know how the logits are computed: the caller's `next_logits` gets every running sequence (its
//! prompt and the tokens generated so far) and returns each one's logits for the next token. A model without a KV
//! cache recomputes the prefix there; a stateful decoder feeds only the new token.
//!
//! Sampling follows Hugging Face's `generate` order: logits ÷ temperature, then top-k, then top-p (the smallest
//! set of most likely tokens whose probability reaches `top_p`, never empty), then one draw from the softmax of
//! what is left. Candidates are ordered by logit, ties by token id, so a seed gives the same tokens everywhere.

use std::ops::ControlFlow;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{Error, Result};

/// How each next token is chosen.
#[derive(Clone, Debug, PartialEq)]
pub enum Decoding {
    /// The most likely token (the lowest id among equals).
    Greedy,
    /// A draw from the model's distribution, reshaped.
    Sample(Sampling),
}

/// The knobs of sampled decoding.
#[derive(Clone, Debug, PartialEq)]
pub struct Sampling {
    /// Divides the logits: below 1 sharpens the distribution, above 1 flattens it. Must be positive.
    pub temperature: f32,
    /// Keep only the `k` most likely tokens (`None`: all).
    pub top_k: Option<usize>,
    /// Keep the most likely tokens until their probability reaches `p`, in (0, 1] (`None`: all).
    pub top_p: Option<f32>,
    /// The RNG's seed: the same seed, logits and options give the same tokens.
    pub seed: u64,
}

/// What to generate and when to stop.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateOptions {
    pub decoding: Decoding,
    /// The most tokens generated per sequence (the prompt not counted).
    pub max_new_tokens: usize,
    /// Tokens that end a sequence; the stop token itself is kept as its last token.
    pub stop_tokens: Vec<i64>,
}

/// Why a sequence ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// It produced one of the stop tokens.
    StopToken,
    /// It reached `max_new_tokens`.
    Length,
    /// The caller's token callback returned `ControlFlow::Break`.
    Caller,
}

/// One sequence's result: the generated tokens (without the prompt) and why it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generation {
    pub tokens: Vec<i64>,
    pub finish: Finish,
}

/// Picks next tokens from logits under one [`Decoding`]; owns the RNG of sampled decoding.
#[derive(Clone, Debug)]
pub struct Sampler {
    decoding: Decoding,
    rng: ChaCha8Rng,
}

impl Sampler {
    /// Checks the options: a temperature that is positive and finite, `top_k ≥ 1`, `top_p` in (0, 1].
    pub fn new(decoding: &Decoding) -> Result<Sampler> {
        let seed = match decoding {
            Decoding::Greedy => 0,
            Decoding::Sample(s) => {
                let bad = if !(s.temperature.is_finite() && s.temperature > 0.0) {
                    Some(format!(
                        "temperature must be positive and finite, got {}",
                        s.temperature
                    ))
                } else if s.top_k == Some(0) {
                    Some("top_k must be at least 1".to_string())
                } else if s.top_p.is_some_and(|p| !(p > 0.0 && p <= 1.0)) {
                    Some(format!("top_p must be in (0, 1], got {:?}", s.top_p))
                } else {
                    None
                };
                if let Some(why) = bad {
                    return Err(Error::Generation(why));
                }
                s.seed
            }
        };
        Ok(Sampler {
            decoding: decoding.clone(),
            rng: ChaCha8Rng::seed_from_u64(seed),
        })
    }

    /// The next token (an index into `logits`). Empty logits, a NaN or +∞ among them, or -∞ alone are an error:
    /// a wrong number upstream must not turn into a plausible token. (-∞ beside finite logits is a token ruled
    /// out, as a caller's mask writes it.)
    pub fn pick(&mut self, logits: &[f32]) -> Result<i64> {
        if logits.is_empty() {
            return Err(Error::Generation("the model returned no logits".into()));
        }
        if let Some(i) = logits
            .iter()
            .position(|v| v.is_nan() || *v == f32::INFINITY)
        {
            return Err(Error::Generation(format!(
                "logit {i} is {}; the model's output is not a distribution",
                logits[i]
            )));
        }
        if logits.iter().all(|&v| v == f32::NEG_INFINITY) {
            return Err(Error::Generation(
                "every logit is -inf: no token is possible".into(),
            ));
        }
        let s = match &self.decoding {
            Decoding::Greedy => return Ok(argmax(logits) as i64),
            Decoding::Sample(s) => s,
        };
        let probs = candidates(logits, s);
        let total: f64 = probs.iter().map(|&(_, p)| p).sum();
        let mut draw = self.rng.gen::<f64>() * total;
        for &(token, p) in &probs {
            if draw < p {
                return Ok(token as i64);
            }
            draw -= p;
        }
        // Rounding left the draw past the last candidate's share: it is the last one.
        Ok(probs.last().map_or(0, |&(t, _)| t) as i64)
    }
}

/// The lowest index of the largest value.
fn argmax(values: &[f32]) -> usize {
    values
        .iter()
        .enumerate()
        .fold(0, |best, (i, &v)| if v > values[best] { i } else { best })
}

/// The tokens sampling may pick, most likely first, with unnormalised probabilities (after temperature, top-k
/// and top-p).
fn candidates(logits: &[f32], s: &Sampling) -> Vec<(usize, f64)> {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    order.truncate(s.top_k.unwrap_or(order.len()).min(order.len()));
    let max = f64::from(logits[order[0]]);
    let t = f64::from(s.temperature);
    let mut probs: Vec<(usize, f64)> = order
        .into_iter()
        .map(|i| (i, ((f64::from(logits[i]) - max) / t).exp()))
        .collect();
    if let Some(p) = s.top_p {
        let total: f64 = probs.iter().map(|&(_, q)| q).sum();
        let mut cumulative = 0.0;
        let keep = probs
            .iter()
            .position(|&(_, q)| {
                cumulative += q / total;
                cumulative >= f64::from(p)
            })
            .map_or(probs.len(), |i| i + 1);
        probs.truncate(keep);
    }
    probs
}

/// Generates a continuation of each prompt. `next_logits(sequences)` returns, for each running sequence (prompt
/// followed by its tokens so far), the logits of its next token; `on_token(sequence index, token)` sees each
/// token as it is chosen and may stop that sequence. Sequences end on their own (a stop token, the length limit),
/// so a batch of prompts of different lengths gives each the tokens it gives alone when the logits of a sequence
/// do not depend on the others. Sampled decoding gives sequence `i` the seed `seed + i`.
pub fn generate_batch(
    prompts: &[Vec<i64>],
    options: &GenerateOptions,
    mut next_logits: impl FnMut(&[&[i64]]) -> Result<Vec<Vec<f32>>>,
    on_token: impl FnMut(usize, i64) -> ControlFlow<()>,
) -> Result<Vec<Generation>> {
    generate_batch_indexed(
        prompts,
        options,
        |_, sequences| next_logits(sequences),
        on_token,
    )
}

/// [`generate_batch`] whose `next_logits(running, sequences)` also gets each running sequence's index in
/// `prompts`: what a decoder with a KV cache needs, whose session keeps a row per prompt (prefill on the first
/// call, then one token per row per step).
pub fn generate_batch_indexed(
    prompts: &[Vec<i64>],
    options: &GenerateOptions,
    mut next_logits: impl FnMut(&[usize], &[&[i64]]) -> Result<Vec<Vec<f32>>>,
    mut on_token: impl FnMut(usize, i64) -> ControlFlow<()>,
) -> Result<Vec<Generation>> {
    let mut samplers = Vec::with_capacity(prompts.len());
    for i in 0..prompts.len() {
        let decoding = match &options.decoding {
            Decoding::Sample(s) => Decoding::Sample(Sampling {
                seed: s.seed.wrapping_add(i as u64),
                ..s.clone()
            }),
            greedy => greedy.clone(),
        };
        samplers.push(Sampler::new(&decoding)?);
    }
    let mut sequences = prompts.to_vec();
    let mut finished: Vec<Option<Finish>> = prompts
        .iter()
        .map(|_| (options.max_new_tokens == 0).then_some(Finish::Length))
        .collect();
    loop {
        let running: Vec<usize> = (0..prompts.len())
            .filter(|&i| finished[i].is_none())
            .collect();
        if running.is_empty() {
            break;
        }
        let views: Vec<&[i64]> = running.iter().map(|&i| sequences[i].as_slice()).collect();
        let logits = next_logits(&running, &views)?;
        if logits.len() != running.len() {
            return Err(Error::Generation(format!(
                "next_logits returned {} rows of logits for {} running sequences",
                logits.len(),
                running.len()
            )));
        }
        for (&i, row) in running.iter().zip(&logits) {
            let token = samplers[i].pick(row)?;
            sequences[i].push(token);
            let generated = sequences[i].len() - prompts[i].len();
            finished[i] = if on_token(i, token).is_break() {
                Some(Finish::Caller)
            } else if options.stop_tokens.contains(&token) {
                Some(Finish::StopToken)
            } else if generated >= options.max_new_tokens {
                Some(Finish::Length)
            } else {
                None
            };
        }
    }
    Ok(sequences
        .into_iter()
        .zip(prompts)
        .zip(finished)
        .map(|((seq, prompt), finish)| Generation {
            tokens: seq[prompt.len()..].to_vec(),
            finish: finish.unwrap_or(Finish::Length),
        })
        .collect())
}

/// [`generate_batch`] for one prompt: `next_logits(sequence)` returns its next token's logits.
pub fn generate(
    prompt: &[i64],
    options: &GenerateOptions,
    mut next_logits: impl FnMut(&[i64]) -> Result<Vec<f32>>,
    mut on_token: impl FnMut(i64) -> ControlFlow<()>,
) -> Result<Generation> {
    let mut out = generate_batch(
        &[prompt.to_vec()],
        options,
        |seqs| seqs.iter().map(|s| next_logits(s)).collect(),
        |_, token| on_token(token),
    )?;
    Ok(out.remove(0))
}

#[cfg(test)]
#[path = "generate_tests.rs"]
mod tests;
