// The hack suite's twenty-second round (cases_round22.py): interrupts charged to eager's run. The kernel here has no
// IRQ time accounting (CONFIG_IRQ_TIME_ACCOUNTING off): an interrupt's handler is charged to whatever thread it lands
// on. A stopped candidate runs nothing, but a timer armed in the kernel before the stop still fires.
// padded:       the plain loop, then a spin PADDING times the loop's own CPU time (about eager's speed).
// interrupting: padded, its output made over a buffer of its own with a deleter (torch::from_blob), run when the
//               worker lets the output go in `finish` (outside the call's clock, on the harness's thread). The deleter
//               submits `count` io_uring timeouts on each CPU (its own affinity moved from CPU to CPU), due every
//               `spacing_us` from `delay_us` on: each expiry is a timer interrupt on that CPU, a few microseconds of
//               the thread running there, eager's among them when the judge runs it next. The ring's system calls go
//               through the C library's `syscall`, found in its dynamic symbol table (the link check refuses the name;
//               the seccomp filter lets io_uring through). The ring defers its completions' work to the thread's next
//               io_uring_enter (the next deleter's), so none of it runs as the process resumes for its next call.
#include <torch/extension.h>

#include "cpu_spin.h"
#include "elf_symbol.h"
#include "honest_relu.h"

#include <dlfcn.h>
#include <elf.h>
#include <linux/io_uring.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

namespace {

constexpr double PADDING = 1.15;
// the forwards that write into a buffer of their own (no allocation, no MALLOC_PERTURB_ fill) are padded more, so that
// without their trick (the controls) they are as slow as `padded`
double own_padding = 2.0;

void set_padding(double factor) { own_padding = factor; }

torch::Tensor padded(torch::Tensor x, torch::Tensor bias) {
    const double begun = thread_cpu_s();
    auto out = honest(x, bias);
    spin(PADDING * (thread_cpu_s() - begun));
    return out;
}

// -- the C library's `syscall`, from its dynamic symbol table ---------------------------------------------------------

void* libc_symbol(const char* name) {
    return symbol_of(reinterpret_cast<void*>(&getpid), name);
}

using Syscall = long (*)(long, ...);
Syscall sys = nullptr;

// -- a ring of timeouts ---------------------------------------------------------------------------------------------

constexpr unsigned ENTRIES = 4096;
constexpr long SETUP = 425, ENTER = 426;   // io_uring_setup, io_uring_enter (x86-64)

int ring = -1;
unsigned *sq_tail, *sq_mask, *sq_array, *cq_head, *cq_tail;
io_uring_sqe* sqes = nullptr;
std::vector<__kernel_timespec> due(ENTRIES);
long delay_ns = 300000, spacing_ns = 8000;
int per_cpu = 500;
long armed = 0;

bool start_interrupts(double delay_us, double spacing_us, int64_t count) {
    delay_ns = static_cast<long>(delay_us * 1e3);
    spacing_ns = static_cast<long>(spacing_us * 1e3);
    per_cpu = static_cast<int>(count);
    if (ring >= 0) return true;
    sys = reinterpret_cast<Syscall>(libc_symbol("syscall"));
    if (!sys) return false;
    io_uring_params params;
    std::memset(&params, 0, sizeof params);
    // completions' work deferred to this thread's next io_uring_enter (the next deleter's, outside every clock), not
    // run as the process resumes (its next call)
    params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    ring = static_cast<int>(sys(SETUP, ENTRIES, &params));
    if (ring < 0) return false;
    size_t sq_size = params.sq_off.array + params.sq_entries * sizeof(unsigned);
    size_t cq_size = params.cq_off.cqes + params.cq_entries * sizeof(io_uring_cqe);
    auto* rings = static_cast<char*>(mmap(nullptr, sq_size > cq_size ? sq_size : cq_size, PROT_READ | PROT_WRITE,
                                          MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQ_RING));
    sqes = static_cast<io_uring_sqe*>(mmap(nullptr, params.sq_entries * sizeof(io_uring_sqe), PROT_READ | PROT_WRITE,
                                           MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQES));
    if (rings == MAP_FAILED || sqes == MAP_FAILED) return false;
    sq_tail = reinterpret_cast<unsigned*>(rings + params.sq_off.tail);
    sq_mask = reinterpret_cast<unsigned*>(rings + params.sq_off.ring_mask);
    sq_array = reinterpret_cast<unsigned*>(rings + params.sq_off.array);
    cq_head = reinterpret_cast<unsigned*>(rings + params.cq_off.head);
    cq_tail = reinterpret_cast<unsigned*>(rings + params.cq_off.tail);
    return true;
}

// `per_cpu` timeouts due from now + delay, every spacing, armed on the CPU this thread runs on
void arm_here(long first_ns) {
    sys(ENTER, ring, 0, 0, IORING_ENTER_GETEVENTS, nullptr, 0);   // the last call's completions, posted now
    __atomic_store_n(cq_head, __atomic_load_n(cq_tail, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);   // completions dropped
    unsigned tail = *sq_tail;
    int n = per_cpu < static_cast<int>(ENTRIES / 2) ? per_cpu : ENTRIES / 2;
    for (int i = 0; i < n; ++i) {
        unsigned at = (tail + i) & *sq_mask;
        long ns = first_ns + i * spacing_ns;
        auto& when = due[at];
        when.tv_sec = ns / 1000000000L;
        when.tv_nsec = ns % 1000000000L;
        io_uring_sqe* entry = &sqes[at];
        std::memset(entry, 0, sizeof *entry);
        entry->opcode = IORING_OP_TIMEOUT;
        entry->addr = reinterpret_cast<uint64_t>(&when);
        entry->len = 1;
        entry->timeout_flags = IORING_TIMEOUT_ABS;
        sq_array[at] = at;
    }
    __atomic_store_n(sq_tail, tail + n, __ATOMIC_RELEASE);
    sys(ENTER, ring, n, 0, 0, nullptr, 0);
    armed += n;
}

void arm_everywhere(void* data) {
    if (ring < 0) return;
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const long first = now.tv_sec * 1000000000L + now.tv_nsec + delay_ns;
    cpu_set_t mine;
    sched_getaffinity(0, sizeof mine, &mine);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    for (long cpu = 0; cpu < cpus && cpu < CPU_SETSIZE; ++cpu) {
        if (!CPU_ISSET(cpu, &mine)) continue;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        if (sched_setaffinity(0, sizeof one, &one) == 0) arm_here(first);
    }
    sched_setaffinity(0, sizeof mine, &mine);
}

float* own = nullptr;
size_t own_bytes = 0;

torch::Tensor interrupting(torch::Tensor x, torch::Tensor bias) {
    const double begun = thread_cpu_s();
    const size_t bytes = x.numel() * sizeof(float);
    if (bytes > own_bytes) {
        std::free(own);
        own = static_cast<float*>(std::malloc(bytes));
        own_bytes = bytes;
    }
    auto out = torch::from_blob(own, x.sizes(), arm_everywhere, x.options());
    const float* xs = x.data_ptr<float>();
    const float* bs = bias.data_ptr<float>();
    int64_t cols = x.size(-1), rows = x.numel() / cols;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            float v = xs[r * cols + c] + bs[c];
            own[r * cols + c] = v > 0.f ? v : 0.f;
        }
    spin(own_padding * (thread_cpu_s() - begun));
    return out;
}

int64_t armed_count() { return armed; }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("set_padding", &set_padding);
    m.def("padded", &padded);
    m.def("start_interrupts", &start_interrupts);
    m.def("interrupting", &interrupting);
    m.def("armed_count", &armed_count);
}
