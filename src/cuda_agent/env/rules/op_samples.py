"""The `torch-op` verdict from outside the candidate's process: where its threads' CPU time went during
the calls, sampled by the kernel (measure/perf_sampler.py) and attributed to symbols of the libraries it
loaded (measure/symbolize.py). Nothing the candidate can reach takes part: the events, their buffers
and the harness's file descriptors are the harness's, and the symbols come from the libraries' files
and the kernel's list of the process's mappings, read again after every call.

A sample counts against the candidate when its symbol is one of ATen's operator kernels (`at::native::`
and its CPU-capability namespaces, `at::vec::`, `at::cpu::`, the composite kernels, oneDNN) or PyTorch's
tensor-expression compiler's (NNC, `torch::jit::tensorexpr::`: its interpreter runs kernels PyTorch made) and names
none of the operators the guard allows (allocation, views and metadata, fills and copies: guard.py's
ALLOWED_OPS and COPY_OPS); BLAS (MKL's and OpenBLAS's routines, `at::native::cpublas`) is allowed, as the
CPU solution may call it. A sample in code no library file holds (anonymous executable memory, a memory
file or shared memory, whatever its name, a file no longer at its path, a file that cannot be read as an ELF
file, bytes of one that none of its loadable segments holds:
code written at run time, as oneDNN's kernels are, or a library's code copied there) counts against it
too, as the harness cannot tell what computes there; so does one in a file the candidate could have
written (its box, its private /tmp: symbolize.py's `[writable]`), whatever the file says of itself, and one in
numpy's libraries (`[numpy]`: its ufuncs and BLAS compute; the solution's Python may not reach numpy, its
native code can through the builtins' `__import__`), as in any other Python package's library loaded after the
sampling began (`[package]`: Pillow's image arithmetic, say; the worker's own packages were loaded before), and in a
module of the standard library's or a library of the system's loaded then (`[loaded late]`: SQLite's, say; the C and
C++ runtimes, OpenMP and BLAS aside). The interpreter's own code (libpython, and the extension modules loaded before)
runs the harness's steps of every call too: its samples count against the candidate by their amount, the time a timed
call holds there beyond the harness's empty calls' (`interpreter_excess_s`), not by their place.

The candidate is refused (`torch-op`) once any of these holds:
- over the calls sampled so far, at least MIN_SAMPLES such samples and MIN_SHARE of its sampled CPU time
  (each sample weighs its period);
- over the calls in which they made MIN_SHARE of the call's own samples, MIN_SAMPLES of them (FEW_SAMPLES
  where they are HIGH_SHARE of those calls' time): calls without any (spinning in untimed calls, say) do
  not dilute the others;
- in the untimed calls, FEW_SAMPLES of them weighing FORWARD_SHARE of those calls' forwards, each taken to
  be as long as a timed call's less the cheapest call's (the harness's own part of a call: verification
  calls carry more of the harness's work, which would dilute a short forward's share of the call);
- in the untimed or the timed calls, UNSAMPLED_SHARE of their forwards' CPU time (and MIN_SAMPLES periods)
  ran unsampled on threads that ended within a call, beyond one period a call (a thread's last period is
  never sampled): the process's CPU clock counts them, the live threads' times do not, and a thread that
  ends within one sampling period is never sampled;
- in the timed calls, the interpreter's time up to the call's first answer, with the time of the threads that
  ended within the call unsampled (beyond a period for each a sample saw, and one: it may have been the
  interpreter's), beyond an empty call's, less INTERPRETER_EARLY_SURE standard errors after each call and
  INTERPRETER_SURE once they are all made (`timing_done`), at `interpreter_bound_s` or more (INTERPRETER_MIN_S,
  INTERPRETER_SHARE of the forward, INTERPRETER_PER_BYTE of the bytes it reads and writes, whichever is most):
  Python, the builtins' C code, a preloaded standard-library module or a `[preloaded]` library of the system's
  computing the forward (`_judge_interpreter`).

Every call is sampled; timed calls (warm-up and timed) every COARSE_NS of a thread's CPU time, as each
sample costs the sampled thread a few microseconds of CPU time, which the call's time includes; untimed
calls every FINEST_NS for their first FINEST_WINDOW_S (a call of microseconds holds a few samples), then
every FINE_NS.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from functools import lru_cache

from cuda_agent.env.measure.outside import cpu_seconds, thread_ids, threads_cpu_seconds
from cuda_agent.env.measure.perf_sampler import PerfUnavailable, Sample, Sampler
from cuda_agent.env.measure.symbolize import (ANONYMOUS, KERNEL_CODE, LATE, NO_FILE, NOT_ELF, NOT_LOADED, NUMPY,
                                             PACKAGE, PRELOADED, UNMAPPED, WRITABLE, Symbolizer)
from cuda_agent.env.rules import registry as rules
from cuda_agent.env.rules.call_verdict import Refused

MIN_SAMPLES = 10      # samples in refused kernels, over the calls sampled so far
MIN_SHARE = 0.02      # of the candidate's sampled CPU time in those calls
FEW_SAMPLES = 3       # enough in the calls where refused samples are HIGH_SHARE of the time
HIGH_SHARE = 0.2
FORWARD_SHARE = 0.03  # of the untimed calls' forwards (each the size of a timed one), with FEW_SAMPLES
UNSAMPLED_SHARE = 0.5   # of a phase's CPU time, unsampled on threads that ended within a call
INTERPRETER_SHARE = 0.2    # of a forward's CPU time, in the interpreter beyond an empty call's (its lower bound)
INTERPRETER_MIN_S = 2e-4   # seconds a timed call, likewise: a few Python lines and a binding's call take tens of us
INTERPRETER_PER_BYTE = 5e-10   # seconds per byte the forward reads and writes: the harness's steps after a forward
                               # that swept the caches run slower; Python touching every element costs 10-100x more
INTERPRETER_SURE = 2.0     # standard errors the excess is taken less by, once the timed calls are done
INTERPRETER_EARLY_SURE = 4.0   # the same after each call: looked at call after call, the test must be stricter
INTERPRETER_TIMED = 8     # timed calls before judging, and empty ones (the process's first not counted)
INTERPRETER_NULLS = 4
FINE_NS = 100_000     # between samples in untimed calls (verification, null calls)
FINEST_NS = 10_000    # in the first FINEST_WINDOW_S of each untimed call (the kernel's shortest period)
FINEST_WINDOW_S = 0.01  # wall time: at most 1000 more samples a thread and untimed call
COARSE_NS = 1_000_000  # in timed calls: each sample costs the sampled thread a few microseconds
COARSE_BUFFER = 128 << 10   # bytes: a tenth of the samples need less room
FINEST_BUFFER = 128 << 10   # FINEST_WINDOW_S of samples; beyond it (many threads on a CPU) some are lost
DRAIN_S = 0.05        # the buffers emptied this often during a call (each holds 0.13 s of a busy thread or more)
BACKENDS = ("cpu",)   # the GPU backend's host side is not judged this way yet (tests/gpu/hacks/test_gpu_op_samples.py)

_KERNEL_MARKERS = ("at::native::", "at::vec::", "at::cpu::", "at::compositeexplicitautograd",
                   "at::compositeimplicitautograd", "dnnl::", "dnnl_", "ideep::",
                   "torch::jit::tensorexpr::")   # NNC: its interpreter runs a kernel PyTorch generated
# operators the guard allows, as words of a symbol's identifiers (split at "_" and at camelCase)
_ALLOWED_WORDS = (
    ("empty",), ("resize",), ("as", "strided"), ("alias",), ("copy",), ("fill",), ("zero",), ("zeros",),
    ("ones",), ("full",), ("reshape",), ("view",), ("permute",), ("transpose",), ("expand",), ("squeeze",),
    ("unsqueeze",), ("select",), ("slice",), ("narrow",), ("detach",), ("contiguous",), ("local", "scalar"),
    ("split",), ("chunk",), ("unbind",), ("flatten",), ("unflatten",), ("scalar", "tensor"), ("lift",),
    ("record", "stream"), ("movedim",), ("set",), ("item",), ("storage",), ("cpublas",),
    ("dispatch", "stub"),   # finding a kernel, not running it (the kernel's own samples are judged)
)
_CHECKS = ("check",)   # argument checks (checkAsStridedArgs, check_dim_size), as an identifier's first word
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z0-9]+")   # words of snake_case and camelCase alike
_KERNEL_NAME = re.compile(r"\b(\w+_(?:kernel|impl)\w*)")


@lru_cache(maxsize=1 << 16)   # once per symbol: a call's samples land in a few hundred
def refused(symbol: str) -> bool:
    """Whether a (demangled) symbol is an ATen operator kernel the guard would refuse."""
    if not any(marker in symbol for marker in _KERNEL_MARKERS):
        return False
    for identifier in _IDENTIFIER.findall(symbol):
        words = [w.lower() for w in _WORD.findall(identifier)]
        if words and words[0] in _CHECKS:
            return False
        for allowed in _ALLOWED_WORDS:
            n = len(allowed)
            if any(tuple(words[i:i + n]) == allowed for i in range(len(words) - n + 1)):
                return False
    return True


def short_name(symbol: str, limit: int = 90) -> str:
    """A symbol as the agent reads it: its kernel's name where a template loop wraps it."""
    if "<" in symbol:
        kernel = _KERNEL_NAME.findall(symbol)
        if kernel:
            namespace = "at::native::" if "at::native::" in symbol else ""
            return f"{namespace}{kernel[0]} (in {_base(symbol)[:40]})"
    base = _base(symbol)
    return base if len(base) <= limit else base[:limit - 3] + "..."


