//! MiniLM-L6 with the real checkpoint against sentence-transformers' own outputs (values to 1e-5), and batching:
//! a batch of sentences of different lengths embeds each one as it would alone. Skips, saying how to fetch the
//! checkpoint, when it is absent. And the embedder as a library: loading from a folder, token counts, the width.

use fuse_examples::minilm_run::{checkpoint_dir, cosine, SentenceEmbedder};

fn embedder() -> Option<SentenceEmbedder> {
    if !checkpoint_dir().join("model.safetensors").exists() {
        eprintln!(
            "skipped: no MiniLM checkpoint in {}; run scripts/fetch-minilm.sh",
            checkpoint_dir().display()
        );
        return None;
    }
    Some(SentenceEmbedder::load(checkpoint_dir()).expect("checkpoint loads"))
}

const FOX: &str = "The quick brown fox jumps over the lazy dog.";
const HELLO: &str = "Hello, world!";

#[test]
fn matches_sentence_transformers() {
    let Some(e) = embedder() else { return };
    let batch = e.tokenizer.encode_batch(&[FOX]).unwrap();
    assert_eq!(
        batch.input_ids,
        [101, 1996, 4248, 2829, 4419, 14523, 2058, 1996, 13971, 3899, 1012, 102]
    );
    let batch = e.tokenizer.encode_batch(&[HELLO]).unwrap();
    assert_eq!(batch.input_ids, [101, 7592, 1010, 2088, 999, 102]);

    let out = e.embed(&[FOX, HELLO]).unwrap();
    let expected: [(&[f32], f32); 2] = [
        (
            &[
                0.043934, 0.058934, 0.048178, 0.077548, 0.026744, -0.037630, -0.002605, -0.059943,
            ],
            0.153683,
        ),
        (
            &[
                -0.038177, 0.032911, -0.005459, 0.014370, -0.040291, -0.116533, 0.031688, 0.001912,
            ],
            0.596054,
        ),
    ];
    for (got, (head, sum)) in out.iter().zip(expected) {
        for (g, w) in got.iter().zip(head) {
            assert!(
                (g - w).abs() <= 1e-5,
                "embedding value {g} vs sentence-transformers {w}"
            );
        }
        let s: f32 = got.iter().sum();
        assert!((s - sum).abs() <= 1e-5, "sum {s} vs {sum}");
    }
    let c = cosine(&out[0], &out[1]);
    assert!((c - 0.104937).abs() <= 1e-5, "cosine {c}");
}

#[test]
fn batching_with_padding_matches_one_at_a_time() {
    let Some(e) = embedder() else { return };
    let sentences = [
        FOX,
        HELLO,
        "A much longer sentence, with more words in it than the others have, to force padding.",
    ];
    let together = e.embed(&sentences).unwrap();
    for (s, t) in sentences.iter().zip(&together) {
        let alone = &e.embed(&[s]).unwrap()[0];
        let diff = alone
            .iter()
            .zip(t)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(diff <= 2e-6, "{s:?}: batched differs from alone by {diff}");
    }
}

#[test]
fn the_embedder_loads_from_a_folder_and_counts_tokens() {
    let Some(e) = embedder() else { return };
    let long = "word ".repeat(400);
    let sentences = [FOX, HELLO, long.as_str()];
    let counted = e.embed_with_counts(&sentences).unwrap();
    let plain = e.embed(&sentences).unwrap();
    assert_eq!(counted.len(), 3);
    for (c, p) in counted.iter().zip(&plain) {
        assert_eq!(&c.values, p);
        assert_eq!(c.values.len(), e.width());
    }
    assert_eq!(e.width(), 384);
    // Each count is the sentence's own token count, tokenised alone; the long one is truncated.
    for (s, c) in sentences.iter().zip(&counted) {
        let alone = e.tokenizer.encode_batch(&[s]).unwrap().input_ids.len();
        assert_eq!(c.tokens, alone, "{s:.20}");
    }
    assert_eq!((counted[0].tokens, counted[1].tokens), (12, 6));
    assert_eq!(counted[2].tokens, fuse_examples::tokenize::MAX_TOKENS);
    // No sentences: a batch of none padded to no tokens, which the model itself returns as no embeddings.
    let none = e.tokenizer.encode_batch(&[]).unwrap();
    assert_eq!((none.batch, none.seq), (0, 0));
    assert_eq!(e.embed_batch(&none).unwrap().shape(), [0, 384]);
    assert!(e.embed_with_counts(&[]).unwrap().is_empty());

    let missing = std::env::temp_dir().join("no-minilm-here");
    let err = SentenceEmbedder::load(&missing)
        .err()
        .expect("no checkpoint there");
    assert!(
        err.to_string().contains(&*missing.to_string_lossy()),
        "{err}"
    );
}
