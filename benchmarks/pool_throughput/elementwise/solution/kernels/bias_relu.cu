// relu(x + bias) over a contiguous [rows, cols] float32 tensor, cols a multiple of 4: float4 loads.
#include <cuda_runtime.h>
#include <cstdint>

__global__ void bias_relu(const float4* __restrict__ x, const float4* __restrict__ bias, float4* __restrict__ out,
                          int64_t n4, int64_t cols4) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += stride) {
        const float4 v = x[i], b = bias[i % cols4];
        out[i] = make_float4(fmaxf(v.x + b.x, 0.f), fmaxf(v.y + b.y, 0.f), fmaxf(v.z + b.z, 0.f), fmaxf(v.w + b.w, 0.f));
    }
}

extern "C" int bias_relu_launcher(const float* x, const float* bias, float* out, int64_t rows, int64_t cols,
                                  cudaStream_t stream) {
    const int64_t n4 = rows * cols / 4;
    if (n4 == 0) return 0;
    const int threads = 256;
    const int64_t blocks = (n4 + threads - 1) / threads < 4096 ? (n4 + threads - 1) / threads : 4096;
    bias_relu<<<(unsigned)blocks, threads, 0, stream>>>(reinterpret_cast<const float4*>(x),
                                                       reinterpret_cast<const float4*>(bias),
                                                       reinterpret_cast<float4*>(out), n4, cols / 4);
    return (int)cudaGetLastError();
}
