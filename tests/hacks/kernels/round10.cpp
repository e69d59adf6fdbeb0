// Round ten (tests/hacks/cases_round10.py): PyTorch's kernels run where the harness's sampling of the
// candidate's CPU time (rules/op_samples.py) does not count them, and a process that closes its memory to
// the harness before the harness opens it.
//
// Every ATen entry point here is found as round nine's was: its address read from libtorch_cpu.so's (or
// libc's) dynamic symbol table, the file /proc/self/maps names, plus where it is mapped. No dlsym, no
// import of the function, no dispatcher (the guard's RecordFunction sees no operator).
//
// honest:            relu(x + bias) in a plain loop (the control every case is built beside).
// aten:              relu(x + bias) by at::cpu::add and at::cpu::clamp_min (round nine's cheat).
// diluted:           the same, after `burn_calls` calls that first spin `burn_ms` in this library's own code:
//                    the verification calls (the first ones, untimed) fill the sampled time with samples
//                    the rule allows, so ATen's share over all calls stays under MIN_SHARE.
// fresh_threads:     relu(x + bias) by at::cpu::add_out and clamp_min_, a few rows at a time, each chunk on a
//                    std::thread started and joined for it (fair host parallelism): a perf event inherited by
//                    a new thread starts a full sampling period, so a thread that ends sooner is never sampled.
// conv_jit:          a 2-D convolution by at::native::mkldnn_convolution: oneDNN generates its kernels at
//                    run time into anonymous executable memory, which no file names. The one operator it
//                    sends through the dispatcher (aten::as_strided_) is written out of the guard's record
//                    again, as round eight's r8_guard_record_restored_natively did.
// cloak:             libtorch_cpu.so's code mapping (r-xp) copied into anonymous executable memory and moved
//                    over the original (mremap, MREMAP_FIXED): the same bytes at the same addresses, so ATen
//                    runs as before, but /proc/PID/maps names no file there and a sample has no symbol.
// copy / transpose:  a plain copy of a matrix, and the honest (tiled) transpose of one.
// hide:              prctl(PR_SET_DUMPABLE, 0), found in libc the same way: from then on no other process of
//                    the user may open /proc/PID/mem or read /proc/PID/maps of this one.
#include <torch/extension.h>

#include "elf_lookup.h"

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <sys/mman.h>
#include <vector>

namespace {

using Add = at::Tensor (*)(const at::Tensor&, const at::Tensor&, const c10::Scalar&);
using ClampMin = at::Tensor (*)(const at::Tensor&, const c10::Scalar&);
using Conv = at::Tensor (*)(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                            c10::IntArrayRef, c10::IntArrayRef, c10::IntArrayRef, int64_t);
using AddOut = at::Tensor& (*)(at::Tensor&, const at::Tensor&, const at::Tensor&, const c10::Scalar&);
using ClampMinInPlace = at::Tensor& (*)(at::Tensor&, const c10::Scalar&);
using Prctl = int (*)(int, unsigned long, unsigned long, unsigned long, unsigned long);

const Add add = reinterpret_cast<Add>(lookup("libtorch_cpu.so", "_ZN2at3cpu3addERKNS_6TensorES3_RKN3c106ScalarE"));
const ClampMin clamp_min = reinterpret_cast<ClampMin>(
    lookup("libtorch_cpu.so", "_ZN2at3cpu9clamp_minERKNS_6TensorERKN3c106ScalarE"));
const AddOut add_out = reinterpret_cast<AddOut>(
    lookup("libtorch_cpu.so", "_ZN2at3cpu7add_outERNS_6TensorERKS1_S4_RKN3c106ScalarE"));
const ClampMinInPlace clamp_min_ = reinterpret_cast<ClampMinInPlace>(
    lookup("libtorch_cpu.so", "_ZN2at3cpu10clamp_min_ERNS_6TensorERKN3c106ScalarE"));
const Conv conv = reinterpret_cast<Conv>(lookup(
    "libtorch_cpu.so", "_ZN2at6native18mkldnn_convolutionERKNS_6TensorES3_RKSt8optionalIS1_EN3c108ArrayRefIlEESA_SA_l"));

// the guard's record (round eight's forging, r8_guard_record_restored_natively): found by its magic in a
// library's writable data, its refusals written back after the call
struct Report { char magic[8]; int64_t begins, ends, violations, custom, extension, checked, foreign, ops;
                char rule[32]; char op[152]; };

Report* find_record() {
    static Report* found = nullptr;
    if (found) return found;
    const char magic[8] = {'C', 'A', 'G', 'R', 'E', 'C', '1', 0};
    FILE* maps = std::fopen("/proc/self/maps", "r");
    if (!maps) return nullptr;
    char line[4096];
    while (!found && std::fgets(line, sizeof line, maps)) {
        unsigned long lo = 0, hi = 0;
        char perms[8] = {0};
        if (std::sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || perms[0] != 'r' || perms[1] != 'w') continue;
        if (!std::strstr(line, ".so")) continue;
        for (unsigned long at = lo; at + sizeof(Report) <= hi; at += 8) {
            Report* r = reinterpret_cast<Report*>(at);
            if (std::memcmp(r->magic, magic, 8) == 0 && r->begins >= 0 && r->ends >= 0) { found = r; break; }
        }
    }
    std::fclose(maps);
    return found;
}

long calls = 0;
volatile double sink = 0;

void spin(double ms) {   // this library's own code, nothing else
    auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(ms);
    double acc = sink;
    while (std::chrono::steady_clock::now() < until)
        for (int i = 0; i < 2000; ++i) acc = acc * 1.0000001 + 1e-9;
    sink = acc;
}

}  // namespace

