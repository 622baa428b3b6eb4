//! Example models compiled by fuse. Each lives in `models/` as a `#[fused_model]` module.

pub mod minilm_run;
pub mod timing;
pub mod tokenize;

pub mod models {
    pub mod chain;
    pub mod clip_text;
    pub mod encoder;
    pub mod gpt2;
    pub mod layers;
    pub mod llama;
    pub mod minilm;
    pub mod mlp;
    pub mod mpnet;
    pub mod relative_bias;
    pub mod roberta;
    pub mod t5;
    pub mod vit;
}
