#!/usr/bin/env bash
# The GPU check, in two halves, because the GPU machine has no Rust toolchain.
#
#   scripts/device-check.sh          here: builds (release) the GPU parity tests (tests/tests/gpu.rs) and the GPU
#                                    benchmark (examples/src/bin/gpu_bench.rs) into target/device/, with AOT
#                                    fatbins when nvcc can be installed (scripts/install-nvcc.sh), and prints the
#                                    device `run` call to make.
#   scripts/device-check.sh --run    there: runs the carried binaries (about 2-4 minutes, at most 8) and prints a
#                                    short table; full logs go to $OUT (or target/device/logs). Without a GPU every
#                                    step says why it skipped and the script still exits 0.
#
# The MiniLM checkpoint (90 MB) is not carried (the device tree is limited to 64 MiB): on the GPU, MiniLM runs with
# seeded weights, which is all parity and timing need.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$root/target/device"

build() {
    cd "$root"
    # AOT fatbins for the H200 (sm_90) when nvcc is available; otherwise the binaries JIT with NVRTC there.
    if nvcc="$(scripts/install-nvcc.sh 2>/dev/null)"; then
        export NVCC="$nvcc" FUSE_CUDA_ARCHS=90
        echo "device-check: nvcc $nvcc: the example models carry sm_90 fatbins"
    else
        echo "device-check: no nvcc: every model will JIT its embedded source with NVRTC on the GPU"
    fi
    rm -rf "$dir"
    mkdir -p "$dir"
    local tests
    tests="$(cargo test --release -p fuse-tests --test gpu --no-run --message-format=json |
        jq -r 'select(.reason == "compiler-artifact" and .target.name == "gpu" and .executable != null)
               | .executable' | tail -n 1)"
    local bench
    bench="$(cargo build --release -p fuse-examples --bin gpu_bench --message-format=json |
        jq -r 'select(.reason == "compiler-artifact" and .target.name == "gpu_bench" and .executable != null)
               | .executable' | tail -n 1)"
    if [[ ! -x "$tests" || ! -x "$bench" ]]; then
        echo "device-check: cargo built no executable (tests: '$tests', bench: '$bench')" >&2
        exit 1
    fi
    cp "$tests" "$dir/gpu-tests"
    cp "$bench" "$dir/gpu_bench"
    strip "$dir/gpu-tests" "$dir/gpu_bench" 2>/dev/null || true
    echo "device-check: built into target/device/:"
    ls -l "$dir"
    local glibc
    glibc="$(objdump -T "$dir/gpu-tests" "$dir/gpu_bench" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)"
    echo "device-check: the binaries need ${glibc:-an unknown} glibc or newer"
    cat <<'EOF'

On the GPU machine, run (one call, about 2-4 minutes):
  run(command="bash scripts/device-check.sh --run", carry=["target/device"], timeout_s=540)
Here, the same mode checks that everything skips cleanly without a GPU:
  scripts/device-check.sh --run
EOF
}

# Library folders for NVRTC and cuBLAS, which the GPU image ships in pip wheels (nvidia-cuda-nvrtc, nvidia-cublas)
# outside the loader's default path, and for the driver's libcuda in case the command's environment lacks them.
cuda_library_path() {
    local roots=() d
    if command -v python3 >/dev/null; then
        while IFS= read -r d; do roots+=("$d/nvidia"); done < <(python3 -c \
            'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null || true)
    fi
    roots+=(/usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/local/cuda/lib64
        /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu)
    for d in "${roots[@]}"; do
        [[ -d "$d" ]] || continue
        find "$d" -maxdepth 4 \( -name 'libnvrtc.so*' -o -name 'libcublas.so*' -o -name 'libcuda.so*' \) \
            -printf '%h\n' 2>/dev/null
    # Never the toolkit's link-time stub of libcuda (`.../stubs`): loaded at run time it answers every call with
    # CUDA_ERROR_STUB_LIBRARY, so the GPU looked absent. The driver's folders come first, in the order above.
    done | grep -v '/stubs$' | awk '!seen[$0]++' | paste -sd: - || true
}

run() {
    cd "$root"
    local logs="${OUT:-$dir/logs}"
    mkdir -p "$logs"
    if [[ ! -x "$dir/gpu-tests" || ! -x "$dir/gpu_bench" ]]; then
        echo "device-check: no binaries in target/device: run scripts/device-check.sh here first" >&2
        exit 1
    fi
    local libs
    libs="$(cuda_library_path)"
    export LD_LIBRARY_PATH="${libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "== machine"
    (nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null ||
        echo "no nvidia-smi") | sed 's/^/  /'
    echo "  glibc: $(ldd --version 2>/dev/null | head -n 1)"
    echo "  CUDA library folders: ${libs:-none found}"

    echo "== GPU parity tests (tests/tests/gpu.rs)"
    local status=0
    timeout 300 "$dir/gpu-tests" --test-threads=1 --nocapture >"$logs/gpu-tests.log" 2>&1 || status=$?
    { grep -E '^test |^test result|skipped' "$logs/gpu-tests.log" | sort -u | sed 's/^/  /' | head -n 60; } || true
    if grep -q 'panicked' "$logs/gpu-tests.log"; then
        echo "  -- failures:"
        { grep -A6 'panicked' "$logs/gpu-tests.log" | head -n 60 | sed 's/^/  /'; } || true
    fi
    echo "  exit status: $status"

    echo "== GPU benchmark (examples/src/bin/gpu_bench.rs)"
    local bench_status=0
    timeout 180 "$dir/gpu_bench" >"$logs/gpu_bench.log" 2>&1 || bench_status=$?
    { sed 's/^/  /' "$logs/gpu_bench.log" | head -n 60; } || true
    echo "  exit status: $bench_status"
    [[ $status -eq 0 && $bench_status -eq 0 ]]
}

case "${1:-}" in
    --run) run ;;
    "") build ;;
    *)
        echo "usage: scripts/device-check.sh [--run]" >&2
        exit 2
        ;;
esac
