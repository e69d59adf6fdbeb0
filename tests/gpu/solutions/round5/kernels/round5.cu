// CUDA kernels of the GPU hack suite's fifth round (tests/gpu/hacks/test_gpu_round5.py), honest ones: the
// cheats there misuse them from Python (streams, stale numbers). Plain CUDA C, bound in round5_binding.cpp.
#include <cuda_runtime.h>
#include <cstdint>

namespace {

__global__ void bias_relu_kernel(const float* x, const float* bias, float* out, int64_t begin, int64_t end,
                                 int64_t cols) {
    int64_t i = begin + blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < end) out[i] = fmaxf(x[i] + bias[i % cols], 0.f);
}

constexpr int kThreads = 256;

__global__ void dot_partial(const float* a, const float* b, int64_t n, double* partial) {
    __shared__ double sums[kThreads];
    double acc = 0.0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        acc += (double)a[i] * b[i];
    sums[threadIdx.x] = acc;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
}

__global__ void dot_finish(const double* partial, int blocks, float* out) {
    __shared__ double sums[kThreads];
    double acc = 0.0;
    for (int i = threadIdx.x; i < blocks; i += blockDim.x) acc += partial[i];
    sums[threadIdx.x] = acc;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[0] = (float)sums[0];
}

__global__ void copy_kernel(const float* src, float* dst, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) dst[i] = src[i];
}

// y = x W^T + bias, one thread per output element (x: m x k, W: n x k)
__global__ void linear_kernel(const float* x, const float* w, const float* bias, float* y, int m, int n, int k) {
    int row = blockIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= m || col >= n) return;
    float acc = bias[col];
    for (int p = 0; p < k; ++p) acc += x[row * k + p] * w[col * k + p];
    y[row * n + col] = acc;
}

unsigned blocks_for(int64_t n) { return (unsigned)((n + kThreads - 1) / kThreads); }

}  // namespace

extern "C" cudaError_t r5_bias_relu(const float* x, const float* bias, float* out, int64_t begin, int64_t end,
                                    int64_t cols, cudaStream_t stream) {
    if (end > begin) bias_relu_kernel<<<blocks_for(end - begin), kThreads, 0, stream>>>(x, bias, out, begin, end, cols);
    return cudaGetLastError();
}

extern "C" int r5_dot_blocks() { return 256; }

// scratch: r5_dot_blocks() doubles
extern "C" cudaError_t r5_dot(const float* a, const float* b, int64_t n, double* scratch, float* out,
                              cudaStream_t stream) {
    dot_partial<<<r5_dot_blocks(), kThreads, 0, stream>>>(a, b, n, scratch);
    dot_finish<<<1, kThreads, 0, stream>>>(scratch, r5_dot_blocks(), out);
    return cudaGetLastError();
}

extern "C" cudaError_t r5_copy(const float* src, float* dst, int64_t n, cudaStream_t stream) {
    if (n > 0) copy_kernel<<<blocks_for(n), kThreads, 0, stream>>>(src, dst, n);
    return cudaGetLastError();
}

extern "C" cudaError_t r5_linear(const float* x, const float* w, const float* bias, float* y, int m, int n, int k,
                                 cudaStream_t stream) {
    dim3 grid((n + 127) / 128, m);
    linear_kernel<<<grid, 128, 0, stream>>>(x, w, bias, y, m, n, k);
    return cudaGetLastError();
}
