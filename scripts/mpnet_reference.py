#!/usr/bin/env python3
"""Hidden states of a small MPNet by Hugging Face transformers: the reference for fuse's MPNet test.

The model is `MPNetModel` in a small configuration (the architecture of all-mpnet-base-v2, the most used
sentence-transformers model: BERT-like post-norm layers plus a relative position bias shared by every layer, whose
buckets are computed from the distance between positions with `log` and a conversion to integers). Its weights
come from the generator `llama_reference.py` uses, repeated by the Rust test, so no checkpoint is committed: only
what this script writes, `tests/data/mpnet_hidden.json`.

The batch holds two right-padded sequences of 72 positions, so every distance from 0 to 71 reaches the buckets,
among them 16, 32 and 64, where `log(n / 8) / log(16) · 8` is an integer and the bucket depends on that quotient
rounding to it exactly. The relative bias table is drawn wide (uniform in [-2, 2]) so a bucket off by one moves the
hidden states far beyond the test's tolerance. Padding holds the padding id (1), from which transformers makes the
position ids itself, as the model under test does (real tokens from 2). The file holds the ids, the mask and the last
hidden state of a few positions of each sequence.

Deps (PyPI): torch, transformers.   Usage: scripts/mpnet_reference.py [--out FILE]
"""

import math

import torch
from transformers import MPNetConfig, MPNetModel

from hidden_reference import eager_model, out_path, padded_batch, write
from llama_reference import weight

CONFIG = dict(
    vocab_size=100,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    hidden_act="gelu",
    max_position_embeddings=80,
    relative_attention_num_buckets=32,
    layer_norm_eps=1e-5,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
PADDING_ID = 1
SEQ = 72
LENGTHS = [72, 50]
POSITIONS = [0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 49, 63, 64, 65, 71]


def init_weights(model):
    """Linear weights uniform with std 1/sqrt(fan_in), biases ±0.1, norms near 1, tables ±1, the bias table ±2."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = tuple(p.shape)
            if "LayerNorm.weight" in name:
                p.copy_(weight(name, shape, 0.2, 1.0))
            elif name.endswith("relative_attention_bias.weight"):
                p.copy_(weight(name, shape, 2.0))
            elif "embeddings" in name:
                p.copy_(weight(name, shape, 1.0))
            elif name.endswith("bias"):
                p.copy_(weight(name, shape, 0.1))
            else:
                p.copy_(weight(name, shape, math.sqrt(3.0 / shape[1])))


def main():
    out = out_path("tests/data/mpnet_hidden.json")
    model = eager_model(MPNetModel, MPNetConfig(**CONFIG), add_pooling_layer=False)
    init_weights(model)
    ids, mask = padded_batch(CONFIG["vocab_size"], SEQ, LENGTHS, seed=7, low=2, pad=PADDING_ID)
    # No position ids: transformers makes them from the padding (`create_position_ids_from_input_ids`), as the
    # model under test does.
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
    write(out, "scripts/mpnet_reference.py", CONFIG, ids, mask, hidden, POSITIONS)


if __name__ == "__main__":
    main()
