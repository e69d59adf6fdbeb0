// One block per row: strided loads, warp shuffles, then one shared-memory step across warps.
#include <cuda_runtime.h>

__global__ void row_sum_kernel(const float* __restrict__ x, float* __restrict__ out, int cols) {
    const float* row = x + (long)blockIdx.x * cols;
    float acc = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += row[c];
    for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffff, acc, offset);
    __shared__ float warp_sums[32];
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) warp_sums[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = lane < blockDim.x / 32 ? warp_sums[lane] : 0.f;
        for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_down_sync(0xffffffff, acc, offset);
        if (lane == 0) out[blockIdx.x] = acc;
    }
}

extern "C" int row_sum_launcher(const float* x, float* out, int rows, int cols, cudaStream_t s) {
    row_sum_kernel<<<rows, 256, 0, s>>>(x, out, cols);
    return (int)cudaGetLastError();
}
