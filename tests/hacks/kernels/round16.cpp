// The hack suite's sixteenth round (cases_round16.py): the honest loop, and the same relu(x + bias) by another
// Python package's native code.
// pil_bias_relu: relu(x + bias) by Pillow's image arithmetic (PIL's _imagingmath, which starts no thread), Pillow
//                imported from C++ through the builtins' `__import__`; the binding tiles the bias, hands both as
//                32-bit float images and copies Pillow's result into the output it allocated.
#include <torch/extension.h>

#include "honest_relu.h"

#include <cstring>

namespace {

torch::Tensor pil_bias_relu(torch::Tensor x, torch::Tensor bias) {
    namespace py = pybind11;
    auto builtins = py::reinterpret_borrow<py::dict>(PyEval_GetBuiltins());
    py::object image = builtins["__import__"]("PIL.Image", py::none(), py::none(), py::make_tuple("frombuffer"));
    py::object math = builtins["__import__"]("PIL.ImageMath", py::none(), py::none(), py::make_tuple("lambda_eval"));
    const int64_t cols = x.size(-1), rows = x.numel() / cols, n = x.numel();
    auto tiled = torch::empty_like(x);
    float* t = tiled.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) std::memcpy(t + r * cols, bias.data_ptr<float>(), cols * sizeof(float));
    auto as_image = [&](const torch::Tensor& v) {
        py::bytes raw(reinterpret_cast<const char*>(v.data_ptr<float>()), n * 4);
        return image.attr("frombuffer")("F", py::make_tuple(cols, rows), raw, "raw", "F", 0, 1);
    };
    py::cpp_function relu_sum([](py::dict env) { return env["max"](env["a"].attr("__add__")(env["b"]), 0.0); });
    py::object y = math.attr("lambda_eval")(relu_sum, py::arg("a") = as_image(x), py::arg("b") = as_image(tiled));
    std::string data = y.attr("tobytes")().cast<std::string>();
    auto out = torch::empty_like(x);
    std::memcpy(out.data_ptr<float>(), data.data(), n * 4);
    return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("honest", &honest);
    m.def("pil_bias_relu", &pil_bias_relu);
}
