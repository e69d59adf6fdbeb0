"""The outside sampler (measure/perf_sampler.py, measure/symbolize.py) and its verdict (rules/op_samples.py),
on child processes of the test: samples land in the symbol that spins, nothing is sampled while the
events are disabled, threads the child creates after the harness attached are sampled, and ATen's
kernels are told apart from the process's own code."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter

import pytest

from cuda_agent.env.measure import perf_sampler
from cuda_agent.env.measure.perf_sampler import PerfUnavailable, Sampler
from cuda_agent.env.measure.symbolize import Symbolizer
from cuda_agent.env.rules import op_samples
from cuda_agent.env.rules.call_verdict import Refused

SPINNER = r"""
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <string.h>
#include <time.h>

volatile unsigned long sink;

static double now(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9;
}
__attribute__((noinline)) void spin_alpha(double seconds) {
    double end = now() + seconds;
    while (now() < end) for (int i = 0; i < 10000; ++i) sink += i;
}
__attribute__((noinline)) void spin_beta(double seconds) {
    double end = now() + seconds;
    while (now() < end) for (int i = 0; i < 10000; ++i) sink ^= i;
}
static void* beta(void* arg) { spin_beta(0.4); return NULL; }
static void* brief(void* arg) { spin_beta(0.0002); return NULL; }
/* by the thread's own CPU clock: a loaded machine does not shorten it */
__attribute__((noinline)) void spin_cpu(double seconds) {
    struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    double end = t.tv_sec + t.tv_nsec * 1e-9 + seconds;
    do { for (int i = 0; i < 1000; ++i) sink += i; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); }
    while (t.tv_sec + t.tv_nsec * 1e-9 < end);
}
static void* brief_cpu(void* arg) { spin_cpu(0.0002); return NULL; }
static void* fan(void* arg) { spin_cpu(0.0015); return NULL; }

int main(void) {
    char line[64];
    setvbuf(stdout, NULL, _IONBF, 0);
    printf("ready\n");
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "alpha", 5)) spin_alpha(0.4);
        if (!strncmp(line, "long", 4)) spin_alpha(1.0);   /* more than a small buffer holds */
        if (!strncmp(line, "thread", 6)) {   /* a thread born after the harness attached, joined */
            pthread_t t; pthread_create(&t, NULL, beta, NULL); pthread_join(t, NULL);
        }
        if (!strncmp(line, "brief", 5)) {   /* 300 threads of 0.2 ms each, one after another */
            for (int i = 0; i < 300; ++i) { pthread_t t; pthread_create(&t, NULL, brief, NULL); pthread_join(t, NULL); }
        }
        if (!strncmp(line, "mixed", 5)) {   /* 4 ms of CPU time on this thread, then 15 threads of 0.2 ms */
            spin_cpu(0.004);
            for (int i = 0; i < 15; ++i) { pthread_t t; pthread_create(&t, NULL, brief_cpu, NULL); pthread_join(t, NULL); }
        }
        if (!strncmp(line, "fan", 3)) {   /* 6 threads of 1.5 ms of CPU time, one after another: each is sampled */
            for (int i = 0; i < 6; ++i) { pthread_t t; pthread_create(&t, NULL, fan, NULL); pthread_join(t, NULL); }
        }
        if (!strncmp(line, "jit", 3)) {   /* a counting loop written into anonymous executable memory (x86-64) */
            static const unsigned char code[] = {0x48, 0xB8, 0, 0, 0, 0x20, 0, 0, 0, 0,   /* mov rax, 2^29 */
                                                 0x48, 0xFF, 0xC8, 0x75, 0xFB, 0xC3};      /* dec rax; jnz; ret */
            void* at = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            memcpy(at, code, sizeof code);
            ((void (*)(void))at)();
            munmap(at, 4096);
        }
        printf("done\n");
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def spinner(tmp_path_factory):
    directory = tmp_path_factory.mktemp("spinner")
    (directory / "spinner.c").write_text(SPINNER)
    binary = directory / "spinner"
    subprocess.run(["cc", "-O1", "-pthread", "-o", str(binary), str(directory / "spinner.c")], check=True)
    return binary


class Child:
    def __init__(self, argv: list[str]):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def ask(self, command: str) -> None:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "done"

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _sampler(pid: int) -> Sampler:
    try:
        return Sampler(pid).attach()
    except PerfUnavailable as exc:   # the evaluation falls back to the guard's record alone (test below)
        pytest.skip(f"perf sampling unavailable on this machine: {exc}")


