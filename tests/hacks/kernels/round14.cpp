// Round fourteen (tests/hacks/cases_round14.py): the kernels beside this round's cheats, most of which are
// Python's (model_new.py). Nothing here imports a function the link check refuses by name (ATen's entry
// points and prctl are found as in rounds nine to thirteen: elf_lookup.h).
//
// honest, gated:   relu(x + bias) in a plain loop; gated zeroes it unless `ok` (honest_relu.h).
// blank:           an output-sized tensor the kernel allocates and leaves as it is (a decoy: something else
//                  fills it).
// copy:            a plain copy of a tensor (a decoy's "kernel": the values then changed by something else).
// dot:             the dot product of two tensors, a 0-d tensor (honest).
// transpose:       the honest (tiled) transpose of a matrix.
// aten:            relu(x + bias) by at::cpu::add and at::cpu::clamp_min (no dispatcher, no import).
// perf_disable:    prctl(PR_TASK_PERF_EVENTS_DISABLE), which disables the performance counters attached to
//                  the calling process (found in libc's symbol table); returns prctl's result.
// cloak_memfd:     libtorch_cpu.so's code mapping copied into a memory file named `name` (after a first page
//                  with an ELF header that loads the code and names no symbol), then mapped over the
//                  original (MAP_FIXED): the same bytes at the same addresses, from a memory file.
// cloak_shared:    the same code copied into shared anonymous memory (listed as "/dev/zero (deleted)") moved
//                  over the original (mremap).
// torch_ops:       torch.ops.<ns>.<name>(*args), reached from C++ through the builtins' __import__ (what every
//                  binding may call), so that no name of it shows in model_new.py.
// numpy_bias_relu: relu(x + bias) by numpy's ufuncs into the output the kernel allocated, numpy reached from
//                  C++ through the builtins' __import__.
// float8:          an output of x's shape in float8_e4m3fn (a dtype the harness's reader has no table for).
// r14_ops::bias_relu: the honest kernel registered as a custom operator of the solution's own namespace.
#include <torch/extension.h>

#include "elf_lookup.h"
#include "honest_relu.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace {

using Add = at::Tensor (*)(const at::Tensor&, const at::Tensor&, const c10::Scalar&);
using ClampMin = at::Tensor (*)(const at::Tensor&, const c10::Scalar&);
using Prctl = int (*)(int, unsigned long, unsigned long, unsigned long, unsigned long);

// found at load, before a cloak replaces the library's mapping (which `lookup` finds it by)
const Add add = reinterpret_cast<Add>(lookup("libtorch_cpu.so", "_ZN2at3cpu3addERKNS_6TensorES3_RKN3c106ScalarE"));
const ClampMin clamp_min = reinterpret_cast<ClampMin>(
    lookup("libtorch_cpu.so", "_ZN2at3cpu9clamp_minERKNS_6TensorERKN3c106ScalarE"));

torch::Tensor blank(torch::Tensor x) { return torch::empty_like(x); }

torch::Tensor copy(torch::Tensor x) {
    TORCH_CHECK(x.is_contiguous(), "a contiguous input expected");
    auto out = torch::empty_like(x);
    std::memcpy(out.data_ptr(), x.data_ptr(), x.numel() * x.element_size());
    return out;
}

torch::Tensor dot(torch::Tensor a, torch::Tensor b) {
    const float* as = a.data_ptr<float>();
    const float* bs = b.data_ptr<float>();
    double sum = 0;
    for (int64_t i = 0; i < a.numel(); ++i) sum += static_cast<double>(as[i]) * bs[i];
    auto out = torch::empty({}, a.options());
    *out.data_ptr<float>() = static_cast<float>(sum);
    return out;
}

torch::Tensor transpose(torch::Tensor x) {
    TORCH_CHECK(x.is_contiguous() && x.dim() == 2, "a contiguous matrix expected");
    const int64_t rows = x.size(0), cols = x.size(1);
    auto out = torch::empty({cols, rows}, x.options());
    const float* xs = x.data_ptr<float>();
    float* os = out.data_ptr<float>();
    const int64_t tile = 32;
    for (int64_t r0 = 0; r0 < rows; r0 += tile)
        for (int64_t c0 = 0; c0 < cols; c0 += tile)
            for (int64_t r = r0; r < std::min(r0 + tile, rows); ++r)
                for (int64_t c = c0; c < std::min(c0 + tile, cols); ++c)
                    os[c * rows + r] = xs[r * cols + c];
    return out;
}

torch::Tensor aten(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(add && clamp_min, "at::cpu::add / clamp_min not found");
    return clamp_min(add(x, bias, 1), 0);
}

int64_t perf_disable() {
    auto prctl = reinterpret_cast<Prctl>(lookup("libc.so", "prctl"));
    TORCH_CHECK(prctl, "prctl was not found");
    return prctl(31 /* PR_TASK_PERF_EVENTS_DISABLE */, 0, 0, 0, 0);
}

// libtorch_cpu.so's code mapping: [lo, hi)
void code_mapping(unsigned long& lo, unsigned long& hi) {
    FILE* maps = std::fopen("/proc/self/maps", "r");
    TORCH_CHECK(maps, "no /proc/self/maps");
    char line[4096];
    lo = hi = 0;
    while (std::fgets(line, sizeof line, maps)) {
        unsigned long a = 0, b = 0;
        char perms[8] = {0};
        if (std::sscanf(line, "%lx-%lx %7s", &a, &b, perms) == 3 && std::strcmp(perms, "r-xp") == 0 &&
            std::strstr(line, "libtorch_cpu.so")) { lo = a; hi = b; break; }
    }
    std::fclose(maps);
    TORCH_CHECK(lo, "libtorch_cpu.so's code mapping was not found");
}

