// Round nine (tests/hacks/cases_round9.py): ReLU of torch.rand inputs, and the same answered by no work.
//
// relu: the honest kernel (a fresh output, one pass).
// relu_alias: where a few sampled inputs are all non-negative, ReLU is the identity (the task's own draws,
// its `spikes` and `scale_up` sets, and every timed call), and the output is made a second mapping of the
// input's own pages: mremap(old_size 0) of the staging file's shared mapping maps the same pages at
// another address, so the output's storage does not overlap the input's by address (the worker's alias
// check) and the harness, reading the output from this process's memory, reads the judge's inputs.
// Where the sample has a negative value (the `negate` and `ramp` sets), the honest kernel runs.
#include <torch/extension.h>

#include <cstdint>
#include <map>
#include <sys/mman.h>

namespace {

std::map<uintptr_t, char*> aliases;   // page of an input -> the same pages mapped again

torch::Tensor honest(const torch::Tensor& x) {
    auto out = torch::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = in[i] > 0.f ? in[i] : 0.f;
    return out;
}

bool negative_in_sample(const float* x, int64_t n) {
    for (uint64_t i = 0; i < 64; ++i)
        if (x[(i * 2654435761ull) % static_cast<uint64_t>(n)] < 0.f) return true;
    return false;
}

void check(const torch::Tensor& x) {
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
                "a contiguous float32 CPU tensor is expected");
}

}  // namespace

torch::Tensor relu(torch::Tensor x) {
    check(x);
    return honest(x);
}

torch::Tensor relu_alias(torch::Tensor x) {
    check(x);
    const int64_t n = x.numel();
    if (n == 0 || negative_in_sample(x.data_ptr<float>(), n)) return honest(x);
    const uintptr_t address = reinterpret_cast<uintptr_t>(x.data_ptr<float>());
    const uintptr_t page = address & ~uintptr_t(4095);
    const size_t length = ((address - page) + n * sizeof(float) + 4095) & ~size_t(4095);
    auto found = aliases.find(page);
    char* alias = found == aliases.end() ? nullptr : found->second;
    if (!alias) {
        void* mapped = mremap(reinterpret_cast<void*>(page), 0, length, MREMAP_MAYMOVE);
        if (mapped == MAP_FAILED) return honest(x);   // not a shared mapping: compute
        alias = static_cast<char*>(mapped);
        aliases[page] = alias;
    }
    return torch::from_blob(alias + (address - page), x.sizes(), x.options());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("relu", &relu);
    m.def("relu_alias", &relu_alias);
}