def test_samples_land_in_the_spinning_symbol_and_only_while_enabled(spinner):
    child = Child([str(spinner)])
    sampler = _sampler(child.proc.pid)
    try:
        child.ask("alpha")   # attached but disabled: nothing is written
        assert sampler.drain() == []
        sampler.enable()
        child.ask("alpha")
        sampler.disable()
        samples = sampler.drain()
        child.ask("alpha")
        assert sampler.drain() == []
        # 0.4 s at 100 us a sample: about 4000 (fewer on a loaded machine, never none)
        assert len(samples) > 200
        places = Counter(Symbolizer(child.proc.pid).resolve([s.ip for s in samples]))
        (library, symbol), count = places.most_common(1)[0]
        assert (library, symbol) == ("spinner", "spin_alpha"), places.most_common(5)
        assert count > 0.8 * len(samples)
        assert {s.tid for s in samples} == {child.proc.pid}
    finally:
        sampler.close()
        child.close()


def test_a_thread_created_after_attach_is_sampled(spinner):
    child = Child([str(spinner)])
    sampler = _sampler(child.proc.pid)
    try:
        sampler.enable()
        child.ask("thread")   # the thread is born and joined inside the "call"
        sampler.disable()
        samples = sampler.drain()
        resolved = Symbolizer(child.proc.pid).resolve([s.ip for s in samples])
        places = Counter(resolved)
        assert places[("spinner", "spin_beta")] > 0.8 * len(samples) > 100, places.most_common(5)
        threads = {s.tid for s, place in zip(samples, resolved) if place == ("spinner", "spin_beta")}
        assert len(threads) == 1 and child.proc.pid not in threads   # the new thread's, not the main thread's
    finally:
        sampler.close()
        child.close()


def _sampling_or_skip(child: "Child") -> "op_samples.OpSampling":
    """The harness's sampling of `child`, or the test skipped (closing the child) where perf events
    cannot be opened here."""
    try:
        return op_samples.OpSampling(child.proc.pid)
    except PerfUnavailable as exc:
        child.close()
        pytest.skip(f"perf sampling unavailable on this machine: {exc}")


def test_a_call_longer_than_the_buffers_hold_loses_no_sample(spinner, monkeypatch):
    from cuda_agent.env.measure.outside import process_clock

    monkeypatch.setattr(perf_sampler, "BUFFER_BUDGET", 64 << 10)   # a tenth of a second of samples a CPU
    child = Child([str(spinner)])
    sampling = _sampling_or_skip(child)
    try:
        capacity = sampling.samplers[False].pages * 4096 // 24 * op_samples.FINE_NS / 1e9   # seconds, one CPU
        clock = process_clock(child.proc.pid)
        before = time.clock_gettime(clock)
        sampling.start()
        child.ask("long")
        sampling.finish()
        used = time.clock_gettime(clock) - before
        assert used > 2 * capacity   # the call outlasts one CPU's buffer (and both if it moved between them)
        assert sampling.samplers[False].lost == 0
        assert sampling.total == pytest.approx(used, rel=0.15)   # every sample kept: the sampled time is its CPU time
        assert sampling.where[("spinner", "spin_alpha")] > 0.9 * sampling.total
    finally:
        sampling.close()
        child.close()


def test_code_outside_any_library_file_counts_against_the_candidate(spinner):
    import platform

    if platform.machine() != "x86_64":
        pytest.skip("the test writes x86-64 code")
    child = Child([str(spinner)])
    sampling = _sampling_or_skip(child)
    try:
        sampling.start()
        child.ask("alpha")   # the process's own code: nothing against it
        sampling.finish()
        assert sampling.refused_samples == 0
        sampling.start(timed=True)
        child.ask("jit")   # unmapped again before the harness reads the maps: [unmapped]
        with pytest.raises(Refused) as refused:
            sampling.finish()
        assert refused.value.rule.name == "torch-op" and "no library file holds" in str(refused.value)
        assert sampling.unattributed > 0.1 and sampling.refused_samples >= op_samples.MIN_SAMPLES
    finally:
        sampling.close()
        child.close()


