// The hack suite's twentieth round (cases_round20.py): a forward no faster than eager (relu(x + bias), then a spin
// PADDING times the loop's own CPU time) made to look faster, by the harness's overhead or by eager's time.
// honest:       the plain loop (honest_relu.h).
// padded:       the loop, then the spin: the forward about as slow as eager's (the cheats' own forward).
// watch_gil:    padded; a thread of its own, started in __init__, wakes as the harness resumes the process for a
//               command (its sleep ran out while the process was stopped) and knows an empty call by its inputs (drawn from one seed each time: the same bytes in the staging
//               slot); there it holds the GIL and spins, so the harness's steps wait inside the empty call's clock.
// watch_faults: padded; the same thread unmaps the pages of every library's code (madvise MADV_DONTNEED, file
//               pages come back on a minor fault) in an empty call: the harness's own thread faults them back in,
//               in the kernel, on its own CPU time.
// flush_code:   padded; its output made over memory of its own with a deleter (torch::from_blob), which runs
//               when the harness lets the output go after reading it (outside the call's clock, on the harness's
//               thread): it flushes every library's code from the caches (clflush), so that the judge's eager
//               run, next on the same draw, runs from cold code (the libraries' pages are shared).
#include <torch/extension.h>

#include "cpu_spin.h"
#include "honest_relu.h"

#include <immintrin.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

constexpr double PADDING = 1.3;            // the spin, in times the loop's CPU time: the forward about eager's
constexpr double GIL_SPIN_S = 0.0003;      // in an empty call: under the harness's 0.5 ms for a thread of ours
constexpr double SHORT_THREAD_SPIN_S = 0.0005;   // on a thread ended within an empty call: under a sampling period

torch::Tensor padded(torch::Tensor x, torch::Tensor bias) {
    const double begun = thread_cpu_s();
    auto out = honest(x, bias);
    spin(PADDING * (thread_cpu_s() - begun));
    return out;
}

// -- the code pages of the libraries mapped in this process ----------------------------------------------------

std::vector<std::pair<uintptr_t, uintptr_t>> code_ranges(const char* only = nullptr) {
    std::vector<std::pair<uintptr_t, uintptr_t>> out;
    FILE* maps = std::fopen("/proc/self/maps", "r");
    if (!maps) return out;
    char line[4096];
    while (std::fgets(line, sizeof line, maps)) {
        unsigned long start, end;
        char perms[8] = {0};
        char path[4096] = {0};
        if (std::sscanf(line, "%lx-%lx %7s %*s %*s %*s %4095s", &start, &end, perms, path) < 3) continue;
        if (std::strcmp(perms, "r-xp") != 0 || path[0] != '/') continue;
        if (std::strstr(path, "cuda_extension")) continue;   // our own code
        if (only && !std::strstr(path, only)) continue;
        out.emplace_back(start, end);
    }
    std::fclose(maps);
    return out;
}

// -- the watcher: a thread that tells the harness's empty calls by their inputs --------------------------------

struct Watcher {
    std::atomic<uintptr_t> slots[2] = {0, 0};   // the two staging slots' addresses, learned from forward's inputs
    int mode = 0;                                // 1: hold the GIL and spin; 2: unmap the libraries' code pages
    std::atomic<long> acted{0};
    std::atomic<bool> forward_ran{false};
    std::vector<std::pair<uintptr_t, uintptr_t>> code;   // the libraries' code, read once
    std::thread thread;
};

Watcher watcher;

uint64_t signature(uintptr_t at) {
    uint64_t words[4];
    std::memcpy(words, reinterpret_cast<const void*>(at), sizeof words);
    return words[0] ^ (words[1] * 31) ^ (words[2] * 131) ^ (words[3] * 1031);
}

void act_in_empty_call() {
    watcher.acted++;
    if (watcher.mode == 1) {
        PyGILState_STATE state = PyGILState_Ensure();   // the harness's Python waits for it
        spin(GIL_SPIN_S);
        PyGILState_Release(state);
    } else if (watcher.mode == 3) {   // on a thread that ends within the call (its time no live thread's)
        PyGILState_STATE state = PyGILState_Ensure();
        std::thread([] { spin(SHORT_THREAD_SPIN_S); }).join();
        PyGILState_Release(state);
    } else {   // the interpreter's (quick to unmap: the thread's own time in an empty call is held to 0.5 ms)
        for (auto [start, end] : watcher.code)
            madvise(reinterpret_cast<void*>(start), end - start, MADV_DONTNEED);
    }
}

