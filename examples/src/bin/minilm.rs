//! Sentence embeddings with all-MiniLM-L6-v2, compiled by fuse. Fetch the checkpoint once with
//! `scripts/fetch-minilm.sh`, then: `cargo run --release -p fuse-examples --bin minilm -- "A sentence." "Another."`
//! With no sentences it embeds a few built-in ones; `--bench` times batch 8 × sequence 128 (workload W4), and
//! `--bench --json` prints its figures as one JSON object per plan mode (`--precision int8`: the weight GEMMs in
//! int8, `CompiledModel::with_cpu_precision`); `--drift` prints the drift report of the
//! sentences' batch (fused and eager plans against the f64 reference).

use fuse_examples::minilm_run::{cosine, inputs, SentenceEmbedder};
use fuse_examples::timing::{cpu_line, json_line, precision_arg, sample_ms, threads};
use fuse_examples::tokenize::Batch;
use fuse_runtime::PlanMode;
use fuse_tests::drift::{self, Tolerance};

/// Timed calls per figure of `--bench`.
const RUNS: usize = 10;

const BUILT_IN: [&str; 4] = [
    "The quick brown fox jumps over the lazy dog.",
    "A fast auburn fox leaps over a sleepy hound.",
    "Hello, world!",
    "Rust compiles models at build time.",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let precision = precision_arg(&mut args)?;
    let mut embedder = SentenceEmbedder::load_default()?;
    embedder.model = embedder.model.with_cpu_precision(precision)?;
    if args.iter().any(|a| a == "--bench") {
        return bench(&embedder, args.iter().any(|a| a == "--json"));
    }
    let drift = args.iter().any(|a| a == "--drift");
    let given: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| *a != "--drift")
        .collect();
    let sentences: Vec<&str> = if given.is_empty() {
        BUILT_IN.to_vec()
    } else {
        given
    };
    if drift {
        let batch = embedder.tokenizer.encode_batch(&sentences)?;
        let inputs = inputs(&batch)?;
        let refs: Vec<&fuse_runtime::Tensor> = inputs.iter().collect();
        let report = drift::check(embedder.model.compiled(), &refs, Tolerance::default())?;
        println!("{report}");
        return Ok(());
    }
    let counted = embedder.embed_with_counts(&sentences)?;
    for (s, e) in sentences.iter().zip(&counted) {
        let head: Vec<String> = e
            .values
            .iter()
            .take(8)
            .map(|v| format!("{v:+.6}"))
            .collect();
        println!(
            "{s:?} ({} tokens)\n  [{}, ...] sum {:+.6}",
            e.tokens,
            head.join(", "),
            e.values.iter().sum::<f32>()
        );
    }
    let embeddings: Vec<Vec<f32>> = counted.into_iter().map(|e| e.values).collect();
    println!("\ncosine similarity:");
    for (i, a) in embeddings.iter().enumerate() {
        let row: Vec<String> = embeddings
            .iter()
            .map(|b| format!("{:6.3}", cosine(a, b)))
            .collect();
        println!("  {i}: {}", row.join(" "));
    }
    Ok(())
}

/// W4: batch 8 × sequence 128 of real token ids, fused vs eager, in one run.
fn bench(embedder: &SentenceEmbedder, as_json: bool) -> Result<(), Box<dyn std::error::Error>> {
    let (b, s) = (8, 128);
    let batch = Batch {
        batch: b,
        seq: s,
        input_ids: (0..b * s)
            .map(|i| {
                if i % s == 0 {
                    101
                } else {
                    1000 + (i * 7919 % 29000) as i64
                }
            })
            .collect(),
        token_type_ids: vec![0; b * s],
        attention_mask: vec![1.0; b * s],
    };
    let inputs = inputs(&batch)?;
    let refs: Vec<&fuse_runtime::Tensor> = inputs.iter().collect();
    let model = embedder.model.compiled();
    let start = std::time::Instant::now();
    model.run(PlanMode::Fused, &refs)?;
    let first = start.elapsed().as_secs_f64() * 1e3;
    let fused = sample_ms(RUNS, || model.run(PlanMode::Fused, &refs).map(drop))?;
    let eager = sample_ms(RUNS, || model.run(PlanMode::Eager, &refs).map(drop))?;
    let mut outputs = Vec::new();
    let fused_reuse = sample_ms(RUNS, || {
        model.run_into(PlanMode::Fused, &refs, &mut outputs)
    })?;
    let cpu = cpu_line();
    if as_json {
        for (mode, sample) in [("fused", fused), ("eager", eager)] {
            let mut line = json_line("W4", mode, sample, RUNS);
            line["precision"] = serde_json::json!(model.cpu_precision().to_string());
            if mode == "fused" {
                // The process's first call ran the fused plan.
                line["first_call_ms"] = serde_json::json!(first);
                line["reused_output_median_ms"] = serde_json::json!(fused_reuse.median);
            }
            println!("{line}");
        }
    } else {
        println!("cpu: {cpu}\nthreads: {}", threads());
        println!(
            "W4 MiniLM-L6 b{b} s{s} {}: fused {:.2} ms (output reused {:.2}), eager {:.2} ms ({:.2}x), first call {first:.2} ms",
            model.cpu_precision(),
            fused.median,
            fused_reuse.median,
            eager.median,
            eager.median / fused.median
        );
    }
    if std::env::var_os("FUSE_PROFILE").is_some() {
        let mut rows = model.profile(PlanMode::Fused, &refs, 5)?;
        rows.sort_by(|a, b| b.1.total_cmp(&a.1));
        for (name, ms) in rows.iter().take(12) {
            println!("  {name:<24} {ms:8.3} ms");
        }
    }
    Ok(())
}
