"""Evaluation settings, with the published defaults."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path



def default_cache_dir() -> Path:
    """Where builds and baseline timings are cached (`CUDA_AGENT_CACHE` overrides)."""
    env = os.environ.get("CUDA_AGENT_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cuda-agent"


def detect_backend() -> str:
    """`cuda` when a GPU is usable, else `cpu`."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass
class EvalConfig:
    backend: str | None = None          # "cuda" | "cpu"; None: detect
    device_index: int = 0               # which GPU (the pool sets this per job)
    num_correct_trials: int = 5         # fresh random input sets for verification
    seed: int | None = None             # input set i is drawn under seed + i; None: a secret seed
                                        # per evaluation (recorded in the result), so answers
                                        # cannot be prepared for known inputs
    atol: float = 1e-2
    rtol: float = 1e-2
    # "strict" (rewards, RL, solve): the task's draws plus structured input sets, a tolerance relative
    # to each output's scale, outputs that must follow their inputs. "published": the task's own
    # draws at atol/rtol, the paper's and KernelBench's protocol (docs/verification.md).
    protocol: str = "strict"
    # Timing: warm-up calls, then timed calls (each on freshly drawn inputs); a few more of each at
    # random, so the schedule cannot be counted on.
    warmup: int = 10
    iters: int | None = None            # the most timed calls; None: 100 on CUDA, 20 on CPU
    # Timing stops early, after at least `min_iters` timed calls, once the medians it reports (the
    # kernel's time and the paired speedups) are known to within `precision` of their value (half the
    # width of a 95 % confidence interval); None times every call. 0.75 % is a standard error of
    # 0.38 %: ten evaluations' medians then lie within 2 % of each other (their range is about 3 standard
    # errors; over 5 happens less than once in a hundred), measured in docs/benchmarks.md.
    precision: float | None = 0.0075
    min_iters: int = 30
    profile_budget_s: float = 20.0      # fewer iterations (at least 5) when one call is slow
    flush_l2: bool = True
    settle_ms: float = 0.0              # GPU idle before every timed call, candidate's and baselines' alike
    hold: bool = True                   # CUDA: queue each timed call behind a device hold, so the events
                                        # measure the device's work, not the host's path to it (hold.py)
    baselines: bool = True              # time eager (always paired with the candidate) and torch.compile
    compile_baseline: bool = True       # include torch.compile (the slowest part on a cold cache)
    compile_timing: str = "stored"      # "stored": reuse the store's compile time while eager agrees with
                                        # it; "paired": compile and time it in this evaluation too
    # Feedback after timing, never part of it (env/run/feedback.py): torch.profiler's tables of the
    # reference's operators and the candidate's kernels (None: on for a workspace's `profile`, off for
    # a plain evaluation, as in bench and RL scoring: it costs a second or two), and, on a GPU, the
    # reference captured in a CUDA graph and timed (kept in the baseline store like torch.compile's).
    profile_ops: bool | None = None
    graph_baseline: bool = True
    clock_check: bool = True            # cross-check the candidate's clock with the harness's wall clock
    # Per-phase wall-clock limits (seconds).
    timeout_compile: float = 600.0
    timeout_reference: float = 600.0
    timeout_verify: float = 120.0
    timeout_profile: float = 300.0
    # Anti-cheating (see docs/verification.md).
    guard: bool = True
    sandbox: str = "auto"               # "auto" | "bwrap" | "none"
    cache_dir: Path = field(default_factory=default_cache_dir)
    max_jobs: int | None = None         # parallel compiler processes
    build_memory_gb: float | None = None   # the memory of each step of a solution's build (builds/step.py);
                                           # None: a quarter of the machine's, at least 4 GiB
    fast_build: bool = True             # our cached builder; False: torch's own load_inline, fresh build dir
    prewarm: int = 0                    # worker pairs kept started for the next evaluations (True = 1; spares.py)
    # Feedback: `unscored` times a candidate whose outputs are wrong anyway (EvalResult.unscored, never a
    # reward: run/unscored.py); `other_scale` verifies it at a second size of the task too, where the
    # task can be rescaled (strict protocol only: run/other_scale.py). None: on for a workspace's verify
    # and profile, off for a plain evaluation (bench, RL scoring, pools): the second size takes a worker
    # pair of its own, which would halve a pool's evaluations per second.
    unscored: bool = False
    other_scale: bool | None = None

    def __post_init__(self) -> None:
        """Refuse settings that could only fail later, where they would be blamed on the solution."""
        def need(name: str, ok: bool, rule: str) -> None:
            if not ok:
                raise ValueError(f"EvalConfig.{name} {rule}, not {getattr(self, name)!r}")

        def whole(value, least: int) -> bool:
            return isinstance(value, int) and value >= least

        def number(value, above: float, strict: bool) -> bool:
            return isinstance(value, (int, float)) and (value > above if strict else value >= above)

        need("backend", self.backend in (None, "cuda", "cpu"), "must be 'cuda', 'cpu' or None (detect)")
        need("sandbox", self.sandbox in ("auto", "bwrap", "none"), "must be 'auto', 'bwrap' or 'none'")
        need("protocol", self.protocol in ("strict", "published"), "must be 'strict' or 'published'")
        need("profile_ops", self.profile_ops in (None, True, False), "must be None, True or False")
        need("other_scale", self.other_scale in (None, True, False), "must be None, True or False")
        need("compile_timing", self.compile_timing in ("stored", "paired"), "must be 'stored' or 'paired'")
        need("num_correct_trials", whole(self.num_correct_trials, 1), "must be a whole number of at least 1")
        for name in ("iters", "max_jobs"):
            need(name, getattr(self, name) is None or whole(getattr(self, name), 1),
                 "must be None or a whole number of at least 1")
        need("precision", self.precision is None or number(self.precision, 0, strict=True),
             "must be None (time every call) or a fraction above 0")
        need("min_iters", whole(self.min_iters, 1), "must be a whole number of at least 1")
        for name in ("warmup", "prewarm", "device_index"):
            need(name, whole(getattr(self, name), 0), "must be a whole number of at least 0")
        need("build_memory_gb", self.build_memory_gb is None or number(self.build_memory_gb, 0, strict=True),
             "must be None (a quarter of the machine's memory) or a number of GiB above 0")
        for name in ("atol", "rtol", "settle_ms"):
            need(name, number(getattr(self, name), 0, strict=False), "must be a number of at least 0")
        for name in ("profile_budget_s", "timeout_compile", "timeout_reference", "timeout_verify", "timeout_profile"):
            need(name, number(getattr(self, name), 0, strict=True), "must be a number of seconds above 0")
        # absolute: compilers run in the build's own folder, where a relative cache path names nothing
        self.cache_dir = Path(self.cache_dir).expanduser().absolute()

    def resolved_backend(self) -> str:
        return self.backend or detect_backend()

    def timed_iters(self, backend: str) -> int:
        return self.iters if self.iters is not None else (100 if backend == "cuda" else 20)

    def to_dict(self) -> dict:
        return _adapter().dump_python(self, mode="json")   # JSON values (the cache folder as text)

    @classmethod
    def from_dict(cls, d: dict) -> "EvalConfig":
        """Validated by pydantic, then by `__post_init__`'s checks."""
        return _adapter().validate_python(d)


@cache
def _adapter():
    from pydantic import TypeAdapter   # on first use: commands that never serialise do not pay its import

    return TypeAdapter(EvalConfig)
