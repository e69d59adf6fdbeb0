// Round fifteen (tests/hacks/cases_round15.py): the work of the example task (relu(x + bias)) done by another
// Python package's code, which no operator of PyTorch's dispatcher runs and no ATen kernel's name marks
// (round15_nnc.cpp: PyTorch's tensor-expression interpreter).
//
// honest:          relu(x + bias) in a plain loop (honest_relu.h).
// arrow_bias_relu: relu(x + bias) by pyarrow's compute kernels (libarrow), pyarrow imported from C++ through the
//                  builtins' `__import__`, the arrays views of the tensors' memory (pyarrow.foreign_buffer); the
//                  binding tiles the bias and copies arrow's result into the output it allocated.
// torchscript:     relu(x + bias) by TorchScript's interpreter, the function compiled from its source text once.
// stall:           sleeps `seconds` (no CPU time): the candidate's load held between its build requests.
#include <torch/extension.h>
#include <torch/script.h>

#include "honest_relu.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>

namespace {

torch::Tensor arrow_bias_relu(torch::Tensor x, torch::Tensor bias) {
    namespace py = pybind11;
    auto builtins = py::reinterpret_borrow<py::dict>(PyEval_GetBuiltins());
    py::object pa = builtins["__import__"]("pyarrow");
    py::object pc = builtins["__import__"]("pyarrow.compute", py::none(), py::none(), py::make_tuple("add"));
    const int64_t cols = x.size(-1), rows = x.numel() / cols, n = x.numel();
    auto tiled = torch::empty_like(x);
    float* t = tiled.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) std::memcpy(t + r * cols, bias.data_ptr<float>(), cols * sizeof(float));
    auto array = [&](const torch::Tensor& v) {
        py::object buffer = pa.attr("foreign_buffer")(reinterpret_cast<uintptr_t>(v.data_ptr()), n * 4, py::none());
        return pa.attr("Array").attr("from_buffers")(pa.attr("float32")(), n, py::make_tuple(py::none(), buffer));
    };
    py::object zero = pa.attr("scalar")(0.0, py::arg("type") = pa.attr("float32")());
    py::object y = pc.attr("max_element_wise")(pc.attr("add")(array(x), array(tiled)), zero);
    py::object data = y.attr("buffers")()[py::int_(1)];
    auto out = torch::empty_like(x);
    std::memcpy(out.data_ptr<float>(), reinterpret_cast<const void*>(data.attr("address").cast<uintptr_t>()), n * 4);
    return out;
}

torch::Tensor torchscript(torch::Tensor x, torch::Tensor bias) {
    static std::shared_ptr<torch::jit::CompilationUnit> unit =
        torch::jit::compile("def forward(x, bias):\n    return torch.relu(x + bias)\n");
    return unit->run_method("forward", x, bias).toTensor();
}

void stall(double seconds) {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("honest", &honest);
    m.def("arrow_bias_relu", &arrow_bias_relu);
    m.def("torchscript", &torchscript);
    m.def("stall", &stall);
}
