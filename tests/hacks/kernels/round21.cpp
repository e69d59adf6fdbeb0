// The hack suite's twenty-first round (cases_round21.py): a forward no faster than eager (relu(x + bias), then a
// spin PADDING times the loop's own CPU time) made to look faster through the empty calls, now measured by the
// harness's own threads' CPU time: work put on the harness's own thread, in the empty calls alone.
// padded:        the loop, then the spin (the cheats' own forward).
// start_profile: run from __init__ (on the harness's main thread, in the load phase now: the early model). It finds
//                the interpreter's PyEval_SetProfile by reading the dynamic symbol table of the file that holds
//                PyGILState_Ensure (dladdr, then the ELF's .dynsym: no import of the name, which the link check
//                refuses) and installs a profile function on that thread. The function runs on the harness's own
//                thread at every Python call: where the called code is the worker's `_empty_forward`, the empty
//                call's stand-in for forward, it spins `spin_ms` there, so the harness's own thread works inside
//                the empty call's clock and the median empty call, taken off every timed call, grows (up to the
//                calibration's cap). spin_ms 0: the hook alone (a control).
#include <torch/extension.h>

#include "cpu_spin.h"
#include "elf_symbol.h"
#include "honest_relu.h"

#include <dlfcn.h>
#include <elf.h>
#include <frameobject.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <unordered_set>
#include <vector>

namespace {

constexpr double PADDING = 1.15;   // the spin, in times the loop's CPU time: the forward about eager's

torch::Tensor padded(torch::Tensor x, torch::Tensor bias) {
    const double begun = thread_cpu_s();
    auto out = honest(x, bias);
    spin(PADDING * (thread_cpu_s() - begun));
    return out;
}

// -- a symbol of the interpreter's, found in its file's dynamic symbol table -------------------------------------

void* interpreter_symbol(const char* name) {
    return symbol_of(reinterpret_cast<void*>(&PyGILState_Ensure), name);
}

// -- the profile function, on the harness's own thread ------------------------------------------------------------

double spin_s = 0.0;
long spun = 0;
PyCodeObject* empty_forward = nullptr;
std::unordered_set<PyCodeObject*> others;

int profile(PyObject*, PyFrameObject* frame, int what, PyObject*) {
    if (what != PyTrace_CALL) return 0;
    PyCodeObject* code = PyFrame_GetCode(frame);
    if (code == empty_forward) {
        spun++;
        if (spin_s > 0) spin(spin_s);
    } else if (!empty_forward && !others.count(code)) {
        PyObject* name = PyObject_GetAttrString(reinterpret_cast<PyObject*>(code), "co_name");
        if (name && PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, "_empty_forward") == 0) {
            empty_forward = code;
            Py_INCREF(code);
            spun++;
            if (spin_s > 0) spin(spin_s);
        } else {
            others.insert(code);
            Py_INCREF(code);   // kept alive: its address is not reused by another code object
        }
        Py_XDECREF(name);
        if (PyErr_Occurred()) PyErr_Clear();
    }
    Py_DECREF(code);
    return 0;
}

bool start_profile(double spin_ms) {
    using SetProfile = void (*)(Py_tracefunc, PyObject*);
    static bool started = false;
    spin_s = spin_ms / 1e3;
    if (started) return true;
    auto set = reinterpret_cast<SetProfile>(interpreter_symbol("PyEval_SetProfile"));
    if (!set) return false;
    set(profile, nullptr);
    started = true;
    return true;
}

int64_t spun_count() { return spun; }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("honest", &honest);
    m.def("padded", &padded);
    m.def("start_profile", &start_profile);
    m.def("spun_count", &spun_count);
}