def test_work_on_threads_shorter_than_a_period_is_refused(spinner):
    child = Child([str(spinner)])
    sampling = _sampling_or_skip(child)
    try:
        sampling.start()
        child.ask("noop")   # the cheapest call: the harness's own part of each (none here)
        sampling.finish()
        sampling.start()
        child.ask("thread")   # one thread of 0.4 s: sampled, all but its last period
        sampling.finish()
        # a few ms unsampled at most (a loaded machine's lost samples, clock reads); the rule refuses at half
        assert sampling.phases[False][1] < 0.05
        sampling.start(timed=True)
        child.ask("brief")   # 300 threads of 0.2 ms: none lives a timed call's period of 1 ms
        with pytest.raises(Refused) as refused:
            sampling.finish()
        assert refused.value.rule.name == "torch-op" and "threads that ended within" in str(refused.value)
        assert sampling.phases[True][1] > 0.05   # seconds unsampled on them
    finally:
        sampling.close()
        child.close()


def _empty_calls(child, sampling) -> None:
    for _ in range(op_samples.INTERPRETER_NULLS + 8):   # the harness's empty calls
        sampling.start(null=True)
        child.ask("noop")
        sampling.answered()
        sampling.finish()


def test_time_unsampled_on_ended_threads_counts_with_the_interpreters(spinner):
    """Timed calls with 3 ms on threads that each end within a period (the interpreter's work, say, which no sample
    sees there): too little a share for the unsampled rule, but beyond the interpreter's bound once counted with it.
    Threads a sample saw leave their last period unsampled, which is not counted (`fan`)."""
    child = Child([str(spinner)])
    sampling = _sampling_or_skip(child)
    try:
        _empty_calls(child, sampling)
        for _ in range(12):
            sampling.start(timed=True)
            child.ask("fan")
            sampling.answered()
            sampling.finish()
        sampling.timing_done()
        assert sampling.phases[True][1] > 0.005   # their last periods, unsampled
    finally:
        sampling.close()
        child.close()
    child = Child([str(spinner)])
    sampling = _sampling_or_skip(child)
    try:
        _empty_calls(child, sampling)
        with pytest.raises(Refused) as refused:
            for _ in range(12):
                sampling.start(timed=True)
                child.ask("mixed")
                sampling.answered()
                sampling.finish()
            sampling.timing_done()
        assert refused.value.rule.name == "torch-op" and "threads that ended unsampled" in str(refused.value)
        assert sampling.phases[True][1] < op_samples.UNSAMPLED_SHARE * sampling.phases[True][0]
    finally:
        sampling.close()
        child.close()


def test_each_calls_samples_are_its_own(spinner):
    """Calls one after another: each call's drained samples go to it alone, and `close` ends the drainer."""
    child = Child([str(spinner)])
    sampling = _sampling_or_skip(child)
    try:
        # the cheapest call is the harness's own part of each; without a call of nothing first it would be
        # alpha's 0.4 s, leave the thread's 0.4 s no own time, and its last unsampled period refuse it
        sampling.start()
        child.ask("noop")
        sampling.finish()
        totals = []
        for command in ("alpha", "thread", "alpha"):
            sampling.start()
            child.ask(command)
            sampling.finish()
            totals.append(sampling.total)
        assert sampling.where[("spinner", "spin_beta")] == pytest.approx(totals[1] - totals[0], rel=0.2)
        assert sampling.where[("spinner", "spin_alpha")] == pytest.approx(totals[0] + totals[2] - totals[1], rel=0.2)
    finally:
        sampling.close()
        child.close()
    assert sampling.drainer is None or not sampling.drainer.is_alive()


ATEN_LOOP = """
import sys, torch
torch.set_num_threads(1)
x, b = torch.randn(512, 1024), torch.randn(1024)
y = torch.empty(512, 1024)
print("ready", flush=True)
for line in sys.stdin:
    if line.startswith("aten"):
        for _ in range(200 if line.startswith("aten ") or line.strip() == "aten" else 10):
            torch.relu(x + b)
    elif line.startswith("spin"):   # the interpreter's own work, no operator
        n = 0
        for i in range(3_000_000):
            n += i
    else:   # allowed: allocation, views, fills and copies
        for _ in range(200):
            y.copy_(x.view(1024, 512).view(512, 1024)); y.fill_(0.5); torch.empty(512, 1024)
    print("done", flush=True)
"""


def test_aten_kernels_are_refused_and_allowed_operators_are_not():
    child = Child([sys.executable, "-c", ATEN_LOOP])
    sampling = _sampling_or_skip(child)
    try:
        sampling.start()
        child.ask("allowed")
        sampling.finish()   # no refusal: copies, fills, views and allocation are allowed
        assert sampling.total > 0.005   # seconds sampled: 50 samples at the 100 us of untimed calls
        assert sum(sampling.against.values()) < op_samples.MIN_SHARE * sampling.total
        sampling.start(timed=True)   # the timed calls' sparser sampling sees it too
        child.ask("aten")
        with pytest.raises(Refused) as refused:
            sampling.finish()
        assert refused.value.rule.name == "torch-op"
        assert "add_kernel" in str(refused.value) and "clamp_min" in str(refused.value)
        summary = sampling.summary()
        assert summary["seconds"] == round(sampling.total, 4)
        assert any(name == "libtorch_cpu.so" for name, _ in summary["libraries"])
    finally:
        sampling.close()
        child.close()


