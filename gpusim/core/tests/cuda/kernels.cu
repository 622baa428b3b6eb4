// Hand-written kernels run on the interpreter and checked against host references (tests/kernels.rs).

extern "C" __global__ void vec_add4(const float4* a, const float4* b, float4* c, int n4) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 x = a[i], y = b[i];
        c[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
}

// One partial sum per block: grid-stride accumulation, then a tree in shared memory.
extern "C" __global__ void block_sum(const float* x, float* out, int n) {
    __shared__ float s[256];
    int t = threadIdx.x;
    float v = 0.0f;
    for (int i = blockIdx.x * 256 + t; i < n; i += gridDim.x * 256) v += x[i];
    s[t] = v;
    __syncthreads();
    for (int stride = 128; stride > 0; stride >>= 1) {
        if (t < stride) s[t] += s[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

// Dynamic shared memory after a static array: reverses each block's slice.
extern "C" __global__ void reverse_dynamic(const float* x, float* y) {
    __shared__ float marker[3];
    extern __shared__ float buf[];
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    if (t < 3) marker[t] = (float)t;
    buf[t] = x[i];
    __syncthreads();
    y[i] = buf[blockDim.x - 1 - t] + marker[t % 3];
}

// Every shuffle mode, and widths below 32 (segment masks).
extern "C" __global__ void shuffles(const float* x, float* out) {
    int t = threadIdx.x;
    int i = blockIdx.x * blockDim.x + t;
    float v = x[i];
    float* o = out + 7 * i;
    o[0] = __shfl_xor_sync(0xffffffffu, v, 5);
    o[1] = __shfl_down_sync(0xffffffffu, v, 3);
    o[2] = __shfl_up_sync(0xffffffffu, v, 7);
    o[3] = __shfl_sync(0xffffffffu, v, (t * 7) % 32);
    o[4] = __shfl_sync(0xffffffffu, v, 3, 8);
    o[5] = __shfl_down_sync(0xffffffffu, v, 2, 16);
    o[6] = __shfl_up_sync(0xffffffffu, v, 2, 8);
}

// Half-precision conversions through the PTX instructions fuse's prelude uses.
extern "C" __global__ void halves(const float* x, unsigned short* h, unsigned short* b, float* back, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned short hb, bb;
    float hf, bf;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(hb) : "f"(x[i]));
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bb) : "f"(x[i]));
    asm("cvt.f32.f16 %0, %1;" : "=f"(hf) : "h"(hb));
    bf = __uint_as_float(((unsigned)bb) << 16);
    h[i] = hb;
    b[i] = bb;
    back[2 * i] = hf;
    back[2 * i + 1] = bf;
}

extern "C" __global__ void math(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    float* o = out + 6 * i;
    o[0] = expf(v);
    o[1] = rsqrtf(fabsf(v) + 0.25f);
    o[2] = erff(v);
    o[3] = tanhf(v);
    o[4] = logf(fabsf(v) + 0.001f);
    o[5] = sqrtf(fabsf(v)) / (1.0f + fabsf(v));
}

// Integer division and remainder in 32 and 64 bits, signed and unsigned, indexed with 64-bit offsets.
extern "C" __global__ void int_ops(const long long* a, const int* b, long long* q64, int* r32, unsigned* u32,
                                   long long n, long long base) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long x = a[i];
    int y = b[i];
    q64[base + i - base] = x / (long long)y;
    r32[i] = (int)x % y;
    u32[i] = ((unsigned)x / (unsigned)(y | 1)) ^ ((unsigned)x % 7u) ^ ((unsigned)x >> (i & 31));
}

// The rounding modes of fma/add/mul and of float-to-integer conversions, through the PTX instructions directly.
extern "C" __global__ void rounding(const float* a, const float* b, const float* c, float* out, int* ints, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float x = a[i], y = b[i], z = c[i];
    float* o = out + 12 * i;
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(o[0]) : "f"(x), "f"(y), "f"(z));
    asm("fma.rz.f32 %0, %1, %2, %3;" : "=f"(o[1]) : "f"(x), "f"(y), "f"(z));
    asm("fma.rm.f32 %0, %1, %2, %3;" : "=f"(o[2]) : "f"(x), "f"(y), "f"(z));
    asm("fma.rp.f32 %0, %1, %2, %3;" : "=f"(o[3]) : "f"(x), "f"(y), "f"(z));
    asm("add.rz.f32 %0, %1, %2;" : "=f"(o[4]) : "f"(x), "f"(z));
    asm("add.rm.f32 %0, %1, %2;" : "=f"(o[5]) : "f"(x), "f"(z));
    asm("add.rp.f32 %0, %1, %2;" : "=f"(o[6]) : "f"(x), "f"(z));
    asm("mul.rz.f32 %0, %1, %2;" : "=f"(o[7]) : "f"(x), "f"(y));
    asm("mul.rm.f32 %0, %1, %2;" : "=f"(o[8]) : "f"(x), "f"(y));
    asm("mul.rp.f32 %0, %1, %2;" : "=f"(o[9]) : "f"(x), "f"(y));
    asm("cvt.rni.f32.f32 %0, %1;" : "=f"(o[10]) : "f"(x * 100.0f));
    asm("cvt.rzi.f32.f32 %0, %1;" : "=f"(o[11]) : "f"(x * 100.0f));
    int* k = ints + 4 * i;
    float s = x * 100.0f;
    asm("cvt.rni.s32.f32 %0, %1;" : "=r"(k[0]) : "f"(s));
    asm("cvt.rzi.s32.f32 %0, %1;" : "=r"(k[1]) : "f"(s));
    asm("cvt.rmi.s32.f32 %0, %1;" : "=r"(k[2]) : "f"(s));
    asm("cvt.rpi.s32.f32 %0, %1;" : "=r"(k[3]) : "f"(s));
}

// Atomics on shared and global memory: a 16-bin histogram, a float sum, a maximum and a compare-and-swap claim.
extern "C" __global__ void histogram(const int* x, int* counts, float* sum, int* first, int n) {
    __shared__ int bins[16];
    int t = threadIdx.x;
    if (t < 16) bins[t] = 0;
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + t; i < n; i += gridDim.x * blockDim.x) {
        int v = x[i];
        atomicAdd(&bins[v & 15], 1);
        atomicAdd(sum, (float)(v & 15));
        atomicMax(&counts[16], v);
        atomicCAS(&first[v & 15], -1, i);
    }
    __syncthreads();
    if (t < 16) atomicAdd(&counts[t], bins[t]);
}
