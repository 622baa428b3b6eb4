// fuse device prelude: helpers shared by every generated kernel. The CUDA writer pastes this file into each
// generated `.cu` (via `include_str!`), so a generated file compiles on its own with nvcc or NVRTC and needs no
// include path. Helpers are `__device__ __forceinline__` (C++ inline, so helpers a file does not use raise no
// warnings, and identical copies in two files linked together merge).
//
// Storage vs compute: tensors may be stored as f32, f16 or bf16 (`fuse_t`, chosen by the writer), but every
// kernel computes and accumulates in f32: loads go through `fuse_to_f32`, stores through `fuse_from_f32`.

#define FUSE_DEVICE __device__ __forceinline__
// -inf without <math.h>, which NVRTC does not provide.
#define FUSE_NEG_INF __int_as_float(0xff800000)

// ---- storage conversions -------------------------------------------------------------------------------------

FUSE_DEVICE float fuse_to_f32(float x) { return x; }
// Integer ids (embedding) are only ever cast; a float read of them is `to_f32()`.
FUSE_DEVICE float fuse_to_f32(long long x) { return (float)x; }

// Half-precision storage without cuda_fp16.h / cuda_bf16.h: NVRTC on a deploy host has no CUDA include
// directory, and these need only the bits. Both types have the size and alignment of `__half` /
// `__nv_bfloat16` (and of Rust's `half::f16` / `half::bf16`), so buffers are interchangeable.
#if defined(FUSE_STORAGE_F16)
struct fuse_f16 { unsigned short bits; };
FUSE_DEVICE float fuse_to_f32(fuse_f16 x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.bits));
    return f;
}
FUSE_DEVICE fuse_f16 fuse_f16_from_f32(float v) {
    fuse_f16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(v));
    return r;
}
#endif
#if defined(FUSE_STORAGE_BF16)
struct fuse_bf16 { unsigned short bits; };
FUSE_DEVICE float fuse_to_f32(fuse_bf16 x) { return __uint_as_float(((unsigned)x.bits) << 16); }
// Round to nearest even in integer arithmetic (`cvt.rn.bf16.f32` needs sm_80; this runs everywhere).
FUSE_DEVICE fuse_bf16 fuse_bf16_from_f32(float v) {
    const unsigned u = __float_as_uint(v);
    fuse_bf16 r;
    r.bits = (v != v) ? (unsigned short)0x7fc0u : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return r;
}
#endif

// True when `p` may be read as float4: the vectorised paths check every pointer at run time, since an input
// tensor handed in by the user may start at any element.
FUSE_DEVICE bool fuse_aligned16(const void* p) { return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0ull; }

// ---- activations ---------------------------------------------------------------------------------------------
// `erff` / `expf` / `tanhf` are the accurate CUDA versions (a few ulp). `__expf` is not used: its error near the
// tails makes GELU and softmax disagree with the CPU reference by far more than rounding.

FUSE_DEVICE float fuse_relu(float x) { return x < 0.0f ? 0.0f : x; }  // NaN stays NaN, as in PyTorch
// The larger and smaller of two, NaN where either is (PyTorch's `maximum`, `minimum` and `amax`): `fmaxf` and
// `fminf` return the other operand, which would hide a NaN a model computed.
FUSE_DEVICE float fuse_max(float a, float b) { return (a > b || a != a) ? a : b; }
FUSE_DEVICE float fuse_min(float a, float b) { return (a < b || a != a) ? a : b; }
FUSE_DEVICE float fuse_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
FUSE_DEVICE float fuse_silu(float x) { return x / (1.0f + expf(-x)); }
FUSE_DEVICE float fuse_gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
FUSE_DEVICE float fuse_gelu_tanh(float x) {
    const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
}

// ---- sine and cosine -----------------------------------------------------------------------------------------
// The CPU's algorithm (`fuse-runtime/src/cpu/trig.rs`, which explains it), so both backends are exact over every
// finite f32. CUDA's `sinf` is as exact, but its large-argument path reads a module-scope table of 2/π; this reads
// 2/π's bits from registers through selects.

