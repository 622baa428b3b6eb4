//! MiniLM-L6 with the real checkpoint in int8, bf16 and f16 (`CpuPrecision`) against the same model in f32: the
//! cosine of each sentence's embedding to its f32 one, over the README's and the example's sentences plus
//! sentences generated from seeded word combinations. Skips when the checkpoint is absent
//! (`scripts/fetch-minilm.sh`).
//!
//! The bounds are the targets. int8: each sentence ≥ 0.995, the mean ≥ 0.999. Measured: mean 0.99922,
//! worst 0.99595 ("Another."), with activations quantised per group of 128 depths, 256 in the 1536-deep FFN
//! output (`int8::activation_group`); with 128 there too, 0.99923 and 0.99603. One scale
//! per whole row measured mean 0.99872, worst 0.99468, short of both; a symmetric activation scale 0.99689 /
//! 0.98616; ONNX Runtime's dynamic int8 a mean of 0.9825 on the same model (BENCHMARKS.md). bf16: each sentence
//! ≥ 0.9995. f16 (weights only; the activations stay f32): each sentence ≥ 0.99999.

use fuse_examples::minilm_run::{checkpoint_dir, cosine, SentenceEmbedder};
use fuse_runtime::CpuPrecision;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const WRITTEN: [&str; 6] = [
    "A sentence.",
    "Another.",
    "The quick brown fox jumps over the lazy dog.",
    "A fast auburn fox leaps over a sleepy hound.",
    "Hello, world!",
    "Rust compiles models at build time.",
];

