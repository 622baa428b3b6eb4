// fuse device prelude: helpers shared by every generated kernel. The CUDA writer pastes this file into each
// generated `.cu` (via `include_str!`), so a generated file compiles on its own with nvcc or NVRTC and needs no
// include path. Everything here is `static __device__` (internal linkage) so two generated files linked into one
// module cannot clash.
//
// Storage vs compute: tensors may be stored as f32, f16 or bf16 (`fuse_t`, chosen by the writer), but every
// kernel computes and accumulates in f32: loads go through `fuse_to_f32`, stores through `fuse_from_f32`.

#if defined(FUSE_STORAGE_F16)
#include <cuda_fp16.h>
#endif
#if defined(FUSE_STORAGE_BF16)
#include <cuda_bf16.h>
#endif

#define FUSE_DEVICE static __device__ __forceinline__
// -inf without <math.h>, which NVRTC does not provide.
#define FUSE_NEG_INF __int_as_float(0xff800000)

// ---- storage conversions -------------------------------------------------------------------------------------

FUSE_DEVICE float fuse_to_f32(float x) { return x; }
// Integer ids (embedding) are only ever cast; a float read of them is `to_f32()`.
FUSE_DEVICE float fuse_to_f32(long long x) { return (float)x; }
#if defined(FUSE_STORAGE_F16)
FUSE_DEVICE float fuse_to_f32(__half x) { return __half2float(x); }
#endif
#if defined(FUSE_STORAGE_BF16)
FUSE_DEVICE float fuse_to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
#endif

// True when `p` may be read as float4: the vectorised paths check every pointer at run time, since an input
// tensor handed in by the user may start at any element.
FUSE_DEVICE bool fuse_aligned16(const void* p) { return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0ull; }

// ---- activations ---------------------------------------------------------------------------------------------
// `erff` / `expf` / `tanhf` are the accurate CUDA versions (a few ulp). `__expf` is not used: its error near the
// tails makes GELU and softmax disagree with the CPU reference by far more than rounding.

FUSE_DEVICE float fuse_relu(float x) { return x < 0.0f ? 0.0f : x; }  // NaN stays NaN, as in PyTorch
FUSE_DEVICE float fuse_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
FUSE_DEVICE float fuse_silu(float x) { return x / (1.0f + expf(-x)); }
FUSE_DEVICE float fuse_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
FUSE_DEVICE float fuse_gelu_tanh(float x) {
    const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
}

// ---- reductions ----------------------------------------------------------------------------------------------
// Warp versions reduce over the 32 lanes of a warp (every lane gets the result). Block versions reduce over all
// threads of a one-dimensional block whose size is a multiple of 32, using `smem` (at least 32 floats); every
// thread gets the result. The leading barrier lets a kernel call them back to back with the same `smem`.

FUSE_DEVICE float fuse_warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

FUSE_DEVICE float fuse_warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

FUSE_DEVICE float fuse_block_sum(float v, float* smem) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    v = fuse_warp_sum(v);
    __syncthreads();
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    return fuse_warp_sum(lane < warps ? smem[lane] : 0.0f);
}

FUSE_DEVICE float fuse_block_max(float v, float* smem) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    v = fuse_warp_max(v);
    __syncthreads();
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    return fuse_warp_max(lane < warps ? smem[lane] : FUSE_NEG_INF);
}
