"""The `torch-op` verdict from outside the candidate's process: where its threads' CPU time went during
the calls, sampled by the kernel (measure/perf_sampler.py) and attributed to symbols of the libraries it
loaded (measure/symbolize.py). Nothing the candidate can reach takes part: the events, their buffers
and the harness's file descriptors are the harness's, and the symbols come from the libraries' files
and the kernel's list of the process's mappings.

A sample counts against the candidate when its symbol is one of ATen's operator kernels (`at::native::`
and its CPU-capability namespaces, `at::vec::`, `at::cpu::`, the composite kernels, oneDNN) and names
none of the operators the guard allows (allocation, views and metadata, fills and copies: guard.py's
ALLOWED_OPS and COPY_OPS); BLAS (MKL's and OpenBLAS's routines, `at::native::cpublas`) is allowed, as the
CPU solution may call it. The candidate is refused once, over the calls sampled so far, at least
MIN_SAMPLES samples and MIN_SHARE of its sampled CPU time (each sample weighs its period) fell there.

Every call is sampled; timed calls (warm-up and timed) at a coarser period than the untimed ones, as
each sample costs the sampled thread a few microseconds of CPU time, which the call's time includes.
"""

from __future__ import annotations

import functools
import re
import threading
from collections import Counter

from cuda_agent.env.measure.perf_sampler import PerfUnavailable, Sampler
from cuda_agent.env.measure.symbolize import Symbolizer
from cuda_agent.env.rules import registry as rules
from cuda_agent.env.rules.call_verdict import Refused

MIN_SAMPLES = 10      # samples in refused kernels, over the calls sampled so far
MIN_SHARE = 0.02      # of the candidate's sampled CPU time in those calls
FINE_NS = 100_000     # between samples in untimed calls (verification, null calls)
COARSE_NS = 1_000_000  # in timed calls: each sample costs the sampled thread a few microseconds
COARSE_BUFFER = 128 << 10   # bytes: a tenth of the samples need less room
DRAIN_S = 0.05        # the buffers emptied this often during a call (each holds 0.13 s of a busy thread or more)
BACKENDS = ("cpu",)   # the GPU backend's host side is not judged this way yet (tests/gpu/hacks/test_gpu_op_samples.py)

_KERNEL_MARKERS = ("at::native::", "at::vec::", "at::cpu::", "at::compositeexplicitautograd",
                   "at::compositeimplicitautograd", "dnnl::", "dnnl_", "ideep::")
# operators the guard allows, as words of a symbol's identifiers (split at "_")
_ALLOWED_WORDS = (
    ("empty",), ("resize",), ("as", "strided"), ("alias",), ("copy",), ("fill",), ("zero",), ("zeros",),
    ("ones",), ("full",), ("reshape",), ("view",), ("permute",), ("transpose",), ("expand",), ("squeeze",),
    ("unsqueeze",), ("select",), ("slice",), ("narrow",), ("detach",), ("contiguous",), ("local", "scalar"),
    ("split",), ("chunk",), ("unbind",), ("flatten",), ("unflatten",), ("scalar", "tensor"), ("lift",),
    ("record", "stream"), ("movedim",), ("set",), ("item",), ("storage",), ("cpublas",),
)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KERNEL_NAME = re.compile(r"\b(\w+_(?:kernel|impl)\w*)")


@functools.lru_cache(maxsize=1 << 14)   # asked once per sample; the same symbols come back call after call
def refused(symbol: str) -> bool:
    """Whether a (demangled) symbol is an ATen operator kernel the guard would refuse."""
    if not any(marker in symbol for marker in _KERNEL_MARKERS):
        return False
    for identifier in _IDENTIFIER.findall(symbol):
        words = identifier.lower().strip("_").split("_")
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


