#!/usr/bin/env python3
"""Greedy continuations of a small Llama by Hugging Face transformers: the reference for fuse's Llama test.

The model is `LlamaForCausalLM` in a small configuration (RMSNorm, rotary position embeddings, grouped-query
attention with fewer KV heads than heads, SwiGLU MLP, an untied `lm_head`). Its weights come from a generator that
the Rust test repeats exactly (`weight` below: splitmix64 seeded by the FNV-1a hash of the tensor's name, mapped to
uniform floats), so no checkpoint is committed: only what this script prints, `tests/data/llama_greedy.json`.

For each prompt the file holds the greedy continuation (`model.generate`, no sampling, the KV cache on) and the
logits of the last position at a few steps, computed again without a cache over the whole prefix (what the Rust
test runs). `min_margin` is the smallest gap between the best and second-best logit over every step: the f32
rounding differences between two implementations are far below it, so the tokens must agree exactly.

With `--llama3` the configuration adds Llama 3.1's rope scaling (`rope_type: "llama3"`) with an original context of
32 positions, so that the continuations (up to 41 positions) cross all three of its bands: frequencies kept, divided
by the factor, and interpolated between the two; it writes `tests/data/llama3_greedy.json`.

Deps (PyPI): torch, transformers.   Usage: scripts/llama_reference.py [--llama3] [--out FILE]
"""

import argparse
import json
import math

import torch
from transformers import LlamaConfig, LlamaForCausalLM

CONFIG = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=160,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    rms_norm_eps=1e-5,
    rope_theta=10000.0,
    tie_word_embeddings=False,
    attention_bias=False,
    mlp_bias=False,
    hidden_act="silu",
)
# Llama 3.1's rope scaling (its own factors; the original context shrunk from 8192 to fit the test's positions).
LLAMA3_ROPE_SCALING = dict(
    rope_type="llama3",
    factor=8.0,
    low_freq_factor=1.0,
    high_freq_factor=4.0,
    original_max_position_embeddings=32,
)
PROMPTS = [[1, 17, 42, 99, 7], [1, 5], [3, 64, 64, 12, 90, 33, 2, 118, 71]]
NEW_TOKENS = 32
LOGIT_STEPS = [0, 1, 15, 31]

MASK64 = (1 << 64) - 1


def fnv1a(text):
    h = 0xCBF29CE484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001B3) & MASK64
    return h


def weight(name, shape, scale, offset=0.0):
    """`offset + scale * u`, u uniform in [-1, 1): splitmix64 from fnv1a(name), top 24 bits of each draw."""
    state = fnv1a(name)
    count = math.prod(shape)
    values = []
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        z ^= z >> 31
        u = (z >> 40) / float(1 << 23) - 1.0
        values.append(offset + scale * u)
    return torch.tensor(values, dtype=torch.float32).reshape(shape)


def init_weights(model):
    """Each tensor: uniform with std 1/sqrt(fan_in) (so activations stay near 1), norms near 1, lm_head 4x wider."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = tuple(p.shape)
            if name.endswith("norm.weight"):
                p.copy_(weight(name, shape, 0.2, 1.0))
            elif name == "model.embed_tokens.weight":
                p.copy_(weight(name, shape, 1.0))
            else:
                scale = math.sqrt(3.0 / shape[1])
                if name == "lm_head.weight":
                    scale *= 4.0
                p.copy_(weight(name, shape, scale))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama3", action="store_true", help="with Llama 3.1's rope scaling")
    ap.add_argument("--out")
    args = ap.parse_args()
    config_args = dict(CONFIG)
    if args.llama3:
        config_args["rope_scaling"] = LLAMA3_ROPE_SCALING
    out_path = args.out or ("tests/data/llama3_greedy.json" if args.llama3 else "tests/data/llama_greedy.json")
    torch.manual_seed(0)
    config = LlamaConfig(**config_args)
    model = LlamaForCausalLM(config).eval()
    init_weights(model)
    cases = []
    min_margin = float("inf")
    with torch.no_grad():
        for prompt in PROMPTS:
            ids = torch.tensor([prompt])
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=NEW_TOKENS,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )
            tokens = out[0, len(prompt):].tolist()
            logits = {}
            seq = list(prompt)
            for step in range(NEW_TOKENS):
                last = model(torch.tensor([seq])).logits[0, -1].double()
                top2 = torch.topk(last, 2).values
                min_margin = min(min_margin, float(top2[0] - top2[1]))
                if int(last.argmax()) != tokens[step]:
                    raise SystemExit(f"cached and uncached greedy steps differ at step {step} of {prompt}")
                if step in LOGIT_STEPS:
                    logits[str(step)] = [round(float(v), 6) for v in last]
                seq.append(tokens[step])
            cases.append({"prompt": prompt, "tokens": tokens, "logits": logits})
    doc = {
        "made_by": "scripts/llama_reference.py",
        "transformers": __import__("transformers").__version__,
        "torch": torch.__version__,
        "config": config_args,
        "min_margin": round(min_margin, 6),
        "cases": cases,
    }
    with open(out_path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {out_path}: {len(cases)} prompts x {NEW_TOKENS} tokens, min top-2 margin {min_margin:.4f}")


if __name__ == "__main__":
    main()
