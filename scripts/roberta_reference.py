#!/usr/bin/env python3
"""Hidden states of a small RoBERTa by Hugging Face transformers: the reference for fuse's RoBERTa test.

The model is `RobertaModel` in a small configuration (the architecture of XLM-R and of many sentence-transformers
models: BERT's post-norm layers, LayerNorm eps 1e-5, one token type, and position ids that count real tokens from
the padding id). Its weights are drawn as `mpnet_reference.py` draws them, by the generator `llama_reference.py`
uses, repeated by the Rust test, so no checkpoint is committed: only what this script writes,
`tests/data/roberta_hidden.json`.

The batch holds three right-padded sequences, the longest as long as the position table allows (42 rows: padding
id 1, then positions 2 to 41). Padding holds the padding id; transformers is given no position or token type ids,
so it makes them itself, as the model under test does. The file holds the ids, the mask and the last hidden state
of a spread of positions, real and padded.

Deps (PyPI): torch, transformers.   Usage: scripts/roberta_reference.py [--out FILE]
"""

import torch
from transformers import RobertaConfig, RobertaModel

from hidden_reference import eager_model, out_path, padded_batch, write
from mpnet_reference import init_weights

PADDING_ID = 1
CONFIG = dict(
    vocab_size=100,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=128,
    hidden_act="gelu",
    max_position_embeddings=42,
    type_vocab_size=1,
    layer_norm_eps=1e-5,
    pad_token_id=PADDING_ID,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
SEQ = 40
LENGTHS = [40, 27, 1]
# Real and padded positions both: a padded position's hidden state depends on its position id (the padding id's).
POSITIONS = [0, 1, 2, 13, 26, 27, 28, 38, 39]


def main():
    out = out_path("tests/data/roberta_hidden.json")
    model = eager_model(RobertaModel, RobertaConfig(**CONFIG), add_pooling_layer=False)
    init_weights(model)
    ids, mask = padded_batch(CONFIG["vocab_size"], SEQ, LENGTHS, seed=3, low=2, pad=PADDING_ID)
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
    write(out, "scripts/roberta_reference.py", CONFIG, ids, mask, hidden, POSITIONS)


if __name__ == "__main__":
    main()
