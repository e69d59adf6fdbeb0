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
#include <torch/extension.h>

#include <malloc.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace {

double loop_padding = 0.7;
int64_t skip = 0;
int64_t fills_seen = 0, calls = 0;

double thread_cpu_s() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void spin(double seconds) {
    const double until = thread_cpu_s() + seconds;
    volatile uint64_t sink = 0;
    while (thread_cpu_s() < until)
        for (int i = 0; i < 64; ++i) sink = sink + i;
}

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

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("loop_padded", &loop_padded);
    m.def("stale_rows", &stale_rows);
    m.def("set_loop_padding", &set_loop_padding);
    m.def("set_skip", &set_skip);
    m.def("filled_calls", &filled_calls);
    m.def("start_heap_tuned", &start_heap_tuned);
}
