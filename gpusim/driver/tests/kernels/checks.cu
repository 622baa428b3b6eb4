// Kernels for the driver tests: one correct, each of the others with one defect the simulator must report.
// Compiled to PTX (checks.ptx) with: nvcc -ptx -arch=compute_90 -O3 checks.cu -o checks.ptx

// y[i] = a * x[i] + y[i] for i < n.
extern "C" __global__ void axpy(float* y, const float* x, float a, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

// The bounds check is missing: threads past n write outside `out`.
extern "C" __global__ void write_past_end(float* out, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    out[i] = (float)n;
}

// Each thread stores its value in shared memory and reads its neighbour's with no __syncthreads between.
extern "C" __global__ void missing_syncthreads(float* out, const float* in) {
    __shared__ float tile[128];
    unsigned t = threadIdx.x;
    tile[t] = in[t];
    out[t] = tile[(t + 1) % blockDim.x];
}

// Only the even threads reach the barrier.
extern "C" __global__ void divergent_barrier(float* out, const float* in) {
    __shared__ float tile[128];
    unsigned t = threadIdx.x;
    tile[t] = in[t];
    if (t % 2 == 0) {
        __syncthreads();
    }
    out[t] = tile[t];
}

// The same shared-memory exchange done right.
extern "C" __global__ void rotate_with_syncthreads(float* out, const float* in) {
    __shared__ float tile[128];
    unsigned t = threadIdx.x;
    tile[t] = in[t];
    __syncthreads();
    out[t] = tile[(t + 1) % blockDim.x];
}
