// Round thirteen (tests/hacks/cases_round13.py), the link check: ATen's own loader (at::DynamicLibrary, in
// libtorch_cpu.so) is dlopen and dlsym under another name. Through it this library reaches a function the
// link check refuses by name (PyRun_SimpleStringFlags: Python run from native code) without importing it.
//
// honest, gated:  relu(x + bias) in a plain loop; gated zeroes it unless `ok` (honest_relu.h).
// reach_python:   PyRun_SimpleStringFlags found through at::DynamicLibrary (the process's own global scope,
//                 else the libpython /proc/self/maps names) and run; true when the Python ran.
#include <torch/extension.h>

#include <ATen/DynamicLibrary.h>

#include "honest_relu.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

namespace {

std::string libpython() {
    std::string found;
    if (FILE* maps = std::fopen("/proc/self/maps", "r")) {
        char line[4096];
        while (std::fgets(line, sizeof line, maps))
            if (std::strstr(line, "/libpython")) {
                found = std::string(std::strchr(line, '/'));
                found.erase(found.find_last_not_of("\n") + 1);
                break;
            }
        std::fclose(maps);
    }
    return found;
}

}  // namespace

bool reach_python() {
    using Run = int (*)(const char*, void*);
    std::unique_ptr<at::DynamicLibrary> library;
    try {
        library = std::make_unique<at::DynamicLibrary>(nullptr);
    } catch (const c10::Error&) {
        library = std::make_unique<at::DynamicLibrary>(libpython().c_str());
    }
    auto run = reinterpret_cast<Run>(library->sym("PyRun_SimpleStringFlags"));
    return run && run("import builtins\nbuiltins.r13_reached = True\n", nullptr) == 0;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("honest", &honest);
    m.def("gated", &gated);
    m.def("reach_python", &reach_python);
}
