#!/usr/bin/env python3
"""MiniLM-L6 (all-MiniLM-L6-v2) sentence embeddings in plain numpy: the reference for the Rust example.

It reads only the files scripts/fetch-minilm.sh puts in .cache/minilm (model.safetensors, tokenizer.json,
config.json) and mirrors examples/src/models/minilm.rs op for op: BERT embeddings + layer norm, six post-norm
encoder layers (additive padding mask, erf GELU), mean pooling over real tokens, L2 normalisation. Running it
checks those architecture choices against values computed with sentence-transformers, so a mismatch on the Rust
side can be blamed on the Rust side.

Deps (PyPI): numpy, safetensors, tokenizers.   Usage: scripts/minilm_reference.py [--dir D] [--json OUT]
Exit status 1 when the embeddings or ids differ from the sentence-transformers values below.
"""

import argparse
import json
import math
import os
import sys

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

SENTENCES = ["The quick brown fox jumps over the lazy dog.", "Hello, world!"]

# sentence-transformers 'all-MiniLM-L6-v2' on the same checkpoint: ids, the first 8 values, the sum of all 384.
EXPECTED = [
    {
        "ids": [101, 1996, 4248, 2829, 4419, 14523, 2058, 1996, 13971, 3899, 1012, 102],
        "head": [0.043934, 0.058934, 0.048178, 0.077548, 0.026744, -0.037630, -0.002605, -0.059943],
        "sum": 0.153683,
    },
    {
        "ids": [101, 7592, 1010, 2088, 999, 102],
        "head": [-0.038177, 0.032911, -0.005459, 0.014370, -0.040291, -0.116533, 0.031688, 0.001912],
        "sum": 0.596054,
    },
]
EXPECTED_COSINE = 0.104937
# The expected values are printed to 6 decimals; allow rounding plus f32 noise.
TOL = 2e-6

# Added to the attention scores of padded keys. HF BERT uses finfo(f32).min; any value below about -104 makes
# exp underflow to exactly 0 in f32, so -1e9 gives the same result without the overflow risks of f32::MIN (see
# the comment on MASK_VALUE in minilm.rs).
MASK_VALUE = -1e9

_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x):
    """BERT's GELU: the exact erf form (hidden_act "gelu"), not the tanh approximation."""
    return (0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))).astype(np.float32)


def layer_norm(x, g, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + b


def linear(x, w, b):
    return x @ w.T + b


def tokenize(tokenizer_path, sentences):
    tok = Tokenizer.from_file(tokenizer_path)
    # The file pads and truncates to 128; sentence-transformers pads to the longest in the batch and truncates
    # at 256, so override both.
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    tok.enable_truncation(max_length=256)
    enc = tok.encode_batch(sentences)
    ids = np.array([e.ids for e in enc], dtype=np.int64)
    types = np.array([e.type_ids for e in enc], dtype=np.int64)
    mask = np.array([e.attention_mask for e in enc], dtype=np.float32)
    return ids, types, mask


def embed(w, cfg, ids, types, mask, mask_value=MASK_VALUE):
    b, s = ids.shape
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    hd, eps = hidden // heads, cfg["layer_norm_eps"]
    positions = np.broadcast_to(np.arange(s), (b, s))
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][positions]
        + w["embeddings.token_type_embeddings.weight"][types]
    )
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    bias = ((1.0 - mask) * np.float32(mask_value)).reshape(b, 1, 1, s)
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        W = lambda name: (w[p + name + ".weight"], w[p + name + ".bias"])  # noqa: E731

        def heads_of(t):
            return t.reshape(b, s, heads, hd).transpose(0, 2, 1, 3)

        q = heads_of(linear(x, *W("attention.self.query")))
        k = heads_of(linear(x, *W("attention.self.key")))
        v = heads_of(linear(x, *W("attention.self.value")))
        scores = q @ k.transpose(0, 1, 3, 2) / np.float32(math.sqrt(hd)) + bias
        scores = scores - scores.max(-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, hidden)
        h = layer_norm(linear(ctx, *W("attention.output.dense")) + x, *W("attention.output.LayerNorm"), eps)
        ffn = linear(gelu(linear(h, *W("intermediate.dense"))), *W("output.dense"))
        x = layer_norm(ffn + h, *W("output.LayerNorm"), eps)
    # Mean pooling over real tokens, then F.normalize(p=2, eps=1e-12).
    m = mask[:, :, None]
    pooled = (x * m).sum(1) / m.sum(1)
    norm = np.sqrt((pooled**2).sum(-1, keepdims=True))
    return pooled / np.maximum(norm, 1e-12)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=os.path.join(root, ".cache", "minilm"))
    ap.add_argument("--mask-value", type=float, default=MASK_VALUE)
    ap.add_argument("--json", help="also write ids, inputs and full embeddings here (for parity tests)")
    args = ap.parse_args()
    files = [os.path.join(args.dir, f) for f in ("model.safetensors", "tokenizer.json", "config.json")]
    missing = [f for f in files if not os.path.exists(f)]
    if missing:
        sys.exit(f"missing {', '.join(missing)}; run scripts/fetch-minilm.sh first")

    weights = load_file(files[0])
    cfg = json.load(open(files[2]))
    ids, types, mask = tokenize(files[1], SENTENCES)
    emb = embed(weights, cfg, ids, types, mask, args.mask_value)

    ok = True
    for i, (sentence, exp) in enumerate(zip(SENTENCES, EXPECTED)):
        real = ids[i][mask[i] > 0].tolist()
        head, total = emb[i, :8], float(emb[i].sum())
        err = max(np.abs(head - exp["head"]).max(), abs(total - exp["sum"]))
        ok &= real == exp["ids"] and err <= TOL
        print(f"{sentence!r}")
        print(f"  ids  {real}  {'ok' if real == exp['ids'] else 'MISMATCH, expected ' + str(exp['ids'])}")
        print("  head " + ", ".join(f"{v:+.6f}" for v in head))
        print(f"  sum  {total:+.6f}  norm {np.linalg.norm(emb[i]):.6f}  max |err| vs reference {err:.2e}")
    cos = float(emb[0] @ emb[1])
    ok &= abs(cos - EXPECTED_COSINE) <= TOL
    print(f"cosine {cos:.6f} (reference {EXPECTED_COSINE:.6f})")
    print("MATCHES sentence-transformers" if ok else "DIFFERS from sentence-transformers")

    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "sentences": SENTENCES,
                    "input_ids": ids.tolist(),
                    "token_type_ids": types.tolist(),
                    "attention_mask": mask.tolist(),
                    "embeddings": emb.tolist(),
                },
                f,
            )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