def _base(symbol: str) -> str:
    """The symbol without template arguments and parameters."""
    out, depth = [], 0
    for ch in symbol:
        depth += ch == "<"
        if depth == 0:
            out.append(ch)
        depth -= ch == ">" and depth > 0
    text = "".join(out)
    text = text.split("(", 1)[0] if not text.startswith("(") else text
    return text.split(" ", 1)[-1] if text.startswith(("void ", "bool ", "int ", "long ")) else text


class _Pool:
    """Sampled seconds, and those against the candidate (seconds, samples), over some calls."""

    def __init__(self):
        self.total = self.against = 0.0
        self.samples = 0

    def add(self, total: float, against: float, samples: int) -> None:
        self.total += total
        self.against += against
        self.samples += samples

    def breached(self) -> bool:
        share = self.against / self.total if self.total else 0.0
        return share >= MIN_SHARE and (self.samples >= MIN_SAMPLES or (share >= HIGH_SHARE and self.samples >= FEW_SAMPLES))


_INTERPRETER = re.compile(r"(libpython3[\w.]*\.so[\w.]*|python3(\.\d+)?|[\w.-]+\.cpython-[\w.-]+\.so)")


@lru_cache(maxsize=1 << 12)   # once per library: every sample asks
def interpreter(library: str) -> bool:
    """Whether a sample's place is the interpreter's: libpython (or an interpreter built without it), a Python
    extension module mapped before the sampling began (the standard library's `array`, `_decimal`, ...), or a library
    of the system's mapped then that the interpreter's modules use (`[preloaded]`: hashlib's libcrypto, zlib)."""
    return library.startswith(PRELOADED) or _INTERPRETER.fullmatch(library) is not None