def test_calls_without_aten_do_not_dilute_those_with_it():
    child = Child([sys.executable, "-c", ATEN_LOOP])
    sampling = _sampling_or_skip(child)
    try:
        for _ in range(4):   # untimed calls spinning in the interpreter: a second or more of samples
            sampling.start()
            child.ask("spin")
            sampling.finish()
        with pytest.raises(Refused) as refused:
            for _ in range(10):   # then short timed calls in ATen's kernels
                sampling.start(timed=True)
                child.ask("aten-few")
                sampling.finish()
        share = sum(sampling.against.values()) / sampling.total
        assert share < op_samples.MIN_SHARE   # over all calls, diluted below the threshold
        assert refused.value.rule.name == "torch-op" and "in the calls where they ran" in str(refused.value)
    finally:
        sampling.close()
        child.close()


def test_the_interpreters_time_after_a_calls_answer_is_not_the_forwards():
    """`answered` (the call's output located) splits a call: the interpreter's samples after it, the harness's
    checks of the call, are not counted towards the forward's interpreter time (they still are sampled)."""
    child = Child([sys.executable, "-c", ATEN_LOOP])
    sampling = _sampling_or_skip(child)
    try:
        sampling.start(timed=True)
        child.ask("spin")
        sampling.answered()
        child.ask("spin")
        child.ask("spin")
        sampling.finish()
        spun = sum(seconds for (library, _), seconds in sampling.where.items() if op_samples.interpreter(library))
        forward = sampling.interpreter["timed"][-1]
        assert spun > 0.05 and 0.1 * spun < forward < 0.6 * spun   # a third of the spinning came before the answer
    finally:
        sampling.close()
        child.close()


@pytest.mark.parametrize("symbol,judged", [
    ("void c10::function_ref<void (char**, long const*, long, long)>::callback_fn<at::native::AVX2::VectorizedLoop2d"
     "<at::native::(anonymous namespace)::add_kernel(at::TensorIteratorBase&, c10::Scalar const&)::{lambda()#1}>>"
     "(long, char**, long const*, long, long)", True),
    ("at::native::structured_ufunc_add_CPU::impl(at::Tensor const&, at::Tensor const&, c10::Scalar const&, "
     "at::Tensor const&)", True),
    ("at::native::AVX512::direct_copy_kernel(at::TensorIteratorBase&)", False),
    ("at::native::(anonymous namespace)::fill_kernel(at::TensorIterator&, c10::Scalar const&)", False),
    ("at::native::empty_cpu(c10::ArrayRef<long>, std::optional<c10::ScalarType>)", False),
    ("at::native::as_strided_tensorimpl(at::Tensor const&, c10::ArrayRef<long>, c10::ArrayRef<long>)", False),
    ("mkl_blas_avx2_sgemm_kernel_0", False),
    ("at::TensorIteratorBase::serial_for_each(c10::function_ref<void (char**, long const*, long, long)>, "
     "at::Range) const", False),
    ("bias_relu_launcher", False),
    ("at::native::checkAsStridedArgs(c10::ArrayRef<long>)", False),   # an argument check, camelCase
    ("at::native::DispatchStubImpl::try_get_call_ptr(c10::DeviceType)", False),   # finding a kernel
    # PyTorch's tensor-expression compiler (NNC) running a kernel it made: no operator, no ATen kernel's name
    ("torch::jit::tensorexpr::SimpleIREvaluatorImpl::visit(std::shared_ptr<torch::jit::tensorexpr::Add> const&)",
     True),
])
def test_which_symbols_count_as_refused_operators(symbol, judged):
    assert op_samples.refused(symbol) is judged


def test_no_perf_events_leaves_the_guard_alone(monkeypatch):
    monkeypatch.setattr(perf_sampler, "_SYSCALL", {})   # as on a machine where the syscall is not reachable
    sampling, why = op_samples.start_sampling(1, "cpu")
    assert sampling is None and "guard's record decides alone" in why
    assert op_samples.start_sampling(1, "cuda") == (None, None)   # not judged this way on the GPU yet
