// Writes through a wild pointer: an illegal memory access the harness must survive.
#include <cuda_runtime.h>
#include <cstdint>

__global__ void bad_kernel(float* out, int64_t n) {
    float* wild = reinterpret_cast<float*>(0x10);
    wild[threadIdx.x] = 1.f;
    if (threadIdx.x < n) out[threadIdx.x] = 0.f;
}

extern "C" cudaError_t bias_relu_launcher(const float* x, const float* bias, float* out, int64_t n,
                                          int64_t cols, cudaStream_t stream) {
    bad_kernel<<<1, 32, 0, stream>>>(out, n);
    return cudaGetLastError();
}
