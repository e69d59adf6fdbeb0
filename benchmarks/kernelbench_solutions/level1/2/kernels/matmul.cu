// C = A @ B for row-major float32 matrices with cuBLAS SGEMM (FP32 arithmetic, as PyTorch's default):
// row-major C[M,N] = A[M,K] B[K,N] is column-major C^T = B^T A^T, so B and A are passed swapped.
#include <cublas_v2.h>
#include <cuda_runtime.h>

// One cuBLAS handle per process (one GPU per process here), set to the caller's stream on every call.
static cublasHandle_t handle() {
    static cublasHandle_t h = nullptr;
    if (!h) cublasCreate(&h);
    return h;
}

extern "C" int matmul_launcher(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream) {
    cublasSetStream(handle(), stream);
    const float one = 1.f, zero = 0.f;
    int status = (int)cublasSgemm(handle(), CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, N, A, K, &zero, C, N);
    return status ? -status : (int)cudaGetLastError();
}
