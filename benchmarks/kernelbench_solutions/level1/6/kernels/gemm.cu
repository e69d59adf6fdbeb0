// level1/6: torch.matmul(A, B) with a large K: one cuBLAS cublasSgemm in FP32 arithmetic (as PyTorch's default, TF32 off).
// Row-major C[M,N] = op(A)[M,K] op(B)[K,N] is column-major C^T = op(B)^T op(A)^T: B and A are passed
// swapped, each with its row-major leading dimension and its transpose flag.
#include <cublas_v2.h>
#include <cuda_runtime.h>

// One cuBLAS handle per process (one GPU per process here), set to the caller's stream on every call.
static cublasHandle_t handle() {
    static cublasHandle_t h = nullptr;
    if (!h) cublasCreate(&h);
    return h;
}

extern "C" int gemm_launcher(const float* A, const float* B, float* C, int M, int N, int K, int trans_a,
                             int trans_b, int batch, long long stride_a, long long stride_b, long long stride_c,
                             cudaStream_t stream) {
    cublasSetStream(handle(), stream);
    const float one = 1.f, zero = 0.f;
    const int lda = trans_a ? M : K, ldb = trans_b ? K : N;
    const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    int status = batch == 1
        ? (int)cublasSgemm(handle(), op_b, op_a, N, M, K, &one, B, ldb, A, lda, &zero, C, N)
        : (int)cublasSgemmStridedBatched(handle(), op_b, op_a, N, M, K, &one, B, ldb, stride_b, A, lda, stride_a,
                                         &zero, C, N, stride_c, batch);
    return status ? -status : (int)cudaGetLastError();
}
