// LogSoftmax over the last dimension of a contiguous [rows, cols] float32 tensor, one block per row.
// Pass 1: every thread keeps a running (max, sum of exp(x - max)) over its elements (online softmax),
// combined across the block; pass 2 writes x - max - log(sum). Stable for inputs of any magnitude.
#include <cuda_runtime.h>
#include <cstdint>

constexpr int THREADS = 1024;

struct MaxSum {
    float m, s;
};

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return {m, 0.f};
    return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ __forceinline__ MaxSum push(MaxSum acc, float v) {
    if (v > acc.m) return {v, acc.s * expf(acc.m - v) + 1.f};
    return {acc.m, acc.s + expf(v - acc.m)};
}

__device__ MaxSum block_max_sum(MaxSum v) {
    __shared__ MaxSum partial[32];
    __shared__ MaxSum total;
    for (int offset = 16; offset > 0; offset >>= 1) {
        MaxSum other = {__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.s, offset)};
        v = combine(v, other);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? partial[lane] : MaxSum{-INFINITY, 0.f};
        for (int offset = 16; offset > 0; offset >>= 1) {
            MaxSum other = {__shfl_xor_sync(0xffffffffu, v.m, offset), __shfl_xor_sync(0xffffffffu, v.s, offset)};
            v = combine(v, other);
        }
        if (lane == 0) total = v;
    }
    __syncthreads();
    return total;
}

__device__ __forceinline__ float finish(float x, float m, float scale) { return x - m - scale; }

// vec: the row length is a multiple of 4 and the rows are 16-byte aligned (float4 access)
template <bool vec>
__global__ void log_softmax_rows(const float* __restrict__ x, float* __restrict__ y, int64_t cols) {
    const float* row = x + (int64_t)blockIdx.x * cols;
    float* out = y + (int64_t)blockIdx.x * cols;
    MaxSum acc = {-INFINITY, 0.f};
    if (vec) {
        const float4* row4 = reinterpret_cast<const float4*>(row);
        for (int64_t i = threadIdx.x; i < cols / 4; i += THREADS) {
            float4 v = row4[i];
            acc = push(push(push(push(acc, v.x), v.y), v.z), v.w);
        }
    } else {
        for (int64_t i = threadIdx.x; i < cols; i += THREADS) acc = push(acc, row[i]);
    }
    const MaxSum total = block_max_sum(acc);
    const float scale = logf(total.s);
    if (vec) {
        const float4* row4 = reinterpret_cast<const float4*>(row);
        float4* out4 = reinterpret_cast<float4*>(out);
        for (int64_t i = threadIdx.x; i < cols / 4; i += THREADS) {
            float4 v = row4[i];
            out4[i] = make_float4(finish(v.x, total.m, scale), finish(v.y, total.m, scale),
                                  finish(v.z, total.m, scale), finish(v.w, total.m, scale));
        }
    } else {
        for (int64_t i = threadIdx.x; i < cols; i += THREADS) out[i] = finish(row[i], total.m, scale);
    }
}

extern "C" int log_softmax_launcher(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows == 0 || cols == 0) return 0;
    const bool vec = cols % 4 == 0 && ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) & 15) == 0;
    if (vec) log_softmax_rows<true><<<(unsigned)rows, THREADS, 0, stream>>>(x, y, cols);
    else log_softmax_rows<false><<<(unsigned)rows, THREADS, 0, stream>>>(x, y, cols);
    return (int)cudaGetLastError();
}
