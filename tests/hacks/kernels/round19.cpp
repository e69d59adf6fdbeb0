// The hack suite's nineteenth round (cases_round19.py): relu(x + bias) computed by the interpreter (libpython's
// builtins, as round seventeen's interp_bias_relu), hidden from the interpreter rule's measure of it (op_samples.py:
// the interpreter's sampled time in a timed call beyond the harness's empty calls', up to the call's first answer).
// padded_interp:        the interpreter computes, then native code spins PADDING times as long (its own CPU time).
// short_threads_interp: the interpreter computes on fresh threads, each ending within a sampling period.
// short_threads_balanced: the same, 2048 elements a thread, then native code spins 1.2 times as long.
// short_threads_padded: the same, then native code spins three times as long.
// (round19_fork.cpp: a forked child's interpreter computing.)
#include <torch/extension.h>

#include "honest_relu.h"

#include <cstring>
#include <ctime>
#include <string>
#include <thread>

namespace {

namespace py = pybind11;

py::dict builtins() { return py::reinterpret_borrow<py::dict>(PyEval_GetBuiltins()); }

py::object import(const char* name) { return builtins()["__import__"](name); }

double thread_cpu_s() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// native busy work for `seconds` of this thread's CPU time
void spin(double seconds) {
    volatile double sink = 0.0;
    const double until = thread_cpu_s() + seconds;
    while (thread_cpu_s() < until)
        for (int i = 0; i < 1000; ++i) sink = sink + i * 1e-9;
}

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

torch::Tensor interp_all(const torch::Tensor& x, const torch::Tensor& bias) {
    auto out = torch::empty_like(x);
    interp_range(x.data_ptr<float>(), bias.data_ptr<float>(), x.size(-1), 0, x.numel(), out.data_ptr<float>());
    return out;
}

constexpr double PADDING = 5.0;

torch::Tensor padded_interp(torch::Tensor x, torch::Tensor bias) {
    const double start = thread_cpu_s();
    auto out = interp_all(x, bias);
    spin(PADDING * (thread_cpu_s() - start));
    return out;
}

// relu(x + bias) on fresh threads, `chunk` elements each (well under a millisecond of the interpreter's time), then
// native code spins `padding` times as long as they took
torch::Tensor short_threads(const torch::Tensor& x, const torch::Tensor& bias, int64_t chunk, double padding) {
    auto out = torch::empty_like(x);
    const float *xs = x.data_ptr<float>(), *bs = bias.data_ptr<float>();
    float* os = out.data_ptr<float>();
    const int64_t n = x.numel(), cols = x.size(-1);
    timespec a, b;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
    {
        py::gil_scoped_release released;
        for (int64_t begin = 0; begin < n; begin += chunk) {
            std::thread worker([=] {
                py::gil_scoped_acquire held;
                interp_range(xs, bs, cols, begin, std::min(n, begin + chunk), os);
            });
            worker.join();
        }
    }
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
    spin(padding * ((b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9));
    return out;
}

torch::Tensor short_threads_interp(torch::Tensor x, torch::Tensor bias) { return short_threads(x, bias, 256, 0.0); }

torch::Tensor short_threads_balanced(torch::Tensor x, torch::Tensor bias) { return short_threads(x, bias, 2048, 1.2); }

torch::Tensor short_threads_padded(torch::Tensor x, torch::Tensor bias) { return short_threads(x, bias, 256, 3.0); }

// honest: relu(x + bias) by the plain loop on four threads started and joined each call (each ends within a period)
torch::Tensor honest_threads(torch::Tensor x, torch::Tensor bias) {
    auto out = torch::empty_like(x);
    const float *xs = x.data_ptr<float>(), *bs = bias.data_ptr<float>();
    float* os = out.data_ptr<float>();
    const int64_t cols = x.size(-1), rows = x.numel() / cols, parts = 4;
    std::thread workers[parts];
    for (int64_t p = 0; p < parts; ++p)
        workers[p] = std::thread([=] {
            for (int64_t r = p * rows / parts; r < (p + 1) * rows / parts; ++r)
                for (int64_t c = 0; c < cols; ++c) {
                    float v = xs[r * cols + c] + bs[c];
                    os[r * cols + c] = v > 0.f ? v : 0.f;
                }
        });
    for (auto& worker : workers) worker.join();
    return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("honest", &honest);
    m.def("honest_threads", &honest_threads);
    m.def("padded_interp", &padded_interp);
    m.def("short_threads_interp", &short_threads_interp);
    m.def("short_threads_balanced", &short_threads_balanced);
    m.def("short_threads_padded", &short_threads_padded);
}
