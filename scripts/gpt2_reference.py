#!/usr/bin/env python3
"""Hidden states of a small GPT-2 by Hugging Face transformers: the reference for fuse's GPT-2 test.

The model is `GPT2Model` in a small configuration (Conv1D projections stored [in, out], queries, keys and values
made by one product and split, learned positions, tanh GELU, pre-norm layers and a final norm). Its weights come
from the generator `llama_reference.py` uses, repeated by the Rust test, so no checkpoint is committed: only what
this script writes, `tests/data/gpt2_hidden.json`.

The batch holds three right-padded sequences; the file holds the ids, the mask and the last hidden state of every
real position.

Deps (PyPI): torch, transformers.   Usage: scripts/gpt2_reference.py [--out FILE]
"""

import math

import torch
from transformers import GPT2Config, GPT2Model

from hidden_reference import eager_model, out_path, padded_batch, write
from llama_reference import weight

CONFIG = dict(
    vocab_size=100,
    n_positions=64,
    n_embd=64,
    n_layer=2,
    n_head=4,
    activation_function="gelu_new",
    layer_norm_epsilon=1e-5,
    resid_pdrop=0.0,
    embd_pdrop=0.0,
    attn_pdrop=0.0,
    bos_token_id=0,
    eos_token_id=0,
)
SEQ = 40
LENGTHS = [40, 23, 1]


def init_weights(model):
    """Conv1D weights ([in, out]) uniform with std 1/sqrt(in), biases ±0.1, norms near 1, tables ±1."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = tuple(p.shape)
            if ".ln_" in name or name.startswith("ln_f"):
                p.copy_(weight(name, shape, 0.2, 1.0) if name.endswith("weight") else weight(name, shape, 0.1))
            elif name in ("wte.weight", "wpe.weight"):
                p.copy_(weight(name, shape, 1.0))
            elif name.endswith("bias"):
                p.copy_(weight(name, shape, 0.1))
            else:
                p.copy_(weight(name, shape, math.sqrt(3.0 / shape[0])))


def main():
    out = out_path("tests/data/gpt2_hidden.json")
    model = eager_model(GPT2Model, GPT2Config(**CONFIG))
    init_weights(model)
    ids, mask = padded_batch(CONFIG["vocab_size"], SEQ, LENGTHS, seed=11)
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
    write(out, "scripts/gpt2_reference.py", CONFIG, ids, mask, hidden)


if __name__ == "__main__":
    main()
