//! Running MiniLM on sentences: find the checkpoint, tokenise, build the four input tensors, embed.
//!
//! ```no_run
//! use fuse_examples::minilm_run::SentenceEmbedder;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let embedder = SentenceEmbedder::load("path/to/all-MiniLM-L6-v2")?; // model.safetensors + tokenizer.json
//! for e in embedder.embed_with_counts(&["A sentence.", "Another one."])? {
//!     println!("{} tokens -> {} values", e.tokens, e.values.len()); // values.len() == embedder.width()
//! }
//! # Ok(())
//! # }
//! ```

use std::path::{Path, PathBuf};

use fuse_runtime::Tensor;

use crate::models::minilm::minilm::{MiniLm, HIDDEN};
use crate::tokenize::{Batch, SentenceTokenizer};

/// Where `scripts/fetch-minilm.sh` puts the checkpoint; `FUSE_MINILM_DIR` overrides it.
pub fn checkpoint_dir() -> PathBuf {
    std::env::var_os("FUSE_MINILM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache/minilm"))
}

/// One sentence's embedding and the number of tokens it became.
#[derive(Clone, Debug, PartialEq)]
pub struct Embedding {
    /// Unit length, [`SentenceEmbedder::width`] values.
    pub values: Vec<f32>,
    /// Tokens embedded, `[CLS]` and `[SEP]` included; at most [`crate::tokenize::MAX_TOKENS`] (longer sentences
    /// are truncated, as sentence-transformers does).
    pub tokens: usize,
}

/// The model and its tokenizer.
pub struct SentenceEmbedder {
    pub model: MiniLm,
    pub tokenizer: SentenceTokenizer,
}

impl SentenceEmbedder {
    /// Loads `model.safetensors` and `tokenizer.json` from the folder `dir` (a checkpoint of
    /// sentence-transformers' all-MiniLM-L6-v2).
    pub fn load(dir: impl AsRef<Path>) -> Result<Self, Box<dyn std::error::Error>> {
        let dir = dir.as_ref();
        let tokenizer = SentenceTokenizer::from_dir(dir)?;
        let weights = dir.join("model.safetensors");
        let model = MiniLm::load(&weights)
            .map_err(|e| format!("{e}\n(fetch the checkpoint with scripts/fetch-minilm.sh)"))?;
        Ok(SentenceEmbedder { model, tokenizer })
    }

    /// [`SentenceEmbedder::load`] from [`checkpoint_dir`]: `FUSE_MINILM_DIR`, else where
    /// `scripts/fetch-minilm.sh` puts the checkpoint.
    pub fn load_default() -> Result<Self, Box<dyn std::error::Error>> {
        Self::load(checkpoint_dir())
    }

    /// Values per embedding: the model's hidden width (384).
    pub fn width(&self) -> usize {
        HIDDEN
    }

    /// One unit-length embedding ([`SentenceEmbedder::width`] values) per sentence, computed as one padded batch.
    pub fn embed(&self, sentences: &[&str]) -> Result<Vec<Vec<f32>>, Box<dyn std::error::Error>> {
        Ok(self
            .embed_with_counts(sentences)?
            .into_iter()
            .map(|e| e.values)
            .collect())
    }

    /// As [`SentenceEmbedder::embed`], with each sentence's token count.
    pub fn embed_with_counts(
        &self,
        sentences: &[&str],
    ) -> Result<Vec<Embedding>, Box<dyn std::error::Error>> {
        // No sentences are a batch of none padded to no tokens, which the model returns as no embeddings.
        let batch = self.tokenizer.encode_batch(sentences)?;
        let out = self.embed_batch(&batch)?;
        let width = *out.shape().last().ok_or("the model returned a scalar")?;
        let values = out.to_vec::<f32>()?;
        let counts = batch
            .attention_mask
            .chunks(batch.seq.max(1))
            .map(|row| row.iter().filter(|&&m| m != 0.0).count());
        Ok(values
            .chunks(width.max(1))
            .zip(counts)
            .map(|(values, tokens)| Embedding {
                values: values.to_vec(),
                tokens,
            })
            .collect())
    }

    pub fn embed_batch(&self, batch: &Batch) -> fuse_runtime::Result<Tensor> {
        let [ids, types, mask] = inputs(batch)?;
        self.model.forward(&ids, &types, &mask)
    }
}

/// The model's three input tensors for a tokenised batch.
pub fn inputs(batch: &Batch) -> fuse_runtime::Result<[Tensor; 3]> {
    let shape = [batch.batch, batch.seq];
    Ok([
        Tensor::from_i64(&shape, batch.input_ids.clone())?,
        Tensor::from_i64(&shape, batch.token_type_ids.clone())?,
        Tensor::from_f32(&shape, batch.attention_mask.clone())?,
    ])
}

pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}
