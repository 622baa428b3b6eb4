#!/usr/bin/env bash
# Installs a GPU-less nvcc (CUDA 13.0.2 from PyPI) into the project-local `.toolchain/cuda` and prints its path.
# Idempotent: a second run only prints the path. CUDA 13.0 on purpose: 13.5 emits PTX ISA 9.5, which driver 580
# (the GPU machines') rejects. The tests and fuse-build find nvcc here without further setup.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="$root/.toolchain/cuda"
nvcc="$target/nvidia/cu13/bin/nvcc"

if [[ ! -x "$nvcc" ]]; then
    python3 -m pip install --quiet --no-input --target "$target" \
        "cuda-toolkit[nvcc,crt,nvvm,cudart,cccl]==13.0.2" >&2
fi
if [[ ! -x "$nvcc" ]]; then
    echo "install-nvcc: pip finished but $nvcc is missing" >&2
    exit 1
fi
echo "$nvcc"
