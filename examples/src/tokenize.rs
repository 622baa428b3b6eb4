//! Sentence tokenisation for the MiniLM example: `tokenizer.json` (BERT WordPiece) → the model's four inputs.
//!
//! It reproduces sentence-transformers' batching, which differs from what the file itself asks for: the file pads
//! and truncates every sentence to 128 tokens, sentence-transformers pads to the longest sentence of the batch and
//! truncates at 256 (`max_seq_length`). Both are overridden here; the file's pad token and truncation strategy are
//! kept.

use std::fmt;
use std::path::{Path, PathBuf};

use tokenizers::{PaddingStrategy, Tokenizer};

/// sentence-transformers' `max_seq_length` for all-MiniLM-L6-v2 (the checkpoint has 512 positions).
pub const MAX_TOKENS: usize = 256;

/// The model inputs for a batch of sentences, each row-major `[batch, seq]`, padded to the longest sentence.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub batch: usize,
    pub seq: usize,
    pub input_ids: Vec<i64>,
    pub token_type_ids: Vec<i64>,
    /// 1.0 for real tokens, 0.0 for padding (f32 because the model turns it into the attention bias directly).
    pub attention_mask: Vec<f32>,
}

#[derive(Debug)]
pub enum TokenizeError {
    /// The checkpoint folder lacks `tokenizer.json`.
    Missing { path: PathBuf },
    /// `tokenizer.json` exists but the `tokenizers` crate rejected it.
    Load { path: PathBuf, message: String },
    /// Encoding failed (the `tokenizers` crate's message).
    Encode { message: String },
}

impl fmt::Display for TokenizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenizeError::Missing { path } => write!(
                f,
                "{} not found; run scripts/fetch-minilm.sh to download the MiniLM checkpoint",
                path.display()
            ),
            TokenizeError::Load { path, message } => {
                write!(f, "cannot load {}: {message}", path.display())
            }
            TokenizeError::Encode { message } => write!(f, "tokenisation failed: {message}"),
        }
    }
}

impl std::error::Error for TokenizeError {}

pub struct SentenceTokenizer {
    inner: Tokenizer,
}

impl SentenceTokenizer {
    /// Loads `dir/tokenizer.json` (the folder `scripts/fetch-minilm.sh` fills, `.cache/minilm`).
    pub fn from_dir(dir: &Path) -> Result<Self, TokenizeError> {
        let path = dir.join("tokenizer.json");
        if !path.is_file() {
            return Err(TokenizeError::Missing { path });
        }
        let load_error = |e: &dyn fmt::Display| TokenizeError::Load {
            path: path.clone(),
            message: e.to_string(),
        };
        let mut inner = Tokenizer::from_file(&path).map_err(|e| load_error(&e))?;
        let mut padding = inner.get_padding().cloned().unwrap_or_default();
        padding.strategy = PaddingStrategy::BatchLongest;
        inner.with_padding(Some(padding));
        let mut truncation = inner.get_truncation().cloned().unwrap_or_default();
        truncation.max_length = MAX_TOKENS;
        inner
            .with_truncation(Some(truncation))
            .map_err(|e| load_error(&e))?;
        Ok(SentenceTokenizer { inner })
    }

    /// Tokenises `sentences` with `[CLS]`/`[SEP]`. An empty slice gives an empty batch (`batch == seq == 0`).
    pub fn encode_batch(&self, sentences: &[&str]) -> Result<Batch, TokenizeError> {
        let encodings = self
            .inner
            .encode_batch(sentences.to_vec(), true)
            .map_err(|e| TokenizeError::Encode {
                message: e.to_string(),
            })?;
        let seq = encodings.first().map_or(0, |e| e.len());
        let mut out = Batch {
            batch: encodings.len(),
            seq,
            input_ids: Vec::with_capacity(encodings.len() * seq),
            token_type_ids: Vec::with_capacity(encodings.len() * seq),
            attention_mask: Vec::with_capacity(encodings.len() * seq),
        };
        for enc in &encodings {
            // BatchLongest padding makes every row `seq` long; a row that is not would corrupt the layout.
            if enc.len() != seq {
                return Err(TokenizeError::Encode {
                    message: format!("rows of {} and {seq} tokens in one batch", enc.len()),
                });
            }
            out.input_ids
                .extend(enc.get_ids().iter().map(|&id| i64::from(id)));
            out.token_type_ids
                .extend(enc.get_type_ids().iter().map(|&t| i64::from(t)));
            out.attention_mask
                .extend(enc.get_attention_mask().iter().map(|&m| m as f32));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checkpoint folder, or `None` (the test is skipped) when `scripts/fetch-minilm.sh` has not run.
    fn checkpoint() -> Option<PathBuf> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.cache/minilm");
        let found = dir.join("tokenizer.json").is_file();
        if !found {
            eprintln!("skipped: no {}; run scripts/fetch-minilm.sh", dir.display());
        }
        found.then_some(dir)
    }

    #[test]
    fn missing_file_names_the_fetch_script() {
        let err = SentenceTokenizer::from_dir(Path::new("/nonexistent/minilm"))
            .err()
            .expect("no tokenizer there");
        let msg = err.to_string();
        assert!(msg.contains("/nonexistent/minilm/tokenizer.json"), "{msg}");
        assert!(msg.contains("scripts/fetch-minilm.sh"), "{msg}");
    }

    /// The ids sentence-transformers gives for these sentences, padded to the longer one (not to 128).
    #[test]
    fn matches_sentence_transformers_ids() {
        let Some(dir) = checkpoint() else { return };
        let tok = SentenceTokenizer::from_dir(&dir).unwrap();
        let b = tok
            .encode_batch(&[
                "The quick brown fox jumps over the lazy dog.",
                "Hello, world!",
            ])
            .unwrap();
        assert_eq!((b.batch, b.seq), (2, 12));
        let fox = [
            101, 1996, 4248, 2829, 4419, 14523, 2058, 1996, 13971, 3899, 1012, 102,
        ];
        let hello = [101, 7592, 1010, 2088, 999, 102, 0, 0, 0, 0, 0, 0];
        assert_eq!(b.input_ids[..12], fox);
        assert_eq!(b.input_ids[12..], hello);
        assert!(b.token_type_ids.iter().all(|&t| t == 0));
        let mask = &b.attention_mask[12..];
        assert_eq!(mask, [[1.0; 6], [0.0; 6]].concat());
    }

    #[test]
    fn truncates_at_256_tokens() {
        let Some(dir) = checkpoint() else { return };
        let tok = SentenceTokenizer::from_dir(&dir).unwrap();
        let long = "word ".repeat(400);
        let b = tok.encode_batch(&[&long, "short"]).unwrap();
        assert_eq!((b.batch, b.seq), (2, MAX_TOKENS));
        assert_eq!(
            b.input_ids[MAX_TOKENS - 1],
            102,
            "[SEP] survives truncation"
        );
    }
}
