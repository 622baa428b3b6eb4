#!/usr/bin/env bash
# Installs a GPU-less nvcc (CUDA 13.0.2 from PyPI) into the project-local `.toolchain/cuda` and prints its path.
# Idempotent: a second run only prints the path. CUDA 13.0 on purpose: 13.5 emits PTX ISA 9.5, which driver 580
# (the GPU machines') rejects. No -I flags are needed: the wheel's `nvcc.profile` adds its `include/` and
# `include/cccl` (cuda_fp16.h and friends) and finds `nvvm/` (cicc) itself; a host gcc must be installed.
# The fuse-kernels and fuse-build tests look here; for a build script, export NVCC=<the printed path>.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
target="$root/.toolchain/cuda"
bin="$target/nvidia/cu13/bin"

if [[ ! -x "$bin/nvcc" || ! -x "$bin/ptxas" ]]; then
    python3 -m pip install --quiet --no-input --target "$target" \
        "cuda-toolkit[nvcc,crt,nvvm,cudart,cccl]==13.0.2" >&2
fi
for tool in nvcc ptxas; do
    if [[ ! -x "$bin/$tool" ]]; then
        echo "install-nvcc: pip finished but $bin/$tool is missing" >&2
        exit 1
    fi
done
echo "$bin/nvcc"
