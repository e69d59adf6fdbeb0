// CHEAT: a static constructor forks (through a function pointer) a session leader that leaves the
// worker's process group, survives the worker and keeps the machine busy while baselines are timed.
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>

namespace {
struct Escape {
    Escape() {
        pid_t (*volatile spawn)() = &fork;
        if (spawn() == 0) {
            setsid();
            if (spawn() == 0) {
                prctl(PR_SET_NAME, "cag_escapee", 0, 0, 0);
                auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
                volatile double sink = 0.0;
                while (std::chrono::steady_clock::now() < end) sink = sink + 1.0;
            }
            _exit(0);
        }
    }
} escape;
}  // namespace
