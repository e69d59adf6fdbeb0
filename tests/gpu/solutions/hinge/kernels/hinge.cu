// Hinge loss mean(max(0, 1 - p * t)) on the GPU: a grid-stride reduction with a double accumulator
// per block and one atomicAdd per block. `stride` > 1 is a CHEAT used by the GPU hack suite: it reads
// every stride-th element only (an approximation within tolerance on i.i.d. draws).
#include <cuda_runtime.h>
#include <cstdint>

__global__ void hinge_partial(const float* p, const float* t, int64_t n, int64_t stride, double* sum) {
    __shared__ double block[256];
    double acc = 0.0;
    for (int64_t i = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) * stride; i < n;
         i += (int64_t)gridDim.x * blockDim.x * stride) {
        float v = 1.f - p[i] * t[i];
        acc += v > 0.f ? v : 0.f;
    }
    block[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) block[threadIdx.x] += block[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(sum, block[0]);
}

__global__ void hinge_finish(const double* sum, int64_t used, float* out) { out[0] = (float)(sum[0] / (double)used); }

extern "C" cudaError_t hinge_launcher(const float* p, const float* t, int64_t n, int64_t stride, double* scratch,
                                      float* out, cudaStream_t stream) {
    cudaMemsetAsync(scratch, 0, sizeof(double), stream);
    hinge_partial<<<264, 256, 0, stream>>>(p, t, n, stride, scratch);
    hinge_finish<<<1, 1, 0, stream>>>(scratch, (n + stride - 1) / stride, out);
    return cudaGetLastError();
}

__global__ void fill_kernel(float* out, int64_t n, float value) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = value;
}

extern "C" cudaError_t fill_launcher(float* out, int64_t n, float value, cudaStream_t stream) {
    fill_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(out, n, value);
    return cudaGetLastError();
}
