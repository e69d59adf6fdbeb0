// The hack rounds' padding: a spin of a given CPU time on the calling thread (its own clock), so a forward can be
// made as slow as eager's whatever the machine's load.
#pragma once
#include <cstdint>
#include <ctime>

inline double thread_cpu_s() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

inline void spin(double seconds) {
    const double until = thread_cpu_s() + seconds;
    volatile uint64_t sink = 0;
    while (thread_cpu_s() < until)
        for (int i = 0; i < 64; ++i) sink = sink + i;
}