torch::Tensor honest(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_contiguous() && bias.is_contiguous(), "contiguous inputs expected");
    auto out = torch::empty_like(x);
    const float* xs = x.data_ptr<float>();
    const float* bs = bias.data_ptr<float>();
    float* os = out.data_ptr<float>();
    int64_t cols = bias.numel(), rows = x.numel() / cols;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            float v = xs[r * cols + c] + bs[c];
            os[r * cols + c] = v > 0.f ? v : 0.f;
        }
    return out;
}

torch::Tensor aten(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(add && clamp_min, "PyTorch's kernels were not found");
    return clamp_min(add(x, bias, 1), 0);   // PyTorch does the work, past the dispatcher
}

torch::Tensor diluted(torch::Tensor x, torch::Tensor bias, int64_t burn_calls, double burn_ms) {
    if (calls++ < burn_calls) spin(burn_ms);   // the first calls are verification's: untimed
    return aten(x, bias);
}

torch::Tensor fresh_threads(torch::Tensor x, torch::Tensor bias, int64_t fine_calls, int64_t fine_rows,
                            int64_t coarse_rows) {
    TORCH_CHECK(add_out && clamp_min_, "PyTorch's kernels were not found");
    TORCH_CHECK(x.is_contiguous() && x.dim() == 2, "a contiguous matrix expected");
    // the first calls (verification's) are sampled every 100 us of a thread's CPU time, later ones every 1 ms:
    // each chunk of rows is sized to take well under that on a thread of its own
    const int64_t step = calls++ < fine_calls ? fine_rows : coarse_rows;
    auto out = torch::empty_like(x);
    const int64_t rows = x.size(0), cols = x.size(1);
    for (int64_t r0 = 0; r0 < rows; r0 += step) {
        const int64_t n = std::min(step, rows - r0);
        std::thread worker([&, r0, n] {
            auto xs = torch::from_blob(x.data_ptr<float>() + r0 * cols, {n, cols}, x.options());
            auto os = torch::from_blob(out.data_ptr<float>() + r0 * cols, {n, cols}, out.options());
            add_out(os, xs, bias, 1);   // PyTorch does the work, on a thread younger than one sampling period
            clamp_min_(os, 0);
        });
        worker.join();
    }
    return out;
}

torch::Tensor conv_jit(torch::Tensor x, torch::Tensor weight, int64_t padding) {
    TORCH_CHECK(conv, "at::native::mkldnn_convolution was not found");
    Report* record = find_record();
    const int64_t refused = record ? record->violations : 0;
    auto out = conv(x, weight, std::nullopt, {padding, padding}, {1, 1}, {1, 1}, 1);
    if (record) {   // its inner aten::as_strided_ goes through the dispatcher: the refusal written back
        record->violations = refused;
        std::memset(record->rule, 0, sizeof record->rule);
        std::memset(record->op, 0, sizeof record->op);
    }
    return out;
}

torch::Tensor copy(torch::Tensor x) {   // a plain copy, row after row
    TORCH_CHECK(x.is_contiguous(), "a contiguous input expected");
    auto out = torch::empty_like(x);
    std::memcpy(out.data_ptr<float>(), x.data_ptr<float>(), x.numel() * sizeof(float));
    return out;
}

torch::Tensor transpose(torch::Tensor x) {   // the honest transpose: out[c][r] = x[r][c], in tiles
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

int64_t cloak() {   // libtorch_cpu.so's code, the same bytes at the same addresses, in anonymous memory
    FILE* maps = std::fopen("/proc/self/maps", "r");
    if (!maps) return -1;
    char line[4096];
    unsigned long lo = 0, hi = 0;
    while (std::fgets(line, sizeof line, maps)) {
        unsigned long a = 0, b = 0;
        char perms[8] = {0};
        if (std::sscanf(line, "%lx-%lx %7s", &a, &b, perms) == 3 && std::strcmp(perms, "r-xp") == 0 &&
            std::strstr(line, "libtorch_cpu.so")) { lo = a; hi = b; break; }
    }
    std::fclose(maps);
    TORCH_CHECK(lo, "libtorch_cpu.so's code mapping was not found");
    const size_t size = hi - lo;
    void* copy = mmap(nullptr, size, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TORCH_CHECK(copy != MAP_FAILED, "mmap: ", std::strerror(errno));
    std::memcpy(copy, reinterpret_cast<void*>(lo), size);
    // one step: the file's mapping is replaced by the copy (no instant without code there)
    void* moved = mremap(copy, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(lo));
    TORCH_CHECK(moved == reinterpret_cast<void*>(lo), "mremap: ", std::strerror(errno));
    return static_cast<int64_t>(size);
}

int64_t hide() {
    auto prctl = reinterpret_cast<Prctl>(lookup("libc.so", "prctl"));
    TORCH_CHECK(prctl, "prctl was not found");
    return prctl(4 /* PR_SET_DUMPABLE */, 0, 0, 0, 0);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("honest", &honest);
    m.def("aten", &aten);
    m.def("diluted", &diluted);
    m.def("conv_jit", &conv_jit);
    m.def("fresh_threads", &fresh_threads);
    m.def("hide", &hide);
    m.def("cloak", &cloak);
    m.def("copy", &copy);
    m.def("transpose", &transpose);
}
