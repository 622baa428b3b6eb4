// Deliberately broken kernels: each must be caught by one of the simulator's checks (tests/checks.rs).

// Writes one element past the end when launched with more threads than elements.
extern "C" __global__ void out_of_bounds_write(float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = 1.0f;
}

// Reads a neighbour's shared slot without the barrier between the write and the read.
extern "C" __global__ void missing_syncthreads(const float* x, float* out) {
    __shared__ float s[64];
    int t = threadIdx.x;
    s[t] = x[t];
#ifdef WITH_BARRIER
    __syncthreads();
#endif
    out[t] = s[63 - t];
}

// Only half of the block reaches the barrier.
extern "C" __global__ void divergent_barrier(const float* x, float* out) {
    __shared__ float s[32];
    int t = threadIdx.x;
    s[t] = x[t];
    if (t < 16) __syncthreads();
    out[t] = s[t];
}

// Reads an input that was allocated but never written.
extern "C" __global__ void reads_input(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * x[i];
}

// A shuffle that half of the warp never reaches.
extern "C" __global__ void divergent_shuffle(const float* x, float* out) {
    int t = threadIdx.x;
    float v = x[t];
    if (t < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
    out[t] = v;
}
