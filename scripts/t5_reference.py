#!/usr/bin/env python3
"""Hidden states of a small T5 encoder by Hugging Face transformers: the reference for fuse's T5 test.

The model is `T5EncoderModel` in a small gated-GELU configuration (Flan-T5's and T5 v1.1's: RMS norms, pre-norm
blocks, unscaled scores, a relative position bias made by the first block and added to every block's scores). Its
weights come from the generator `llama_reference.py` uses, repeated by the Rust test, so no checkpoint is committed:
only what this script writes, `tests/data/t5_hidden.json`.

The batch holds two right-padded sequences of 72, so every distance from 0 to 71, both ways, reaches the buckets,
among them 16, 32 and 64, where the bucket's quotient is an integer; the bias table is drawn wide (uniform in
[-2, 2]) so a bucket off by one shows. The file holds the ids, the mask and the last hidden state of a few positions.

Deps (PyPI): torch, transformers.   Usage: scripts/t5_reference.py [--out FILE]
"""

import math

import torch
from transformers import T5Config, T5EncoderModel

from hidden_reference import eager_model, out_path, padded_batch, write
from llama_reference import weight

CONFIG = dict(
    vocab_size=100,
    d_model=64,
    d_kv=16,
    d_ff=128,
    num_layers=2,
    num_heads=4,
    relative_attention_num_buckets=32,
    relative_attention_max_distance=128,
    feed_forward_proj="gated-gelu",
    layer_norm_epsilon=1e-6,
    dropout_rate=0.0,
)
SEQ = 72
LENGTHS = [72, 50]
POSITIONS = [0, 1, 7, 8, 15, 16, 17, 31, 32, 33, 49, 55, 63, 64, 65, 71]


def init_weights(model):
    """Linear weights uniform with std 1/sqrt(fan_in), norms near 1, the token table ±1, the bias table ±2."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = tuple(p.shape)
            if "layer_norm" in name:
                p.copy_(weight(name, shape, 0.2, 1.0))
            elif name.endswith("relative_attention_bias.weight"):
                p.copy_(weight(name, shape, 2.0))
            elif name == "shared.weight":
                p.copy_(weight(name, shape, 1.0))
            else:
                p.copy_(weight(name, shape, math.sqrt(3.0 / shape[1])))


def main():
    out = out_path("tests/data/t5_hidden.json")
    model = eager_model(T5EncoderModel, T5Config(**CONFIG))
    init_weights(model)
    names = [name for name, _ in model.named_parameters()]
    ids, mask = padded_batch(CONFIG["vocab_size"], SEQ, LENGTHS, seed=5, low=2, pad=0)
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
    write(out, "scripts/t5_reference.py", CONFIG, ids, mask, hidden, POSITIONS, parameters=names)


if __name__ == "__main__":
    main()
