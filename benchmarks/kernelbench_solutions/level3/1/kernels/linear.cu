// One nn.Linear layer of an MLP, y = x @ W^T + bias (then ReLU for hidden layers): cuBLAS SGEMM (FP32
// arithmetic, as PyTorch's default), then one pass for the bias and the ReLU in place.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>

// One cuBLAS handle per process (one GPU per process here), set to the caller's stream on every call.
static cublasHandle_t handle() {
    static cublasHandle_t h = nullptr;
    if (!h) cublasCreate(&h);
    return h;
}

template <bool relu>
__global__ void bias_act(float4* __restrict__ y, const float4* __restrict__ bias, int64_t total4, int64_t n4) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total4; i += stride) {
        float4 v = y[i];
        const float4 c = bias[i % n4];
        v = make_float4(v.x + c.x, v.y + c.y, v.z + c.z, v.w + c.w);
        if (relu) v = make_float4(fmaxf(v.x, 0.f), fmaxf(v.y, 0.f), fmaxf(v.z, 0.f), fmaxf(v.w, 0.f));
        y[i] = v;
    }
}

template <bool relu>
__global__ void bias_act_scalar(float* __restrict__ y, const float* __restrict__ bias, int64_t total, int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const float v = y[i] + bias[i % n];
        y[i] = relu ? fmaxf(v, 0.f) : v;
    }
}

extern "C" int linear_launcher(const float* x, const float* W, const float* bias, float* y, int M, int N, int K,
                               bool relu, cudaStream_t stream) {
    cublasSetStream(handle(), stream);
    const float one = 1.f, zero = 0.f;
    int status = (int)cublasSgemm(handle(), CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &one, W, K, x, K, &zero, y, N);
    if (status) return -status;
    const int64_t total = (int64_t)M * N;
    const int threads = 256;
    const bool vec = N % 4 == 0 && ((reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(bias)) & 15) == 0;
    const int64_t work = vec ? total / 4 : total;
    const unsigned blocks = (unsigned)std::max<int64_t>(1, std::min<int64_t>((work + threads - 1) / threads, 4096));
    if (vec) {
        float4* y4 = reinterpret_cast<float4*>(y);
        const float4* b4 = reinterpret_cast<const float4*>(bias);
        if (relu) bias_act<true><<<blocks, threads, 0, stream>>>(y4, b4, work, N / 4);
        else bias_act<false><<<blocks, threads, 0, stream>>>(y4, b4, work, N / 4);
    } else {
        if (relu) bias_act_scalar<true><<<blocks, threads, 0, stream>>>(y, bias, total, N);
        else bias_act_scalar<false><<<blocks, threads, 0, stream>>>(y, bias, total, N);
    }
    return (int)cudaGetLastError();
}