// 32 bits of 2/π's first 192: the 192-bit integer shifted right by `s` (0..184), truncated.
FUSE_DEVICE unsigned fuse_two_over_pi_bits(unsigned s) {
    const unsigned long long w0 = 0xa2f9836e4e441529ull, w1 = 0xfc2757d1f534ddc0ull, w2 = 0xdb6295993c439041ull;
    const unsigned word = s >> 6, b = s & 63u;
    const unsigned long long lo = word == 0u ? w2 : (word == 1u ? w1 : w0);
    const unsigned long long hi = word == 0u ? w1 : (word == 1u ? w0 : 0ull);
    return (unsigned)((lo >> b) | ((hi << 1) << (63u - b)));
}

// |x| = n·π/2 + r with |r| ≤ π/4; returns r, stores n (mod 4 is what matters) in `*n`.
FUSE_DEVICE double fuse_trig_reduce(float x, unsigned* n) {
    const float a = fabsf(x);
    if (a < 256.0f) {
        const double magic = 6755399441055744.0;  // 1.5 * 2^52
        const double t = (double)a * 0.63661977236758134308 + magic;
        *n = (unsigned)__double_as_longlong(t);
        return (double)a - (t - magic) * 1.5707963267948966192;
    }
    const unsigned bits = __float_as_uint(a);
    const unsigned index = (bits >> 26) & 15u;
    const unsigned m = ((bits & 0x007fffffu) | 0x00800000u) << ((bits >> 23) & 7u);
    const unsigned w0 = fuse_two_over_pi_bits(184u - 8u * index);
    const unsigned long long w1 = fuse_two_over_pi_bits(152u - 8u * index);
    const unsigned long long w2 = fuse_two_over_pi_bits(120u - 8u * index);
    const unsigned long long top = (unsigned long long)(m * w0);
    const unsigned long long fixed = (top << 32) + (unsigned long long)m * w1 + (((unsigned long long)m * w2) >> 32);
    const unsigned long long q = (fixed + (1ull << 61)) >> 62;
    *n = (unsigned)q;
    return (double)(long long)(fixed - (q << 62)) * 3.4061215800865545e-19;  // π·2⁻⁶³
}

// sin(n·π/2 + r), NaN for infinite or NaN x.
FUSE_DEVICE float fuse_trig_quadrant(float x, double rd, unsigned n) {
    const float r = (float)rd, z = r * r;
    const float s = ((-1.9515296e-4f * z + 8.332161e-3f) * z - 1.6666655e-1f) * z * r + r;
    const float c = ((2.4433157e-5f * z - 1.3887316e-3f) * z + 4.1666646e-2f) * z * z - 0.5f * z + 1.0f;
    float v = (n & 1u) ? c : s;
    v = (n & 2u) ? -v : v;
    return fabsf(x) <= 3.40282347e38f ? v : __int_as_float(0x7fffffff);  // false for ±∞ and NaN
}

FUSE_DEVICE float fuse_sin(float x) {
    unsigned n;
    const double r = fuse_trig_reduce(x, &n);
    return __uint_as_float(__float_as_uint(fuse_trig_quadrant(x, r, n)) ^ (__float_as_uint(x) & 0x80000000u));
}

FUSE_DEVICE float fuse_cos(float x) {
    unsigned n;
    const double r = fuse_trig_reduce(x, &n);
    return fuse_trig_quadrant(x, r, n + 1u);
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
    for (int o = 16; o > 0; o >>= 1) v = fuse_max(v, __shfl_xor_sync(0xffffffffu, v, o));
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

// Inclusive scans (`cumsum`): each thread gets the sum of its own value and those of every lower lane of its warp,
// or every lower thread of its block, and `*total` the sum over all of them. The block version has the block sums'
// layout and barriers.
FUSE_DEVICE float fuse_warp_scan(float v, float* total) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const float below = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += below;
    }
    *total = __shfl_sync(0xffffffffu, v, 31);
    return v;
}

FUSE_DEVICE float fuse_block_scan(float v, float* total, float* smem) {
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int warps = blockDim.x >> 5;
    float warp_total;
    v = fuse_warp_scan(v, &warp_total);
    __syncthreads();
    if (lane == 0) smem[warp] = warp_total;
    __syncthreads();
    // Every warp scans the warps' totals alike; a warp adds those of the warps before it.
    const float upto = fuse_warp_scan(lane < warps ? smem[lane] : 0.0f, total);
    const float before = __shfl_sync(0xffffffffu, upto, warp > 0 ? warp - 1 : 0);
    return warp > 0 ? v + before : v;
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