double monotonic_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Episodes: the stretches the harness lets the process run (a command each: a call, then its `finish`), told
// apart by the gaps in which it was held stopped. An empty call is an episode whose slot holds the empty calls'
// draw (seen before: one seed every time), which is neither one in which forward ran nor the one after it (its
// `finish`), nor the `finish` of an empty call.
void watch() {
    std::set<uint64_t> seen;
    uint64_t last[2] = {0, 0}, empty = 0;
    long episode = 0, forward_episode = -10, acted_episode = -10;
    double previous = monotonic_s();
    while (true) {
        // the timer runs out while the harness holds the process stopped: the thread wakes as it is resumed
        timespec nap{0, 150000};
        nanosleep(&nap, nullptr);
        const double now = monotonic_s();
        if (now - previous > 0.0006) episode++;
        previous = now;
        if (watcher.forward_ran.exchange(false)) forward_episode = episode;
        uint64_t held[2] = {0, 0};
        for (int s = 0; s < 2; ++s) {
            uintptr_t at = watcher.slots[s].load();
            if (!at) continue;
            held[s] = signature(at);
            if (held[s] == last[s]) continue;
            last[s] = held[s];
            if (!seen.insert(held[s]).second && !empty) empty = held[s];   // a draw seen twice: the empty calls'
        }
        for (int s = 0; s < 2; ++s)
            if (empty && held[s] == empty && episode > forward_episode + 1 && episode > acted_episode + 1) {
                acted_episode = episode;
                act_in_empty_call();
            }
    }
}

void start_watch(int64_t mode) {
    watcher.mode = static_cast<int>(mode);
    watcher.code = code_ranges("/bin/python");   // the interpreter's own
    watcher.thread = std::thread(watch);
    watcher.thread.detach();
}

void note_slot(const torch::Tensor& x) {
    uintptr_t at = reinterpret_cast<uintptr_t>(x.data_ptr());
    if (watcher.slots[0].load() == at || watcher.slots[1].load() == at) return;
    if (!watcher.slots[0].load()) watcher.slots[0] = at;
    else if (!watcher.slots[1].load()) watcher.slots[1] = at;
}

torch::Tensor watched(torch::Tensor x, torch::Tensor bias) {
    note_slot(x);
    watcher.forward_ran = true;
    return padded(x, bias);
}

int64_t acted() { return watcher.acted.load(); }

// -- flush_code: the output's deleter flushes the libraries' code from every cache ------------------------------

std::vector<std::pair<uintptr_t, uintptr_t>> flushed;

void flush_and_free(void* data) {
    std::vector<unsigned char> resident;
    for (auto [start, end] : flushed) {   // the pages in memory (a page not yet mapped would be faulted in)
        resident.assign((end - start) / 4096, 0);
        if (mincore(reinterpret_cast<void*>(start), end - start, resident.data()) != 0) continue;
        for (size_t page = 0; page < resident.size(); ++page)
            if (resident[page] & 1)
                for (uintptr_t line = start + page * 4096; line < start + (page + 1) * 4096; line += 64)
                    _mm_clflush(reinterpret_cast<void*>(line));
    }
    _mm_mfence();
    std::free(data);
}

torch::Tensor flush_code(torch::Tensor x, torch::Tensor bias) {
    if (flushed.empty())   // all but libtorch_cpu's (hundreds of MB): the interpreter's, the dispatcher's, the C library's
        for (auto range : code_ranges())
            if (range.second - range.first <= (64u << 20)) flushed.push_back(range);
    const double begun = thread_cpu_s();
    float* data = static_cast<float*>(std::malloc(x.numel() * sizeof(float)));
    auto out = torch::from_blob(data, x.sizes(), flush_and_free, x.options());
    const float* xs = x.data_ptr<float>();
    const float* bs = bias.data_ptr<float>();
    int64_t cols = x.size(-1), rows = x.numel() / cols;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            float v = xs[r * cols + c] + bs[c];
            data[r * cols + c] = v > 0.f ? v : 0.f;
        }
    spin(PADDING * (thread_cpu_s() - begun));
    return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("honest", &honest);
    m.def("padded", &padded);
    m.def("start_watch", &start_watch);
    m.def("watched", &watched);
    m.def("acted", &acted);
    m.def("flush_code", &flush_code);
}
