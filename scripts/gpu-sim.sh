#!/usr/bin/env bash
# The simulated GPU suite: runs the GPU half of fuse (the CUDA writer's kernels, fuse-build's fatbins, the
# cudarc runtime, NVRTC, the cuBLAS path and CUDA graphs) on gpusim, a PTX interpreter behind a stand-in
# libcuda.so, on any machine.
#
# - builds the stand-in (crate gpusim-driver, release) and copies it to target/gpusim/lib/libcuda.so, with
#   libcublas.so and libcublasLt.so linked to the same file (one library, one device state);
# - installs nvcc (fatbins for the examples' AOT path) and NVRTC (the JIT path) from PyPI into .toolchain/;
# - runs gpusim's own tests, the driver tests and `tests/tests/gpu.rs` with that folder first on
#   LD_LIBRARY_PATH and GPUSIM=1 (without which the stand-in reports no device).
#
# The last line is `N passed, M failed`; the exit status is non-zero when M > 0 or a step fails to build.
# Arguments are passed to every `cargo test` (e.g. `-- --nocapture`).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fail() {
    echo "gpu-sim: $*" >&2
    echo "0 passed, 1 failed"
    exit 1
}

nvcc="$(scripts/install-nvcc.sh)" || fail "nvcc could not be installed"
export NVCC="${NVCC:-$nvcc}"
nvrtc_lib="$(scripts/install-nvrtc.sh)" || fail "NVRTC could not be installed"

cargo build --release -p gpusim-driver || fail "the simulator library did not build"
lib="$PWD/target/gpusim/lib"
mkdir -p "$lib"
cp -f target/release/libgpusim_cuda.so "$lib/libcuda.so"
for name in libcublas.so libcublasLt.so; do
    ln -sf libcuda.so "$lib/$name"
done

export LD_LIBRARY_PATH="$lib:$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GPUSIM=1

passed=0
failed=0
run() {
    local log
    log="$(mktemp)"
    cargo test "$@" 2>&1 | tee "$log"
    local status="${PIPESTATUS[0]}"
    local p f
    # cargo's summary lines only: "test result: ok. 5 passed; 0 failed; ...".
    p="$(grep '^test result:' "$log" | grep -Eo '[0-9]+ passed' | awk '{s += $1} END {print s + 0}')"
    f="$(grep '^test result:' "$log" | grep -Eo '[0-9]+ failed' | awk '{s += $1} END {print s + 0}')"
    rm -f "$log"
    passed=$((passed + p))
    failed=$((failed + f))
    if [[ "$status" -ne 0 && "$f" -eq 0 ]]; then
        # A build failure or a crashed test binary counts as one failure.
        failed=$((failed + 1))
    fi
}

run -p gpusim "$@"
run -p gpusim-driver "$@"
run -p fuse-tests --test gpu "$@"
# A driver may refuse a graph update the simulator accepts: alone, since the setting reaches the whole process.
GPUSIM_REFUSE_GRAPH_UPDATES=1 run -p fuse-tests --test gpu decode_steps_instantiate_again "$@"
# Without GPUSIM=1 the stand-in must report no device.
GPUSIM=0 run -p gpusim-driver --test through_cudarc -- without_gpusim_1

echo "$passed passed, $failed failed"
[[ "$failed" -eq 0 ]]