class OpSampling:
    """One evaluation's sampling of the candidate (`pid`): `start` before a call, `finish` after it,
    which judges everything sampled so far; `summary` says where the sampled time went."""

    drainer: threading.Thread | None = None

    def __init__(self, pid: int):
        self.samplers = {False: Sampler(pid, FINE_NS).attach()}   # PerfUnavailable: the caller notes it
        try:
            self.samplers[True] = Sampler(pid, COARSE_NS, COARSE_BUFFER).attach()
        except PerfUnavailable:
            self.close()
            raise
        self.symbolizer = Symbolizer(pid)
        self.timed = False
        self.total = 0.0                                   # sampled CPU time, seconds
        self.where: Counter[tuple[str, str]] = Counter()   # (library, symbol) -> seconds
        self.against: Counter[str] = Counter()             # refused symbol -> seconds
        self.refused_samples = 0
        # one thread of the harness's, for the evaluation, empties the buffers while a call runs (a long
        # call would fill them, and the kernel would drop the rest of its samples); a call starts and
        # ends it with events and a lock, no thread started or joined on the call's path
        self.drained: list = []
        self.lock = threading.Lock()
        self.running = threading.Event()    # a call is sampled
        self.tick = threading.Event()       # set: wake the drainer now (closing)
        self.closed = False
        self.drainer = threading.Thread(target=self._drain_while_running, name="op-samples-drain", daemon=True)
        self.drainer.start()

    def close(self) -> None:
        if self.drainer is not None:
            self.closed = True
            self.running.set()
            self.tick.set()
            self.drainer.join()
            self.drainer = None
        for sampler in self.samplers.values():
            sampler.close()

    def start(self, timed: bool = False) -> None:
        """Samples the call about to be sent."""
        with self.lock:
            self.timed = timed
            self.drained = []
            self.samplers[timed].enable()
            self.running.set()

    def _drain_while_running(self) -> None:
        while self.running.wait() and not self.closed:
            with self.lock:
                if self.running.is_set() and not self.closed:
                    self.drained.extend(self.samplers[self.timed].drain())
            self.tick.wait(DRAIN_S)

    def finish(self) -> None:
        """Stops sampling, attributes the call's samples and judges (call_verdict.Refused on a breach)."""
        sampler = self.samplers[self.timed]
        sampler.disable()
        self.running.clear()
        with self.lock:   # a drain under way ends first
            samples = self.drained + sampler.drain()
            self.drained = []
        if not samples:
            return
        weight = sampler.period_ns / 1e9
        places = self.symbolizer.resolve([s.ip for s in samples])
        self.total += weight * len(places)
        for place in places:
            self.where[place] += weight
            if refused(place[1]):
                self.against[place[1]] += weight
                self.refused_samples += 1
        share = sum(self.against.values()) / self.total
        if self.refused_samples >= MIN_SAMPLES and share >= MIN_SHARE:
            raise Refused(rules.TORCH_OP, self.message(share))

    def message(self, share: float) -> str:
        top = ", ".join(f"{short_name(symbol)} {n / self.total:.0%}" for symbol, n in self.against.most_common(3))
        return (f"forward computed with PyTorch's operators: {share:.0%} of the solution's CPU time, "
                f"sampled from outside its process, went to ATen's kernels ({top}); only the solution's own kernels "
                "may compute (allocation, views, copies and BLAS are allowed)")

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
                "libraries": [[name, share(t)] for name, t in libraries.most_common(top)],
                "symbols": [[library, short_name(symbol), share(t)]
                            for (library, symbol), t in self.where.most_common(top)],
                "aten_kernels": [[short_name(symbol), share(t)] for symbol, t in self.against.most_common(3)]}


def start_sampling(pid: int, backend: str) -> tuple[OpSampling | None, str | None]:
    """The sampling of the candidate, or None and why not (the guard's record then decides alone)."""
    if backend not in BACKENDS:
        return None, None
    try:
        return OpSampling(pid), None
    except PerfUnavailable as exc:
        return None, (f"the harness's own sampling of the solution's CPU time is unavailable here ({exc}); "
                      "the guard's record decides alone")
