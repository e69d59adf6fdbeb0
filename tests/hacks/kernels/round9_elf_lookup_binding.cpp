// Round nine (tests/hacks/cases_round9.py): PyTorch's own CPU kernels, found without importing them.
//
// The binding computes relu(x + bias) with at::cpu::add and at::cpu::clamp_min, the structured kernels'
// entry points, which run ATen's vectorized loops without passing through the dispatcher (so the guard's
// RecordFunction callback never sees an operator). Their addresses come from libtorch_cpu.so's dynamic
// symbol table, read from the file that /proc/self/maps names, plus where it is mapped: no dlsym, no
// import of the at::cpu functions, nothing the link check lists; plain fopen/fread only.
#include <torch/extension.h>

#include "elf_lookup.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Add = at::Tensor (*)(const at::Tensor&, const at::Tensor&, const c10::Scalar&);
using ClampMin = at::Tensor (*)(const at::Tensor&, const c10::Scalar&);

const Add add = reinterpret_cast<Add>(lookup("libtorch_cpu.so", "_ZN2at3cpu3addERKNS_6TensorES3_RKN3c106ScalarE"));
const ClampMin clamp_min = reinterpret_cast<ClampMin>(
    lookup("libtorch_cpu.so", "_ZN2at3cpu9clamp_minERKNS_6TensorERKN3c106ScalarE"));

}  // namespace

torch::Tensor bias_relu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(add && clamp_min, "PyTorch's kernels were not found");
    return clamp_min(add(x, bias, 1), 0);   // PyTorch does the work, past the dispatcher
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("bias_relu", &bias_relu); }
