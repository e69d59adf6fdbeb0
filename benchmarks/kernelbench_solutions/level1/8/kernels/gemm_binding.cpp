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

// A stored [M, K] (or [K, M] when trans_a), B stored [K, N] (or [N, K] when trans_b).
torch::Tensor matmul(torch::Tensor A, torch::Tensor B) {
    check(A, "A");
    check(B, "B");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2, "2-D A and B expected");
    const bool trans_a = false, trans_b = false;
    const int64_t M = trans_a ? A.size(1) : A.size(0), K = trans_a ? A.size(0) : A.size(1);
    const int64_t N = trans_b ? B.size(0) : B.size(1), KB = trans_b ? B.size(1) : B.size(0);
    TORCH_CHECK(K == KB, "inner dimensions differ");
    auto C = torch::empty({M, N}, A.options());
    check_status(gemm_launcher(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), (int)M, (int)N, (int)K,
                               trans_a, trans_b, 1, 0, 0, 0, c10::cuda::getCurrentCUDAStream()));
    return C;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("matmul", &matmul, "torch.matmul(A, B) on irregular shapes"); }
