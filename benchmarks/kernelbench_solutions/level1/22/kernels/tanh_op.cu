// Tanh, elementwise over a contiguous float32 tensor of any size (the task's holds 1.6e9
// elements: 64-bit indices). float4 loads and stores when both pointers are 16-byte aligned, two per
// iteration of a grid-stride loop sized to one wave of the GPU; a scalar kernel takes the tail.
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>

__device__ __forceinline__ float op(float x) { return tanhf(x); }

__device__ __forceinline__ float4 op4(float4 v) {
    return make_float4(op(v.x), op(v.y), op(v.z), op(v.w));
}

__global__ void tanh_op_vec4(const float4* __restrict__ in, float4* __restrict__ out, int64_t n4) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + stride < n4; i += 2 * stride) {
        float4 a = in[i], b = in[i + stride];
        out[i] = op4(a);
        out[i + stride] = op4(b);
    }
    if (i < n4) out[i] = op4(in[i]);
}

__global__ void tanh_op_scalar(const float* __restrict__ in, float* __restrict__ out, int64_t start,
                              int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = start + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = op(in[i]);
    }
}

static int sm_count() {
    static int sms = 0;
    if (!sms) {
        int device = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    }
    return sms;
}

extern "C" int tanh_op_launcher(const float* in, float* out, int64_t n, cudaStream_t stream) {
    if (n == 0) return 0;
    const int threads = 256;
    const int64_t wave = (int64_t)sm_count() * 8;   // 8 blocks of 256 threads fill an SM
    const bool aligned = ((reinterpret_cast<uintptr_t>(in) | reinterpret_cast<uintptr_t>(out)) & 15) == 0;
    const int64_t n4 = aligned ? n / 4 : 0;
    if (n4 > 0) {
        int64_t blocks = std::min<int64_t>((n4 + threads - 1) / threads, wave);
        tanh_op_vec4<<<(unsigned)blocks, threads, 0, stream>>>(reinterpret_cast<const float4*>(in),
                                                              reinterpret_cast<float4*>(out), n4);
    }
    const int64_t rest = n - 4 * n4;
    if (rest > 0) {
        int64_t blocks = std::min<int64_t>((rest + threads - 1) / threads, wave);
        tanh_op_scalar<<<(unsigned)blocks, threads, 0, stream>>>(in, out, 4 * n4, n);
    }
    return (int)cudaGetLastError();
}