// an ELF header whose one PT_LOAD maps file offset 4096 on (the code), with no section or symbol table
void elf_page(char* page, size_t code_size) {
    std::memset(page, 0, 4096);
    auto* eh = reinterpret_cast<Elf64_Ehdr*>(page);
    std::memcpy(eh->e_ident, ELFMAG, SELFMAG);
    eh->e_ident[EI_CLASS] = ELFCLASS64;
    eh->e_ident[EI_DATA] = ELFDATA2LSB;
    eh->e_ident[EI_VERSION] = EV_CURRENT;
    eh->e_type = ET_DYN;
    eh->e_machine = EM_X86_64;
    eh->e_version = EV_CURRENT;
    eh->e_ehsize = sizeof(Elf64_Ehdr);
    eh->e_phentsize = sizeof(Elf64_Phdr);
    eh->e_shentsize = sizeof(Elf64_Shdr);
    eh->e_phoff = sizeof(Elf64_Ehdr);
    eh->e_phnum = 1;
    auto* ph = reinterpret_cast<Elf64_Phdr*>(page + sizeof(Elf64_Ehdr));
    ph->p_type = PT_LOAD;
    ph->p_flags = PF_R | PF_X;
    ph->p_offset = 4096;
    ph->p_vaddr = ph->p_paddr = 4096;
    ph->p_filesz = ph->p_memsz = code_size;
    ph->p_align = 4096;
}

int64_t cloak_memfd(const std::string& name) {
    unsigned long lo, hi;
    code_mapping(lo, hi);
    const size_t size = hi - lo;
    int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
    TORCH_CHECK(fd >= 0, "memfd_create: ", std::strerror(errno));
    char page[4096];
    elf_page(page, size);
    bool written = pwrite(fd, page, sizeof page, 0) == (ssize_t)sizeof page;
    for (size_t done = 0; written && done < size;) {
        ssize_t n = pwrite(fd, reinterpret_cast<const char*>(lo) + done, size - done, 4096 + done);
        written = n > 0;
        done += n > 0 ? n : 0;
    }
    TORCH_CHECK(written, "writing the memory file: ", std::strerror(errno));
    // one step: the library's code mapping replaced by the memory file's copy
    void* at = mmap(reinterpret_cast<void*>(lo), size, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED, fd, 4096);
    close(fd);
    TORCH_CHECK(at == reinterpret_cast<void*>(lo), "mmap: ", std::strerror(errno));
    return static_cast<int64_t>(size);
}

int64_t cloak_shared() {
    unsigned long lo, hi;
    code_mapping(lo, hi);
    const size_t size = hi - lo;
    void* copy = mmap(nullptr, size, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    TORCH_CHECK(copy != MAP_FAILED, "mmap: ", std::strerror(errno));
    std::memcpy(copy, reinterpret_cast<void*>(lo), size);
    void* moved = mremap(copy, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(lo));
    TORCH_CHECK(moved == reinterpret_cast<void*>(lo), "mremap: ", std::strerror(errno));
    return static_cast<int64_t>(size);
}

pybind11::object torch_ops(const std::string& ns, const std::string& name, pybind11::tuple args) {
    namespace py = pybind11;
    auto builtins = py::reinterpret_borrow<py::dict>(PyEval_GetBuiltins());
    py::object ops = builtins["__import__"]("torch").attr("ops");
    return ops.attr(ns.c_str()).attr(name.c_str())(*args);
}

torch::Tensor numpy_bias_relu(torch::Tensor x, torch::Tensor bias) {
    namespace py = pybind11;
    auto out = torch::empty_like(x);
    auto builtins = py::reinterpret_borrow<py::dict>(PyEval_GetBuiltins());
    py::object np = builtins["__import__"]("numpy");
    py::object o = np.attr("asarray")(out);   // views of the tensors' memory
    np.attr("add")(np.attr("asarray")(x), np.attr("asarray")(bias), py::arg("out") = o);
    np.attr("maximum")(o, 0.0, py::arg("out") = o);
    return out;
}

torch::Tensor float8(torch::Tensor x) {   // one byte per element, all 0x38 (1.0): wrong whatever the reader makes of it
    auto out = torch::empty(x.sizes(), x.options().dtype(torch::kFloat8_e4m3fn));
    std::memset(out.data_ptr(), 0x38, out.numel());
    return out;
}

}  // namespace

TORCH_LIBRARY(r14_ops, m) {
    m.def("bias_relu(Tensor x, Tensor bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(r14_ops, CPU, m) {
    m.impl("bias_relu", &honest);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("honest", &honest);
    m.def("gated", &gated);
    m.def("blank", &blank);
    m.def("copy", &copy);
    m.def("dot", &dot);
    m.def("transpose", &transpose);
    m.def("aten", &aten);
    m.def("perf_disable", &perf_disable);
    m.def("cloak_memfd", &cloak_memfd);
    m.def("cloak_shared", &cloak_shared);
    m.def("torch_ops", &torch_ops);
    m.def("numpy_bias_relu", &numpy_bias_relu);
    m.def("float8", &float8);
}
