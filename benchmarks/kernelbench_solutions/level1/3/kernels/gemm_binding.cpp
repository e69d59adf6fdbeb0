#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

#include <string>

extern "C" int gemm_launcher(const float* A, const float* B, float* C, int M, int N, int K, int trans_a,
                             int trans_b, int batch, long long stride_a, long long stride_b, long long stride_c,
                             cudaStream_t stream);

static void check(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda() && t.is_contiguous() && t.scalar_type() == torch::kFloat32,
                name, " must be a contiguous float32 CUDA tensor");
}

// The launcher returns 0, a CUDA error (positive) or a cuBLAS status (negative).
static void check_status(int status) {
    TORCH_CHECK(status == 0, "gemm failed: ", status > 0 ? cudaGetErrorString((cudaError_t)status) : "cuBLAS status ",
                status > 0 ? "" : std::to_string(-status));
}

// A [batch, M, K] @ B [batch, K, N] -> [batch, M, N]: one strided-batched SGEMM.
torch::Tensor bmm(torch::Tensor A, torch::Tensor B) {
    check(A, "A");
    check(B, "B");
    TORCH_CHECK(A.dim() == 3 && B.dim() == 3 && A.size(0) == B.size(0) && A.size(2) == B.size(1),
                "A [b, M, K] and B [b, K, N] expected");
    const int64_t batch = A.size(0), M = A.size(1), K = A.size(2), N = B.size(2);
    auto C = torch::empty({batch, M, N}, A.options());
    check_status(gemm_launcher(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), (int)M, (int)N, (int)K,
                               0, 0, (int)batch, M * K, K * N, M * N, c10::cuda::getCurrentCUDAStream()));
    return C;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("bmm", &bmm, "torch.bmm(A, B)"); }
