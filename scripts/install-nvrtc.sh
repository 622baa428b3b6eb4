#!/usr/bin/env bash
# Installs NVRTC (CUDA 13.0.2 from PyPI, the cu13 `nvidia-cuda-nvrtc` wheel) into the project-local
# `.toolchain/nvrtc` and prints the folder holding libnvrtc.so.13. NVRTC compiles without a GPU, so the
# simulated GPU suite (scripts/gpu-sim.sh) runs fuse's NVRTC fallback for real. Idempotent.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="$root/.toolchain/nvrtc"
lib="$target/nvidia/cu13/lib"

if [[ ! -f "$lib/libnvrtc.so.13" ]]; then
    python3 -m pip install --quiet --no-input --target "$target" "cuda-toolkit[nvrtc]==13.0.2" >&2
fi
if [[ ! -f "$lib/libnvrtc.so.13" ]]; then
    echo "install-nvrtc: pip finished but $lib/libnvrtc.so.13 is missing" >&2
    exit 1
fi
echo "$lib"
