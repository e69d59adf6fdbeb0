#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

#include <string>

extern "C" int matmul_launcher(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t stream);

static void check(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda() && t.is_contiguous() && t.scalar_type() == torch::kFloat32,
                name, " must be a contiguous float32 CUDA tensor");
}

// Launchers return 0, a CUDA error (positive) or a cuBLAS status (negative).
static void check_status(int status, const char* what) {
    TORCH_CHECK(status == 0, what, " failed: ", status > 0 ? cudaGetErrorString((cudaError_t)status) : "cuBLAS status ",
                status > 0 ? "" : std::to_string(-status));
}

torch::Tensor matmul(torch::Tensor A, torch::Tensor B) {
    check(A, "A");
    check(B, "B");
    TORCH_CHECK(A.dim() == 2 && B.dim() == 2 && A.size(1) == B.size(0), "A [M, K] and B [K, N] expected");
    auto C = torch::empty({A.size(0), B.size(1)}, A.options());
    check_status(matmul_launcher(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), (int)A.size(0),
                                 (int)B.size(1), (int)A.size(1), c10::cuda::getCurrentCUDAStream()), "matmul");
    return C;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("matmul", &matmul, "A @ B (cuBLAS SGEMM)"); }