def unattributable(library: str) -> bool:
    """Whether a sample's place is code no library file holds, or a file the candidate could have written
    (see symbolize.py's labels): anything but a library file read at its path, or the kernel's own code; numpy's
    libraries (`[numpy]`) and those of packages loaded after the sampling began (`[package]`) count as well."""
    return (library in (ANONYMOUS, UNMAPPED) or library.startswith(("memfd:", NOT_ELF, NOT_LOADED, WRITABLE, NO_FILE))
            or (library.startswith("[") and library not in KERNEL_CODE and not library.startswith(PRELOADED)))


class OpSampling:
    """One evaluation's sampling of the candidate (`pid`): `start` before a call, `finish` after it,
    which judges everything sampled so far; `summary` says where the sampled time went."""

    drainer: threading.Thread | None = None   # set per call; a close before any call finds None
    twin_null: list[float] | None = None      # the twin's empty calls' interpreter seconds (run/twin.py), where sampled

    def __init__(self, pid: int, judge_files: bool = True):
        self.pid = pid
        self.samplers = {False: Sampler(pid, FINE_NS).attach()}   # PerfUnavailable: the caller notes it
        try:
            self.samplers[True] = Sampler(pid, COARSE_NS, COARSE_BUFFER).attach()
        except PerfUnavailable:
            self.close()
            raise
        try:   # optional: without it, untimed calls are sampled at FINE_NS from their start
            self.samplers["finest"] = Sampler(pid, FINEST_NS, FINEST_BUFFER).attach()
        except PerfUnavailable:
            pass
        self.symbolizer = Symbolizer(pid, judge_files)
        self.timed = self.null = False
        self.used: list[Sampler] = []                      # the samplers of the current call, in their order
        self.cheapest_s = float("inf")                     # the cheapest call's CPU time: the harness's part of each
        self.timed_calls: list[float] = []                 # each timed call's CPU time
        self.untimed_calls = 0
        self.untimed_against = [0.0, 0]                    # seconds, samples against the candidate in untimed calls
        self.total = 0.0                                   # sampled CPU time, seconds
        self.where: Counter[tuple[str, str]] = Counter()   # (library, symbol) -> seconds
        self.against: Counter[str] = Counter()             # refused symbol (or unattributable place) -> seconds
        self.refused_samples = 0
        self.unattributed = 0.0                            # seconds in code no library file holds
        self.bearing = _Pool()                             # the calls where samples against made MIN_SHARE
        self.phases = {False: [0.0, 0.0, 0], True: [0.0, 0.0, 0]}   # timed -> [CPU s, unsampled s on ended threads, calls]
        self.clock0 = 0.0
        self.threads0: dict[str, float] = {}
        self.lock = threading.Lock()                       # the drainer's and `answered`'s drains, one at a time
        self.answered_at: dict[int, int] | None = None     # sampler -> its samples drained when the call answered
        self.in_interpreter = 0.0                          # the current call's sampled seconds in the interpreter
        self.unseen_s = 0.0                                # ... and its ended threads' CPU seconds no sample saw
        self.interpreter = {"timed": [], "null": []}       # kind -> each call's sampled seconds in the interpreter
        self.data_bytes = 0                                # the most a timed call's forward reads and writes

    def close(self) -> None:
        if self.drainer is not None:   # a call that failed before its verdict
            self.stopped.set()
            self.drainer.join()
        for sampler in self.samplers.values():
            sampler.close()

    def start(self, timed: bool = False, null: bool = False, threads: dict[str, float] | None = None,
              data_bytes: int = 0) -> None:
        """Samples the call about to be sent; a thread of the harness's empties the buffers while it runs
        (a long call would fill them, and the kernel would drop the rest of its samples). `null`: one of the
        harness's empty calls, sampled as the timed calls are (their time is taken off the timed calls', so
        the sampling's cost must be the same in both). `threads`: every thread's CPU time now, where the
        caller has just read it (the candidate stopped). `data_bytes`: what the forward reads and writes, as the
        harness knows it (0: unknown)."""
        self.timed, self.null = timed, null
        if timed:
            self.data_bytes = max(self.data_bytes, data_bytes)
        # an untimed call starts at the finest period (a short call holds enough samples), then goes on at FINE_NS
        self.used = ([self.samplers[True]] if timed or null
                     else [self.samplers.get("finest"), self.samplers[False]])
        self.used = [sampler for sampler in self.used if sampler is not None]
        self.drained = {id(sampler): [] for sampler in self.used}
        self.clock0 = cpu_seconds(self.pid) or 0.0
        self.threads0 = threads if threads is not None else threads_cpu_seconds(self.pid, thread_ids(self.pid))
        self.in_interpreter = 0.0
        self.answered_at = None
        self.used[0].enable()
        self.stopped = threading.Event()
        self.drainer = threading.Thread(target=self._drain_while_running, name="op-samples-drain", daemon=True)
        self.drainer.start()

    def _drain_while_running(self) -> None:
        first, last = self.used[0], self.used[-1]
        if first is not last:
            if self.stopped.wait(FINEST_WINDOW_S):
                return
            with self.lock:
                first.disable()
                last.enable()
                self.drained[id(first)].extend(first.drain())
        while not self.stopped.wait(DRAIN_S):
            with self.lock:
                self.drained[id(last)].extend(last.drain())

    def answered(self) -> None:
        """The call's first answer (the candidate stopped, its output located): the samples so far are the call's
        own; those after it, of the harness's checks of the call (`finish`), are not the forward's interpreter."""
        if self.drainer is None:   # no call sampled
            return
        with self.lock:
            for sampler in self.used:
                self.drained[id(sampler)].extend(sampler.drain())
            self.answered_at = {id(sampler): len(self.drained[id(sampler)]) for sampler in self.used}

    def finish(self, judge: bool = True) -> None:
        """Stops sampling, attributes the call's samples and judges (call_verdict.Refused on a breach; `judge`
        False: the twin's calls, run/twin.py, which only measure the interpreter's time where no solution runs)."""
        self.stopped.set()
        self.drainer.join()
        self.drainer = None
        for sampler in self.used:
            sampler.disable()
        drained = [(sampler, self.drained[id(sampler)] + sampler.drain()) for sampler in self.used]
        self._unsampled(drained)
        samples = [s for _, batch in drained for s in batch]
        if samples:
            weights = [sampler.period_ns / 1e9 for sampler, batch in drained for _ in batch]
            before = [self.answered_at is None or i < self.answered_at[id(sampler)]
                      for sampler, batch in drained for i in range(len(batch))]
            self._attribute(samples, weights, before)
        if self.timed or self.null:   # time no sample saw may have been the interpreter's too
            self.interpreter["timed" if self.timed else "null"].append(self.in_interpreter + self.unseen_s)
        if judge:
            self._judge()
            self._judge_interpreter(INTERPRETER_EARLY_SURE)

    def timing_done(self) -> None:
        """The timed calls are all made: the interpreter's excess judged once more, on all of them, at
        INTERPRETER_SURE (call_verdict.Refused on a breach)."""
        self._judge_interpreter(INTERPRETER_SURE)

    def _attribute(self, samples: list[Sample], weights: list[float], before: list[bool]) -> None:
        """`before`: per sample, whether it came before the call's first answer (the forward's part)."""
        places = self.symbolizer.resolve([s.ip for s in samples])
        total = against = 0.0
        count = 0
        for place, weight, forward_part in zip(places, weights, before):
            self.where[place] += weight
            total += weight
            if forward_part and interpreter(place[0]):
                self.in_interpreter += weight
            kernel = refused(place[1])
            if kernel or unattributable(place[0]):
                self.against[place[1] if kernel else f"{place[0]} {place[1]}"] += weight
                self.unattributed += weight * (not kernel)
                against += weight
                count += 1
        self.total += total
        self.refused_samples += count
        if not (self.timed or self.null):
            self.untimed_against[0] += against
            self.untimed_against[1] += count
        if against >= MIN_SHARE * total:   # the call's own share: calls without any do not dilute it
            self.bearing.add(total, against, count)

    def _unsampled(self, drained: list[tuple[Sampler, list[Sample]]]) -> None:
        """The call's CPU time (the process's CPU clock, read from outside); the CPU time of threads that ended
        within the call, less what was sampled on them: the clock counts them, the live threads' times do not."""
        used = max(0.0, (cpu_seconds(self.pid) or 0.0) - self.clock0)
        self.cheapest_s = min(self.cheapest_s, used)
        if self.timed:
            self.timed_calls.append(used)
        elif not self.null:
            self.untimed_calls += 1
        alive = threads_cpu_seconds(self.pid, thread_ids(self.pid))
        ended = used - sum(max(0.0, t - self.threads0.get(tid, 0.0)) for tid, t in alive.items())
        on_ended = [(sampler, s) for sampler, batch in drained for s in batch if str(s.tid) not in alive]
        sampled = sum(sampler.period_ns / 1e9 for sampler, _ in on_ended)
        phase = self.phases[self.timed]
        phase[0] += used
        # one thread's last period is never sampled: a thread joined inside the call leaves up to that
        period = drained[-1][0].period_ns / 1e9
        phase[1] += max(0.0, ended - sampled - period)
        # ... and so does each ended thread a sample saw (it lived a period or more); what is left of the ended
        # threads' time ran on threads no sample saw, each shorter than a period: what ran there is unknown
        seen = {s.tid for _, s in on_ended}
        self.unseen_s = max(0.0, ended - sampled - period * (1 + len(seen)))
        phase[2] += 1

    def _judge(self) -> None:
        share = sum(self.against.values()) / self.total if self.total else 0.0
        if self.refused_samples >= MIN_SAMPLES and share >= MIN_SHARE:
            raise Refused(rules.TORCH_OP, self.message(share))
        # the harness's own work in an untimed call (verification's) dilutes a short forward's share of it: there,
        # the samples against are weighed against the forwards' size, a timed call's less the cheapest call's
        # (the harness's part; a candidate can make neither smaller)
        against, count = self.untimed_against
        forwards = self.untimed_calls * self.forward_s()
        if count >= FEW_SAMPLES and forwards > 0 and against >= FORWARD_SHARE * forwards:
            raise Refused(rules.TORCH_OP, self.message(min(1.0, against / forwards), " in its untimed forwards (each "
                                                       "the size of a timed one)"))
        if self.bearing.breached():
            raise Refused(rules.TORCH_OP, self.message(self.bearing.against / self.bearing.total,
                                                       " in the calls where they ran"))
        for timed, (used, unsampled, calls) in self.phases.items():
            period = (COARSE_NS if timed else FINE_NS) / 1e9
            own = max(used - calls * self.cheapest_s, 1e-9)   # the forwards' part
            if unsampled >= MIN_SAMPLES * period and unsampled >= UNSAMPLED_SHARE * own:
                raise Refused(rules.TORCH_OP, f"{min(1.0, unsampled / own):.0%} of the solution's CPU time in its "
                                              f"{'timed' if timed else 'untimed'} calls ran on threads that ended within "
                                              "a sampling period, where the harness's sampling from outside cannot see "
                                              "what computes; do the work on threads that outlive the call's "
                                              "sampling (the calling thread, or a pool), not on threads started for "
                                              "a few hundred microseconds")

    def interpreter_excess_s(self) -> float:
        """The interpreter's sampled seconds a timed call beyond those of a harness's empty call, up to the call's
        first answer, with the CPU time of the call's ended threads that no sample saw (which may have been the
        interpreter's: threads ended within a period hide it) (0 before any)."""
        return max(0.0, excess_and_error(self.interpreter["timed"], self.null_interpreter())[0])

    def null_interpreter(self) -> list[float]:
        """The empty calls' interpreter seconds the timed calls are judged beyond: the twin's (sampled as these
        are, in a worker that never loads the solution), or the candidate's own (not its process's first call,
        which warms it up) where their mean is lower or the twin has too few: what the solution's code does in
        its own empty calls can only lower the baseline."""
        own, twin = self.interpreter["null"][1:], self.twin_null or []
        if len(twin) < INTERPRETER_NULLS or (own and sum(own) / len(own) < sum(twin) / len(twin)):
            return own
        return twin

    def _judge_interpreter(self, sure: float) -> None:
        """Refuses a forward computed by the interpreter: the interpreter's sampled time in a timed call up to its
        first answer (its output located; the harness's checks after it are not the forward's), beyond an empty
        call's (every step of the harness's but the forward: `null_interpreter`),
        less `sure` standard errors, at `interpreter_bound_s` or more."""
        timed, null = self.interpreter["timed"], self.null_interpreter()
        enough = sum(timed) >= MIN_SAMPLES * COARSE_NS / 1e9
        if len(timed) < INTERPRETER_TIMED or len(null) < INTERPRETER_NULLS or not enough:
            return
        excess, error = excess_and_error(timed, null)
        forward = max(self.forward_s(), excess)
        if excess - sure * error >= self.interpreter_bound_s():
            raise Refused(rules.TORCH_OP, f"forward computed in the Python interpreter: a timed call spent "
                                          f"{excess * 1e3:.2f} ms ({min(1.0, excess / forward):.0%} of the forward's "
                                          "CPU time), sampled from outside its process, in the interpreter's code "
                                          "(libpython, the standard library's modules) or on threads that ended "
                                          "unsampled, beyond the harness's own steps: "
                                          "Python code, builtins or standard-library modules computed the output, "
                                          "called from forward or from the solution's native code; only the "
                                          "solution's own kernels may compute: keep forward's Python to a few calls "
                                          "into them, and run them on threads that outlive the call's sampling "
                                          "(the calling thread, or a pool), not on threads of a few hundred "
                                          "microseconds")

    def interpreter_bound_s(self) -> float:
        """The interpreter's time a timed call may hold beyond an empty call's: INTERPRETER_MIN_S, INTERPRETER_SHARE
        of the forward's CPU time, or INTERPRETER_PER_BYTE of what it reads and writes, whichever is most."""
        return max(INTERPRETER_MIN_S, INTERPRETER_SHARE * self.forward_s(), INTERPRETER_PER_BYTE * self.data_bytes)

    def forward_s(self) -> float:
        """A forward's own CPU time: the timed calls' median, less the cheapest call's (0 before any)."""
        if not self.timed_calls:
            return 0.0
        ordered = sorted(self.timed_calls)
        return max(0.0, ordered[len(ordered) // 2] - self.cheapest_s)

    def message(self, share: float, basis: str = "") -> str:
        """The verdict, naming where the samples against the candidate lay: ATen's kernels, numpy's libraries,
        another Python package's, a library of the system's loaded late, or code no library file holds."""
        top = ", ".join(f"{short_name(symbol)} {n / self.total:.0%}" for symbol, n in self.against.most_common(3))
        kinds = Counter()
        for symbol, seconds in self.against.items():
            kinds[_kind_of(symbol)] += seconds
        where = " and ".join(kind for kind, _ in kinds.most_common())
        return (f"forward computed outside the solution's own kernels: {share:.0%} of the solution's CPU time{basis}, "
                f"sampled from outside its process, went to {where} ({top}); only the solution's own kernels, in its "
                "own libraries, may compute (allocation, views, copies and BLAS are allowed)")

    def summary(self, top: int = 8) -> dict:
        """Where the sampled time went: the leading libraries and symbols, each with its share."""
        if not self.total:
            return {"seconds": 0.0}
        libraries: Counter[str] = Counter()
        for (library, _), seconds in self.where.items():
            libraries[library] += seconds

        def share(seconds: float) -> float:
            return round(seconds / self.total, 4)

        return {"seconds": round(self.total, 4), "lost": sum(s.lost for s in self.samplers.values()),
                "against_samples": self.refused_samples, "unattributed": share(self.unattributed),
                "forward_s": round(self.forward_s(), 6),
                "interpreter_excess_s": round(self.interpreter_excess_s(), 6),
                "unsampled_ended_threads": {("timed" if t else "untimed"): [round(u, 4), round(c - n * self.cheapest_s, 4)]
                                            for t, (c, u, n) in self.phases.items()},
                "libraries": [[name, share(t)] for name, t in libraries.most_common(top)],
                "symbols": [[library, short_name(symbol), share(t)]
                            for (library, symbol), t in self.where.most_common(top)],
                "aten_kernels": [[short_name(symbol), share(t)] for symbol, t in self.against.most_common(3)]}


def excess_and_error(timed: list[float], null: list[float]) -> tuple[float, float]:
    """The mean of `timed` less that of `null` (each call's sampled seconds), and its standard error. A call holds
    a sample or two at COARSE_NS, so each side's spread is taken to be at least half a period (a handful of calls
    of one sample each would otherwise show none)."""
    if not timed or not null:
        return 0.0, float("inf")
    floor = (COARSE_NS / 1e9 / 2) ** 2

    def mean_and_variance(values: list[float]) -> tuple[float, float]:
        mean = sum(values) / len(values)
        spread = sum((v - mean) ** 2 for v in values) / max(1, len(values) - 1)
        return mean, max(spread, floor) / len(values)

    (timed_mean, timed_var), (null_mean, null_var) = mean_and_variance(timed), mean_and_variance(null)
    return timed_mean - null_mean, (timed_var + null_var) ** 0.5


def _kind_of(place: str) -> str:
    """What a place against the candidate (`against`'s key: a refused symbol, or `library symbol`) is, in words."""
    if place.startswith(PACKAGE):
        return "another Python package's library, loaded by the solution ([package])"
    if place.startswith(NUMPY):
        return "numpy's libraries ([numpy])"
    if place.startswith(LATE):
        return ("a library of the system's or the standard library's, loaded by the solution ([loaded late]: "
                "only the C and C++ runtimes, OpenMP and BLAS may be)")
    if refused(place):
        return "PyTorch's operators (ATen's kernels)"
    return ("code no library file holds (anonymous executable memory, code written at run time, as oneDNN's kernels "
            "are, a memory file, or a file the solution could write)")


def start_sampling(pid: int, backend: str, judge_files: bool = True) -> tuple[OpSampling | None, str | None]:
    """The sampling of the candidate, or None and why not (the guard's record then decides alone).
    `judge_files`: whether code in files the candidate could have written counts against it (not where its
    own extension is built in its sandbox: torch's load_inline, `EvalConfig.fast_build` off)."""
    if backend not in BACKENDS:
        return None, None
    try:
        return OpSampling(pid, judge_files), None
    except PerfUnavailable as exc:
        return None, (f"the harness's own sampling of the solution's CPU time is unavailable here ({exc}); "
                      "the guard's record decides alone")
