#!/usr/bin/env python3
"""Benchmark W5, the peers' side: a SmolLM-135M-shaped Llama in transformers, f32 on the CPU, 2 threads.

Shape: hidden 576, 30 layers, 9 heads, 3 KV heads, FFN 1536, vocab 49152, tied embeddings (SmolLM-135M's), seeded
weights (nothing is downloaded). Figures, each the median of `--iters` runs after a warm-up:
  - prefill: one forward over a 128-token prompt, batch 1 (ms);
  - decode: `generate` of 128 new tokens after that prompt, greedy, at batch 1 and batch 8; the time per decode
    step is (generate(128) - generate(1)) / 127, so the prefill is not counted; tokens/s = batch / step time;
  - the weight-streaming floor of one decode step: bytes of weights read per step (every parameter once, f32) over
    this machine's read bandwidth, measured here with a sum over a 1 GiB tensor on 2 threads.
Modes: PyTorch eager (the default dynamic cache) and torch.compile with transformers' static cache
(`cache_implementation="static"`, the set-up transformers documents for compiled generation); `--no-compile`
skips the latter, which takes minutes to compile on two cores.

Set-up: the venv of torch_peers.py/ort_peers.py with transformers (scripts/bench.sh's header says how).
Usage: scripts/w5_peers.py [--iters 3] [--layers 30] [--no-compile] [--json]
"""

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from transformers import LlamaConfig, LlamaForCausalLM

PROMPT = 128
NEW = 128


def config(layers):
    return LlamaConfig(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=layers,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        hidden_act="silu",
    )


def median_ms(fn, iters, warmup=1):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def read_bandwidth_gbs():
    """GB/s of a sum over 1 GiB of f32 (2 threads): the rate at which weights can be streamed from memory."""
    x = torch.ones(1 << 28)
    ms = median_ms(lambda: x.sum(), 5)
    return x.numel() * 4 / (ms / 1e3) / 1e9


def generate_ms(model, ids, new, iters):
    def run():
        with torch.no_grad():
            model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                pad_token_id=0,
            )

    return median_ms(run, iters)


def measure(model, mode, iters):
    rows = []
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, model.config.vocab_size, (1, PROMPT), generator=gen)
    with torch.no_grad():
        prefill = median_ms(lambda: model(prompt), iters)
    rows.append({"workload": "W5", "phase": "prefill", "batch": 1, "tokens": PROMPT, "mode": mode,
                 "median_ms": round(prefill, 2)})
    for batch in (1, 8):
        ids = torch.randint(0, model.config.vocab_size, (batch, PROMPT), generator=gen)
        one = generate_ms(model, ids, 1, iters)
        full = generate_ms(model, ids, NEW, iters)
        step = (full - one) / (NEW - 1)
        rows.append({"workload": "W5", "phase": "decode", "batch": batch, "tokens": NEW, "mode": mode,
                     "step_ms": round(step, 3), "tokens_per_s": round(batch * 1e3 / step, 1),
                     "generate_ms": round(full, 1)})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config(args.layers)).eval()
    params = sum(p.numel() for p in model.parameters())
    bandwidth = read_bandwidth_gbs()
    floor_ms = params * 4 / (bandwidth * 1e9) * 1e3
    rows = [{"workload": "W5", "phase": "floor", "parameters": params, "read_gbs": round(bandwidth, 2),
             "step_floor_ms": round(floor_ms, 2)}]
    rows += measure(model, "eager", args.iters)
    if not args.no_compile:
        model.generation_config.cache_implementation = "static"
        model.forward = torch.compile(model.forward)
        rows += measure(model, "torch.compile (static cache)", args.iters)
    for r in rows:
        if args.json:
            print(json.dumps(r))
        else:
            print("  ".join(f"{k}={v}" for k, v in r.items()))


if __name__ == "__main__":
    main()
