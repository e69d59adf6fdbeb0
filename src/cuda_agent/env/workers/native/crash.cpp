// The candidate's fatal-signal report (crash.py builds it, the candidate worker loads it before any of
// the solution's code): on SIGSEGV, SIGBUS, SIGFPE, SIGILL or SIGABRT it writes the native frames of
// the thread that faulted to stderr (the worker's log), then hands the signal to the handler that was
// there before (Python's faulthandler: the Python frames, then the default action).
#include <csignal>
#include <cstring>
#include <execinfo.h>
#include <unistd.h>

namespace {

const int FATAL[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
struct sigaction previous[sizeof(FATAL) / sizeof(FATAL[0])];

void say(const char* text) {
    ssize_t ignored = write(STDERR_FILENO, text, strlen(text));
    (void)ignored;
}

void on_fatal(int sig, siginfo_t*, void*) {
    void* frames[64];
    int count = backtrace(frames, 64);
    say("\ncuda-agent native frames (most recent call first):\n");
    backtrace_symbols_fd(frames, count, STDERR_FILENO);
    say("cuda-agent end of native frames\n");
    for (unsigned i = 0; i < sizeof(FATAL) / sizeof(FATAL[0]); ++i) {
        if (FATAL[i] == sig) {
            sigaction(sig, &previous[i], nullptr);   // the earlier handler takes the signal raised again
        }
    }
    raise(sig);
}

}  // namespace

extern "C" int cac_install() {
    void* warm[2];
    backtrace(warm, 2);   // loads the unwinder now: its first use allocates, which a signal handler must not
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_fatal;
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    int failed = 0;
    for (unsigned i = 0; i < sizeof(FATAL) / sizeof(FATAL[0]); ++i) {
        failed |= sigaction(FATAL[i], &action, &previous[i]);
    }
    return failed;
}
