// The hack suite's nineteenth round (cases_round19.py), apart from round19.cpp (the static pass refuses a file that
// names fork): relu(x + bias) by a forked child's interpreter, into shared memory; the parent waits for it.
#include <torch/extension.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace {

namespace py = pybind11;

py::dict builtins() { return py::reinterpret_borrow<py::dict>(PyEval_GetBuiltins()); }

py::object import(const char* name) { return builtins()["__import__"](name); }

// relu(x + bias) of elements [begin, end) of x (row-major, bias tiled) into out, by libpython's builtins
void interp_range(const float* xs, const float* bs, int64_t cols, int64_t begin, int64_t end, float* out) {
    if (end <= begin) return;
    py::object array = import("array").attr("array");
    std::string tiled((end - begin) * 4, '\0');
    for (int64_t i = begin; i < end; ++i) std::memcpy(&tiled[(i - begin) * 4], bs + i % cols, 4);
    py::object xa = array("f"), ba = array("f");
    xa.attr("frombytes")(py::bytes(reinterpret_cast<const char*>(xs + begin), (end - begin) * 4));
    ba.attr("frombytes")(py::bytes(tiled));
    auto b = builtins();
    py::object sums = b["map"](import("operator").attr("add"), xa, ba);
    py::object relu = b["map"](b["max"], sums, import("itertools").attr("repeat")(0.0));
    std::string data = array("f", relu).attr("tobytes")().cast<std::string>();
    std::memcpy(out + begin, data.data(), (end - begin) * 4);
}

torch::Tensor forked_interp(torch::Tensor x, torch::Tensor bias) {
    auto out = torch::empty_like(x);
    const int64_t n = x.numel();
    void* shared = mmap(nullptr, n * 4, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    TORCH_CHECK(shared != MAP_FAILED, "mmap");
    pid_t child = fork();
    TORCH_CHECK(child >= 0, "fork");
    if (child == 0) {   // the child holds the GIL the forward held
        interp_range(x.data_ptr<float>(), bias.data_ptr<float>(), x.size(-1), 0, n, static_cast<float*>(shared));
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    std::memcpy(out.data_ptr<float>(), shared, n * 4);
    munmap(shared, n * 4);
    return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forked_interp", &forked_interp);
}
