// Round nine (tests/hacks/cases_round9.py): the harness's empty calls made slow, natively.
//
// On the CPU backend the harness takes the median empty call's CPU time off every timed call (the
// harness's own steps in the candidate's process). This file makes every empty call cost BURN_MS more:
// a thread started at load takes the GIL while the worker's main thread waits for its next command (it
// released the GIL in read()), reads that command from the main thread's read buffer once it arrived
// (/proc/self/task/<main>/syscall gives the buffer while the thread is blocked in read), and when it is
// an empty call ("null": true) it works BURN_MS holding the GIL, so that the main thread starts the
// empty call only then. Real calls are let through at once. No Python is run, nothing of the harness is
// written; the guard's record is only read (its count of ended calls says when a call is over).
#include <Python.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <sched.h>
#include <fcntl.h>
#include <thread>
#include <unistd.h>

namespace {

struct Report { char magic[8]; int64_t begins, ends, violations, custom, extension, checked, foreign, ops;
                char rule[32]; char op[152]; };

Report* find_record() {
    const char magic[8] = {'C', 'A', 'G', 'R', 'E', 'C', '1', 0};
    FILE* maps = std::fopen("/proc/self/maps", "r");
    if (!maps) return nullptr;
    char line[4096];
    Report* found = nullptr;
    while (!found && std::fgets(line, sizeof line, maps)) {
        unsigned long lo = 0, hi = 0;
        char perms[8] = {0};
        if (std::sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || perms[0] != 'r' || perms[1] != 'w') continue;
        if (!std::strstr(line, ".so")) continue;
        for (unsigned long at = lo; at + sizeof(Report) <= hi; at += 8) {
            Report* r = reinterpret_cast<Report*>(at);
            if (std::memcmp(r->magic, magic, 8) == 0) { found = r; break; }
        }
    }
    std::fclose(maps);
    return found;
}

double thread_seconds() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void burn(double seconds) {
    volatile double sink = 0;
    const double start = thread_seconds();
    while (thread_seconds() - start < seconds)
        for (int i = 0; i < 1000; ++i) sink = sink + i;
}

void nap(long us) {
    timespec ts{0, us * 1000};
    nanosleep(&ts, nullptr);
}

int main_syscall_fd = -1;

// Whether the main thread is blocked in read(); its buffer and size when it is.
bool main_in_read(unsigned long* buf, unsigned long* size) {
    char text[256] = {0};
    ssize_t got = pread(main_syscall_fd, text, sizeof text - 1, 0);
    if (got <= 0) return false;
    unsigned long nr = 0, fd = 0, b = 0, n = 0;
    if (std::sscanf(text, "%lu 0x%lx 0x%lx 0x%lx", &nr, &fd, &b, &n) != 4 || nr != 0) return false;
    if (buf) *buf = b;
    if (size) *size = n;
    return true;
}

// What the command the main thread read is: 1 an empty call, 0 a real call, -1 anything else.
int command_kind(unsigned long buf, unsigned long size) {
    const char* text = reinterpret_cast<const char*>(buf);
    const char* end = static_cast<const char*>(std::memchr(text, '\n', size));
    std::size_t length = end ? static_cast<std::size_t>(end - text) : 0;
    auto has = [&](const char* what) {
        std::size_t k = std::strlen(what);
        for (std::size_t i = 0; i + k <= length; ++i)
            if (std::memcmp(text + i, what, k) == 0) return true;
        return false;
    };
    if (has("\"null\": true")) return 1;
    if (has("\"null\": false")) return 0;
    return -1;
}

void watch() {
    Report* record = find_record();
    if (!record) return;
    volatile int64_t* ends = &record->ends;
    int64_t seen = *ends;
    bool tight = false;   // after a call ended: the main thread's next read is near
    double since = 0;
    for (;;) {
        if (!tight) {   // a call runs: the cheap check, a load from memory
            nap(50);
            if (*ends != seen) { seen = *ends; tight = true; since = thread_seconds(); }
            continue;
        }
        unsigned long buf = 0, size = 0;
        if (!main_in_read(&buf, &size)) {   // watched closely (the read lasts until the harness stops us)
            if (thread_seconds() - since > 0.005) tight = false;   // no read came: lazy again
            sched_yield();
            continue;
        }
        PyGILState_STATE state = PyGILState_Ensure();   // free: the main thread released it in read()
        while (main_in_read(nullptr, nullptr)) nap(5);   // until the command arrives (across a stop, too)
        int kind = command_kind(buf, size);
        if (kind == 1) burn(BURN_MS / 1e3);   // an empty call: it starts only after this
        PyGILState_Release(state);
        tight = kind != 0;   // after a real call's command, lazy again until it ends
        since = thread_seconds();
        if (kind == 0) seen = *ends;
    }
}

int start() {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/self/task/%d/syscall", static_cast<int>(getpid()));
    main_syscall_fd = open(path, O_RDONLY);
    if (main_syscall_fd >= 0) std::thread(watch).detach();
    return 0;
}

const int started = start();

}  // namespace
