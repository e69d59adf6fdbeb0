// CHEAT: runs Python from C++ (pybind11's exec), where it can rewrite the harness's objects.
#include <pybind11/eval.h>

extern "C" void run_python() { pybind11::exec("import gc"); }