/// `count` sentences of 3 to 30 words drawn with a seeded generator: subject, verb, object, then optional
/// clauses, so lengths, vocabulary and punctuation vary without being chosen by hand.
fn generated(count: usize, seed: u64) -> Vec<String> {
    let subjects = [
        "the committee",
        "my neighbour",
        "a small robot",
        "the old lighthouse keeper",
        "researchers",
        "the city council",
        "every student",
        "a hungry cat",
        "the orchestra",
        "our new compiler",
        "the river",
        "a tired engineer",
        "the museum",
        "two children",
        "the satellite",
    ];
    let verbs = [
        "approved",
        "painted",
        "ignored",
        "measured",
        "repaired",
        "sold",
        "described",
        "predicted",
        "carried",
        "translated",
        "photographed",
        "rebuilt",
        "questioned",
        "celebrated",
        "forgot",
    ];
    let objects = [
        "the budget",
        "a bright red door",
        "the storm warning",
        "three ancient maps",
        "the last train",
        "an unexpected result",
        "the garden fence",
        "a quiet melody",
        "the broken bridge",
        "twelve green apples",
        "the quarterly report",
        "a strange signal",
        "the mountain path",
    ];
    let tails = [
        "yesterday",
        "after the long meeting",
        "because nobody else would",
        "in the rain",
        "with remarkable care",
        "before sunrise on Tuesday",
        "although it was expensive",
        "for the third time this year",
        "while the market was closed",
        "near the harbour",
        "without asking anyone",
        "and then went home",
        "despite the noise",
        "at 3 p.m.",
    ];
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut pick = |words: &[&'static str]| words[rng.gen_range(0..words.len())];
    (0..count)
        .map(|i| {
            let mut s = format!("{} {} {}", pick(&subjects), pick(&verbs), pick(&objects));
            for _ in 0..i % 4 {
                s.push(' ');
                s.push_str(pick(&tails));
            }
            let mut chars = s.chars();
            let first = chars.next().unwrap().to_uppercase().collect::<String>();
            let end = if i % 5 == 0 { "?" } else { "." };
            format!("{first}{}{end}", chars.as_str())
        })
        .collect()
}

/// Embeds every sentence in f32 and in `precision`; returns each sentence's cosine between the two and prints the
/// mean and the worst. `None` (with a message) when the checkpoint is absent.
fn cosines_to_f32(precision: CpuPrecision) -> Option<(Vec<String>, Vec<f32>)> {
    if !checkpoint_dir().join("model.safetensors").exists() {
        eprintln!(
            "skipped: no MiniLM checkpoint in {}; run scripts/fetch-minilm.sh",
            checkpoint_dir().display()
        );
        return None;
    }
    let e = SentenceEmbedder::load(checkpoint_dir()).expect("checkpoint loads");
    let sentences: Vec<String> = WRITTEN
        .iter()
        .map(|s| s.to_string())
        .chain(generated(60, 2026))
        .collect();
    // Batches of a few sentences, as a server would see them (padding differs per batch).
    let embed = |e: &SentenceEmbedder| -> Vec<Vec<f32>> {
        sentences
            .chunks(8)
            .flat_map(|c| {
                e.embed(&c.iter().map(String::as_str).collect::<Vec<_>>())
                    .unwrap()
            })
            .collect()
    };
    let exact = embed(&e);
    let SentenceEmbedder { model, tokenizer } = e;
    let reduced = SentenceEmbedder {
        model: model.with_cpu_precision(precision).unwrap(),
        tokenizer,
    };
    let report = reduced.model.compiled().device_report();
    assert!(report.contains(&format!("{precision} GEMMs")), "{report}");
    // bf16 and f16 hold the two gathered embedding tables (words, token types) in that precision; int8 keeps
    // them in f32. (The positions are a view of their table's first rows, read by the norm's kernel.)
    let half_tables = format!("2 embedding gather(s) read rows from a {precision} pack");
    assert_eq!(
        report.contains(&half_tables),
        precision != CpuPrecision::Int8,
        "{report}"
    );
    let approx = embed(&reduced);
    let cosines: Vec<f32> = exact
        .iter()
        .zip(&approx)
        .map(|(a, b)| cosine(a, b))
        .collect();
    let mean = cosines.iter().sum::<f32>() / cosines.len() as f32;
    let (worst, at) = cosines
        .iter()
        .enumerate()
        .map(|(i, &c)| (c, i))
        .fold((f32::INFINITY, 0), |m, c| if c.0 < m.0 { c } else { m });
    eprintln!(
        "{precision} vs f32 over {} sentences: mean cosine {mean:.6}, worst {worst:.6} ({:?})",
        sentences.len(),
        sentences[at]
    );
    // Not trivially equal: the reduced precision did run.
    assert!(cosines.iter().any(|&c| c < 0.999_999_9));
    Some((sentences, cosines))
}

#[test]
fn int8_embeddings_stay_close_to_f32() {
    let Some((sentences, cosines)) = cosines_to_f32(CpuPrecision::Int8) else {
        return;
    };
    for (s, c) in sentences.iter().zip(&cosines) {
        assert!(*c >= 0.995, "{s:?}: cosine {c}");
    }
    let mean = cosines.iter().sum::<f32>() / cosines.len() as f32;
    assert!(mean >= 0.999, "mean cosine {mean}");
}

#[test]
fn bf16_embeddings_stay_close_to_f32() {
    let Some((sentences, cosines)) = cosines_to_f32(CpuPrecision::Bf16) else {
        return;
    };
    for (s, c) in sentences.iter().zip(&cosines) {
        assert!(*c >= 0.9995, "{s:?}: cosine {c}");
    }
}

#[test]
fn f16_embeddings_stay_closer_to_f32_than_bf16() {
    let Some((sentences, cosines)) = cosines_to_f32(CpuPrecision::F16) else {
        return;
    };
    // 11 significant bits against bf16's 8: each rounding error is 8 times smaller, so 1 − cosine (which grows
    // with the square of the error) is about 64 times smaller than bf16's 3.3e-5 at worst.
    for (s, c) in sentences.iter().zip(&cosines) {
        assert!(*c >= 0.99999, "{s:?}: cosine {c}");
    }
}
