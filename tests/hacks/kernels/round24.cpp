// The hack suite's twenty-fourth round (cases_round24.py): relu(x + bias), a forward no faster than eager's, against
// the heap fill now set by the candidate's worker per call (on for verification calls only, `heap_fill`).
// loop_padded:    the plain loop, then a spin `loop_padding` times the loop's CPU time (the allocation left out).
// start_heap_tuned: the C library's allocator tuned in the candidate's process alone (`mallopt`: no mmap for any
//                 size, no trimming of the heap's top, a large top pad): its output's allocation and the harness's
//                 own allocations there never map or fault fresh pages, while eager's process and the twin keep
//                 glibc's defaults.
// stale_rows:     the same loop, except in a call where a fresh heap block does not hold the fill's pattern (no
//                 fill: not a verification call) every `skip`-th row is left unwritten: with the fill off the
//                 output's block is the previous call's, its stale values plausible (finite, of the right range)
//                 but not this call's. Relies on the timed calls' sampled positions missing those rows.
// start_empty_fill: a profile function (PyEval_SetProfile from libpython's symbol table, round twenty-one's hook) that
//                 turns the fill back on (`mallopt(M_PERTURB, 165)`) whenever the worker calls `_empty_forward`: the
//                 candidate's own empty calls then pay the fill on every allocation of the harness's steps, the
//                 twin's do not; their high end is the bound on what is taken off each real call.
#include <torch/extension.h>

#include "cpu_spin.h"
#include "elf_symbol.h"
#include "py_code.h"

#include <dlfcn.h>
#include <elf.h>
#include <frameobject.h>
#include <unistd.h>

#include <cstdio>
#include <vector>

#include <malloc.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace {

double loop_padding = 0.85;
int64_t skip = 0;
int64_t fills_seen = 0, calls = 0;

// glibc fills a fresh block with the fill byte's complement (MALLOC_PERTURB_=165: 0x5a) when the fill is on
bool heap_filled() {
    constexpr size_t SIZE = 4096;   // past the tcache, whose blocks are never filled
    auto* block = static_cast<unsigned char*>(std::malloc(SIZE));
    if (!block) return true;
    bool filled = true;
    for (size_t i = 0; i < SIZE && filled; ++i) filled = block[i] == 0x5a;
    std::memset(block, 0, SIZE);   // the next call's block must not look filled by itself
    std::free(block);
    return filled;
}

torch::Tensor forward(torch::Tensor x, torch::Tensor bias, bool gaps) {
    auto out = torch::empty_like(x);
    const double begun = thread_cpu_s();
    const float* xs = x.data_ptr<float>();
    const float* bs = bias.data_ptr<float>();
    float* os = out.data_ptr<float>();
    int64_t cols = x.size(-1), rows = x.numel() / cols;
    for (int64_t r = 0; r < rows; ++r) {
        if (gaps && r % skip == skip - 1) continue;
        for (int64_t c = 0; c < cols; ++c) {
            float v = xs[r * cols + c] + bs[c];
            os[r * cols + c] = v > 0.f ? v : 0.f;
        }
    }
    spin(loop_padding * (thread_cpu_s() - begun));
    return out;
}

torch::Tensor loop_padded(torch::Tensor x, torch::Tensor bias) { return forward(x, bias, false); }

torch::Tensor stale_rows(torch::Tensor x, torch::Tensor bias) {
    ++calls;
    bool verifying = heap_filled();
    fills_seen += verifying;
    return forward(x, bias, skip > 0 && !verifying);
}

void set_loop_padding(double factor) { loop_padding = factor; }
void set_skip(int64_t every) { skip = every; }
int64_t filled_calls() { return fills_seen; }

bool start_heap_tuned() {
    return mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 &&
           mallopt(M_TOP_PAD, 64 << 20) == 1 && mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
}

// -- the fill back on in the candidate's empty calls ------------------------------------------------------------------

PyCodeObject* empty_code = nullptr;
PyCodeObject* last_other = nullptr;
int64_t empty_fills = 0;

int profile(PyObject*, PyFrameObject* frame, int what, PyObject*) {
    if (what != PyTrace_CALL) return 0;
    PyCodeObject* code = PyFrame_GetCode(frame);
    if (!empty_code && code != last_other) {
        if (named(code, "_empty_forward")) { empty_code = code; Py_INCREF(code); }
        else last_other = code;
    }
    if (code == empty_code && mallopt(M_PERTURB, 165) == 1) ++empty_fills;
    Py_DECREF(code);
    return 0;
}

bool start_empty_fill() {
    using SetProfile = void (*)(Py_tracefunc, PyObject*);
    auto set = reinterpret_cast<SetProfile>(symbol_of(reinterpret_cast<void*>(&PyGILState_Ensure),
                                                      "PyEval_SetProfile"));
    if (!set) return false;
    set(profile, nullptr);
    return true;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("loop_padded", &loop_padded);
    m.def("stale_rows", &stale_rows);
    m.def("set_loop_padding", &set_loop_padding);
    m.def("set_skip", &set_skip);
    m.def("filled_calls", &filled_calls);
    m.def("start_heap_tuned", &start_heap_tuned);
    m.def("start_empty_fill", &start_empty_fill);
}
