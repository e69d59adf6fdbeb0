// The hack suite's twenty-fifth round (cases_round25.py): relu(x + bias), a forward no faster than eager's, against
// the reward's condition on the calls' totals and what is taken off each call (the twin's empty calls).
// loop_padded:    the plain loop, then a spin `loop_padding` times the loop's CPU time (the allocation left out).
// loop_evicting:  the same loop, the same CPU time of padding, spent storing into a buffer far larger than the
//                 last-level cache (one store a cache line, going on where the last call stopped): the forward
//                 costs what the control's does, and what runs next on the machine (eager's timed run on the
//                 same draw, the twin's empty call) finds the caches full of the candidate's dirty lines.
// start_raised_bound: a profile function (PyEval_SetProfile from libpython's symbol table, round twenty-one's
//                 hook) that spins `empty_spin_s` whenever the worker calls `_empty_forward`, so that the
//                 candidate's own empty calls, whose high end bounds what is taken off each call, never cap the
//                 twin's median; and marks the call after it (a warm-up, never timed) for `after_empty_bytes`
//                 more dirty stores, free, just before whatever the schedule runs next.
// loop_wide:      the same loop, the same CPU time of padding spent on 512-bit fused multiply-adds (the heaviest
//                 AVX-512 work, on which Intel's cores lower their clock, and keep it lowered a while after): what
//                 runs next on that core (eager's timed run on the same draw, the twin's empty call) would run at
//                 the lower clock, its CPU time longer.
// start_gc_off:   the interpreter's cyclic garbage collector switched off in the candidate's process
//                 (`PyGC_Disable`, from libpython's symbol table): the harness's own Python steps in its calls
//                 then run without collections, the twin's (what is taken off each call) with them.
#include <torch/extension.h>

#include "cpu_spin.h"
#include "honest_relu.h"
#include "elf_symbol.h"
#include "py_code.h"

#include <frameobject.h>
#include <immintrin.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

double loop_padding = 0.85;
std::vector<unsigned char> dirty;   // the evicting stores' buffer, touched once at start
size_t dirty_at = 0;
size_t after_empty_bytes = 0;
bool empty_just_ran = false;
double empty_spin_s = 0.0;
int64_t empty_calls = 0, free_evictions = 0;

// stores into `dirty`, a cache line at a time, until the thread's CPU clock reaches `until` (or `bytes` are done
// where `until` is 0)
void evict(double until, size_t bytes) {
    const size_t line = 64, size = dirty.size();
    if (!size) return;
    size_t done = 0;
    for (;;) {
        for (int i = 0; i < 256; ++i) {
            dirty[dirty_at] = static_cast<unsigned char>(dirty[dirty_at] + 1);
            dirty_at += line;
            if (dirty_at >= size) dirty_at = 0;
        }
        done += 256 * line;
        if (until > 0 ? thread_cpu_s() >= until : done >= bytes) return;
    }
}

float wide_sink = 0.f;

__attribute__((target("avx512f"))) void wide_spin(double seconds) {
    const double until = thread_cpu_s() + seconds;
    __m512 a0 = _mm512_set1_ps(1.0001f), a1 = _mm512_set1_ps(0.9999f), a2 = _mm512_set1_ps(1.0002f),
           a3 = _mm512_set1_ps(0.9998f), a4 = _mm512_set1_ps(1.0003f), a5 = _mm512_set1_ps(0.9997f),
           a6 = _mm512_set1_ps(1.0004f), a7 = _mm512_set1_ps(0.9996f);
    const __m512 m = _mm512_set1_ps(0.99999f), c = _mm512_set1_ps(1e-6f);
    while (thread_cpu_s() < until)
        for (int i = 0; i < 256; ++i) {   // eight independent chains keep both FMA ports busy
            a0 = _mm512_fmadd_ps(a0, m, c); a1 = _mm512_fmadd_ps(a1, m, c);
            a2 = _mm512_fmadd_ps(a2, m, c); a3 = _mm512_fmadd_ps(a3, m, c);
            a4 = _mm512_fmadd_ps(a4, m, c); a5 = _mm512_fmadd_ps(a5, m, c);
            a6 = _mm512_fmadd_ps(a6, m, c); a7 = _mm512_fmadd_ps(a7, m, c);
        }
    __m512 all = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                               _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    wide_sink += _mm512_reduce_add_ps(all);
}

