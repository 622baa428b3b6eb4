#!/usr/bin/env python3
"""Hidden states and pooled outputs of a small CLIP text tower by Hugging Face transformers: the reference for fuse's
CLIP test.

The model is `CLIPTextModel` in a small configuration (causal attention, quick GELU, pre-norm layers, a final norm)
with `eos_token_id` 2, as openai/clip-vit-base-patch32's configuration has it, so its pooled output is the last
hidden row at the first position of each sequence's largest id. Its weights are drawn by the generator
`llama_reference.py` uses, under the names of a `CLIPModel` checkpoint's text half (`text_model.` first, which the
Rust model reads and the test draws by); no checkpoint is committed, only what this script writes,
`tests/data/clip_text_hidden.json`.

The batch holds three sequences of ids below the end-of-text id (the vocabulary's last), each ended by it and
right-padded with it, as CLIP's tokenizer pads: so the largest id is there several times, and only the first is the
end. The file holds the ids, the mask, the last hidden state of every real position and each sequence's pooled row.

Deps (PyPI): torch, transformers.   Usage: scripts/clip_text_reference.py [--out FILE]
"""

import torch
from transformers import CLIPTextConfig, CLIPTextModel

from hidden_reference import eager_model, out_path, padded_batch, write
from llama_reference import weight

CONFIG = dict(
    vocab_size=100,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=16,
    hidden_act="quick_gelu",
    layer_norm_eps=1e-5,
    attention_dropout=0.0,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
)
SEQ = 12
LENGTHS = [12, 7, 2]


def init_weights(model):
    """Norms' weights near 1, biases ±0.1, the two tables ±1, products' weights uniform with a spread of
    1/sqrt(fan_in), each drawn by its checkpoint name (`text_model.` and transformers' module name)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape, name = tuple(p.shape), "text_model." + name
            if "layer_norm" in name and name.endswith("weight"):
                p.copy_(weight(name, shape, 0.2, 1.0))
            elif name.endswith("bias"):
                p.copy_(weight(name, shape, 0.1))
            elif "embedding" in name:
                p.copy_(weight(name, shape, 1.0))
            else:
                p.copy_(weight(name, shape, (3.0 / shape[1]) ** 0.5))


def main():
    out = out_path("tests/data/clip_text_hidden.json")
    model = eager_model(CLIPTextModel, CLIPTextConfig(**CONFIG))
    init_weights(model)
    end = CONFIG["vocab_size"] - 1
    ids, mask = padded_batch(end, SEQ, LENGTHS, seed=17, pad=end)
    for row, length in enumerate(LENGTHS):
        ids[row, length - 1] = end
    with torch.no_grad():
        outputs = model(input_ids=ids, attention_mask=mask)
    pooled = [[round(float(v), 7) for v in row] for row in outputs.pooler_output]
    write(out, "scripts/clip_text_reference.py", CONFIG, ids, mask, outputs.last_hidden_state, pooled=pooled)


if __name__ == "__main__":
    main()
