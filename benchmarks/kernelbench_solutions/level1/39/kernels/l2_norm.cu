// x / the Euclidean norm of each row of a contiguous [rows, cols] float32 tensor, one block per row: the
// block sums x^2 over its row, then writes the row divided by the result. Rows may have any
// length (the task's, 65535, is odd): plain coalesced loads.
#include <cuda_runtime.h>
#include <cstdint>

constexpr int THREADS = 512;

// Sum of one value per thread over the block (any multiple of 32 threads, at most 1024).
__device__ float block_sum(float v) {
    __shared__ float partial[32];
    __shared__ float total;
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? partial[lane] : 0.f;
        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
        if (lane == 0) total = v;
    }
    __syncthreads();
    return total;
}

__global__ void l2_norm_rows(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    const float* row = x + (int64_t)blockIdx.x * cols;
    float* out = y + (int64_t)blockIdx.x * cols;
    float a = 0.f, b = 0.f;   // two accumulators: more loads in flight
    int64_t i = threadIdx.x;
    for (; i + THREADS < cols; i += 2 * THREADS) {
        const float u = row[i], v = row[i + THREADS];
        a += u * u;
        b += v * v;
    }
    if (i < cols) {
        const float u = row[i];
        a += u * u;
    }
    const float total = block_sum(a + b);
    const float denominator = sqrtf(total);
    for (int64_t j = threadIdx.x; j < cols; j += THREADS) out[j] = row[j] / denominator;
}

extern "C" int l2_norm_launcher(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows == 0 || cols == 0) return 0;
    l2_norm_rows<<<(unsigned)rows, THREADS, 0, stream>>>(x, y, cols);
    return (int)cudaGetLastError();
}