enum class Padding { spin, evicting, wide };

torch::Tensor forward(torch::Tensor x, torch::Tensor bias, Padding padding) {
    auto out = torch::empty_like(x);
    const double begun = thread_cpu_s();
    relu_into(x, bias, out);
    const double loop = thread_cpu_s() - begun;
    if (padding == Padding::evicting && !dirty.empty()) evict(thread_cpu_s() + loop_padding * loop, 0);
    else if (padding == Padding::wide) wide_spin(loop_padding * loop);
    else spin(loop_padding * loop);
    if (empty_just_ran && after_empty_bytes) {   // the call after an empty one is a warm-up: not timed
        evict(0, after_empty_bytes);
        ++free_evictions;
    }
    empty_just_ran = false;
    return out;
}

torch::Tensor loop_padded(torch::Tensor x, torch::Tensor bias) { return forward(x, bias, Padding::spin); }
torch::Tensor loop_evicting(torch::Tensor x, torch::Tensor bias) { return forward(x, bias, Padding::evicting); }
torch::Tensor loop_wide(torch::Tensor x, torch::Tensor bias) { return forward(x, bias, Padding::wide); }

void set_loop_padding(double factor) { loop_padding = factor; }

bool start_evicting(int64_t mib) {
    dirty.assign(static_cast<size_t>(mib) << 20, 1);
    return !dirty.empty();
}

// -- the candidate's own empty calls raised, the call after them evicting --------------------------------------------

PyCodeObject* empty_code = nullptr;
PyCodeObject* last_other = nullptr;

int profile(PyObject*, PyFrameObject* frame, int what, PyObject*) {
    if (what != PyTrace_CALL) return 0;
    PyCodeObject* code = PyFrame_GetCode(frame);
    if (!empty_code && code != last_other) {
        if (named(code, "_empty_forward")) { empty_code = code; Py_INCREF(code); }
        else last_other = code;
    }
    if (code == empty_code) {
        ++empty_calls;
        empty_just_ran = true;
        spin(empty_spin_s);
    }
    Py_DECREF(code);
    return 0;
}

bool start_raised_bound(double spin_ms, int64_t after_empty_mib) {
    using SetProfile = void (*)(Py_tracefunc, PyObject*);
    auto set = reinterpret_cast<SetProfile>(symbol_of(reinterpret_cast<void*>(&PyGILState_Ensure),
                                                      "PyEval_SetProfile"));
    if (!set) return false;
    empty_spin_s = spin_ms / 1e3;
    after_empty_bytes = static_cast<size_t>(after_empty_mib) << 20;
    set(profile, nullptr);
    return true;
}

bool start_gc_off() {
    using Disable = int (*)();
    auto disable = reinterpret_cast<Disable>(symbol_of(reinterpret_cast<void*>(&PyGILState_Ensure), "PyGC_Disable"));
    if (!disable) return false;
    disable();
    return true;
}

int64_t empty_calls_seen() { return empty_calls; }
int64_t free_evictions_made() { return free_evictions; }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("loop_padded", &loop_padded);
    m.def("loop_evicting", &loop_evicting);
    m.def("loop_wide", &loop_wide);
    m.def("set_loop_padding", &set_loop_padding);
    m.def("start_evicting", &start_evicting);
    m.def("start_raised_bound", &start_raised_bound);
    m.def("start_gc_off", &start_gc_off);
    m.def("empty_calls_seen", &empty_calls_seen);
    m.def("free_evictions_made", &free_evictions_made);
}
