//! Running MiniLM on sentences: find the checkpoint, tokenise, build the four input tensors, embed.

use std::path::PathBuf;

use fuse_runtime::Tensor;

use crate::models::minilm::minilm::MiniLm;
use crate::tokenize::{Batch, SentenceTokenizer};

/// Where `scripts/fetch-minilm.sh` puts the checkpoint; `FUSE_MINILM_DIR` overrides it.
pub fn checkpoint_dir() -> PathBuf {
    std::env::var_os("FUSE_MINILM_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache/minilm"))
}

/// The model and its tokenizer, loaded from `checkpoint_dir()`.
pub struct SentenceEmbedder {
    pub model: MiniLm,
    pub tokenizer: SentenceTokenizer,
}

impl SentenceEmbedder {
    pub fn load() -> Result<Self, Box<dyn std::error::Error>> {
        let dir = checkpoint_dir();
        let tokenizer = SentenceTokenizer::from_dir(&dir)?;
        let weights = dir.join("model.safetensors");
        let model = MiniLm::load(&weights)
            .map_err(|e| format!("{e}\n(fetch the checkpoint with scripts/fetch-minilm.sh)"))?;
        Ok(SentenceEmbedder { model, tokenizer })
    }

    /// One unit-length embedding (384 values) per sentence, computed as one padded batch.
    pub fn embed(&self, sentences: &[&str]) -> Result<Vec<Vec<f32>>, Box<dyn std::error::Error>> {
        let batch = self.tokenizer.encode_batch(sentences)?;
        let out = self.embed_batch(&batch)?;
        Ok(out.to_f32_vec().chunks(384).map(<[f32]>::to_vec).collect())
    }

    pub fn embed_batch(&self, batch: &Batch) -> fuse_runtime::Result<Tensor> {
        let [ids, types, positions, mask] = inputs(batch)?;
        self.model.forward(&ids, &types, &positions, &mask)
    }
}

/// The model's four input tensors for a tokenised batch.
pub fn inputs(batch: &Batch) -> fuse_runtime::Result<[Tensor; 4]> {
    let shape = [batch.batch, batch.seq];
    Ok([
        Tensor::from_i64(&shape, batch.input_ids.clone())?,
        Tensor::from_i64(&shape, batch.token_type_ids.clone())?,
        Tensor::from_i64(&shape, batch.position_ids.clone())?,
        Tensor::from_f32(&shape, batch.attention_mask.clone())?,
    ])
}

pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}
