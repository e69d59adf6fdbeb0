"""Evaluation results: plain data, JSON-ready, identical whichever process produced them.

Serialised and validated by pydantic (`to_dict` / `from_dict`), never field by field by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache


# Phases, in order. "task" means the task itself is broken (not the candidate's fault).
PHASES = ("task", "compile", "verify", "profile", "internal")


@dataclass
class EvalError:
    phase: str
    message: str
    rule: str | None = None   # the anti-cheating rule that rejected the candidate, if any


@dataclass
class Timing:
    median_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    iters: int

    @classmethod
    def from_samples(cls, samples_ms: list[float]) -> "Timing":
        import statistics

        return cls(
            median_ms=statistics.median(samples_ms),
            mean_ms=statistics.fmean(samples_ms),
            std_ms=statistics.pstdev(samples_ms),
            min_ms=min(samples_ms),
            max_ms=max(samples_ms),
            iters=len(samples_ms),
        )


@dataclass
class SpeedOfLight:
    """The task's work and the candidate's speed against the device's peak (env/measure/speed_of_light.py).
    Feedback only: the reward never reads it."""
    flops: int | None              # the reference forward's FLOPs (FlopCounterMode); None: it counted none
    bytes: int                     # fewest bytes: inputs, weights and buffers read once, outputs written once
    dtype: str                     # the floating dtype holding most of those bytes: whose FLOP peak applies
    kernel_ms: float               # the candidate's median time the rates are computed from
    achieved_gbps: float           # bytes / kernel_ms
    achieved_gflops: float | None  # flops / kernel_ms
    peak: str | None = None        # whose peak, and where it comes from; None: no peak known for the device
    peak_gbps: float | None = None
    peak_gflops: float | None = None   # for `dtype`; None: no FLOP peak for it (the memory bound alone)
    floor_ms: float | None = None      # the larger of bytes / peak bandwidth and flops / peak FLOP rate
    fraction: float | None = None      # floor_ms / kernel_ms: the larger of the two fractions of peak
    bound: str | None = None           # "memory" | "compute": the bound that sets floor_ms


@dataclass
class OpRow:
    name: str          # an operator (`aten::mm`), an extension's function, or a CUDA kernel
    kind: str          # "op" | "extension" | "kernel"
    ms: float          # self time per forward
    calls: float       # calls per forward


@dataclass
class OpTable:
    """Where a forward's time goes, by torch.profiler over a few calls after timing (never a timed one)."""
    clock: str         # "cpu": CPU time; "cuda": the device's time
    calls: int         # forwards profiled
    total_ms: float    # every row's self time per forward, shown or not
    rows: list[OpRow] = field(default_factory=list)


@dataclass
class EvalResult:
    task: str
    backend: str
    compiled: bool = False
    correct: bool = False
    error: EvalError | None = None
    kernel_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    speedup_ci: dict[str, list[float]] = field(default_factory=dict)   # "eager", "compile": [low, high],
                                                                       # each paired speedup's 95 % interval
    reward: float | None = None            # milestone reward; None when the task is broken
    within_noise: bool = False             # the margin lies inside an interval that decides the reward:
                                           # decided on the medians (env/run/scoring.py note_intervals)
    time_resolved: bool = True             # the kernel's time told apart from zero; False where calls measured
                                           # from outside, less the harness's overhead, leave it inside that
                                           # overhead's noise: no speed reward (scoring.time_resolved)
    speedup_totals: dict[str, float] = field(default_factory=dict)   # "eager", "compile": the baseline's total
                                           # time over the solution's on the same calls; a speed reward needs
                                           # it beyond the margin too (reward.score)
    reward_continuous: float | None = None  # the paired speedup over torch.compile (ablations; reward.py)
    timings: dict[str, Timing] = field(default_factory=dict)   # "kernel", "eager", "compile"
    max_abs_error: list[float] = field(default_factory=list)   # per verification input set
    tolerance_used: list[float] = field(default_factory=list)  # [error, allowed] at the verified element
                                                               # nearest its tolerance (a pass)
    seeds: list[int] = field(default_factory=list)
    weights: str | None = None             # "state_dict" | "seed": how weights were matched
    warnings: list[str] = field(default_factory=list)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    device: str = ""
    log: str = ""                          # tail of the candidate's own stdout/stderr
    protocol: str = "strict"               # "strict" | "published" (docs/verification.md)
    baseline_source: str | None = None     # torch.compile time: "paired" | "stored" | "re-timed"
    skipped_sets: list[str] = field(default_factory=list)   # structured input sets the reference rejects
    timer: dict[str, str] = field(default_factory=dict)    # CUDA: "held" | "unheld" per side (env/measure/hold.py)
    speed_of_light: SpeedOfLight | None = None   # the work and the fraction of peak (feedback, not the reward)
    # Feedback, never read by the reward (env/run/feedback.py): the profiler's tables, the reference's
    # operators and the candidate's own (as the candidate's process reported them: it could forge its
    # own), and the reference captured in a CUDA graph; `feedback_notes` says why one is missing.
    reference_ops: OpTable | None = None
    candidate_ops: OpTable | None = None
    graph_ms: float | None = None
    feedback_notes: list[str] = field(default_factory=list)
    # where the candidate's CPU time went in its calls, sampled from outside its process (rules/op_samples.py):
    # seconds, lost, against_samples, unattributed (share in code no library file holds), forward_s,
    # unsampled_ended_threads {untimed|timed: [unsampled s, forwards' s]}, libraries [[name, share]],
    # symbols [[library, symbol, share]], aten_kernels [[symbol, share]];
    # or {"unavailable": why} where perf events cannot be opened (the guard's record then decides alone)
    cpu_samples: dict | None = None
    # EvalConfig.unscored: the times of a candidate that failed verification (kernel_ms, eager_ms,
    # compile_ms, speedup_vs_eager, speedup_vs_compile); never scored, the reward stays -1
    unscored: dict[str, float | None] | None = None

    @property
    def task_error(self) -> bool:
        return self.error is not None and self.error.phase == "task"

    def to_dict(self) -> dict:
        return _adapter().dump_python(self)   # Python values: an infinite error stays infinite

    @classmethod
    def from_dict(cls, d: dict) -> "EvalResult":
        return _adapter().validate_python(d)


@cache
def _adapter():
    from pydantic import TypeAdapter   # on first use: commands that never serialise do not pay its import

    return TypeAdapter(EvalResult)
