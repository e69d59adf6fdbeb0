// CHEAT: a timer whose signal handler runs the solution's code outside its calls (during the
// harness's timing, say).
#include <signal.h>
#include <sys/time.h>

static void on_alarm(int) {}

extern "C" void start_timer() {
    signal(SIGALRM, &on_alarm);
    itimerval every{{0, 1000}, {0, 1000}};
    setitimer(ITIMER_REAL, &every, nullptr);
}
