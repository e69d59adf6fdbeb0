"""Why a result earned its reward, in words: the table under `cuda-agent eval`, its sentence, and the
workspace's profile lines and hint.

Every verdict reads the paired speedups and the policy in `reward.py` (the margin, the milestones),
as the reward does; the medians are shown as times only (their ratio can differ from the paired
speedup). Each speedup comes with its 95 % interval where one is known, and a reward whose margin lies
inside an interval that decides it says so ("within noise") and how it was decided, in one place
(`noise_text`)."""

from __future__ import annotations

from dataclasses import dataclass

from cuda_agent.env.result import EvalResult
from cuda_agent.env.reward import NEEDED, PERCENT, REWARDS, decisive_speedup, is_faster_speedup, time_saved, totals_decide

PAIRED_NOTE = ("times are each side's median; speedups are medians of per-call ratios (each call against "
               "the baseline on the same inputs), and they decide the reward with the ratio of the calls' total "
               "times (both must be faster)")


_LEVELS = ", ".join(map(str, REWARDS))
UNRESOLVED = ("the kernel's time, measured from outside less the harness's own steps, is not told apart from zero "
              "(it lies within the noise of those steps on this machine), so no speed reward was decided: a "
              "larger input or a less loaded machine times it")


@dataclass(frozen=True)
class Row:
    label: str
    ms: float | None
    speedup: str              # "3.33x" of the solution over this baseline (paired), or ""
    verdict: str              # whether the solution beats it by the margin, and what that earns
    interval: str = ""        # "3.21-3.45x": the speedup's 95 % interval, or ""


def timing_rows(result: EvalResult, compile_skipped: bool = False) -> list[Row]:
    """The solution and each baseline, with whether the solution beats it by the margin."""
    rows = [Row("solution", result.kernel_ms, "", "")]
    for label, key, ms, speedup, reward in (("eager", "eager", result.eager_ms, result.speedup_vs_eager, 2),
                                            ("torch.compile", "compile", result.compile_ms, result.speedup_vs_compile, 3)):
        if ms is None:
            if label == "torch.compile" and result.eager_ms is not None:
                why = "skipped" if compile_skipped else "unavailable"
                rows.append(Row(label, None, "", f"{why} (reward 3 out of reach)"))
            continue
        text = f"{speedup:.2f}x" if speedup else ""
        if not result.correct or result.kernel_ms is None:
            verdict = ""
        elif not result.time_resolved:
            verdict = "not decided (time unresolved)"
        elif totals_decide(speedup, result.speedup_totals.get(key)):
            verdict = f"no: {totals_text(result.speedup_totals[key])}"
        elif is_faster_speedup(speedup):
            verdict = f"yes (reward {reward})"
        else:
            verdict = f"no (needs above {NEEDED:.2f}x)"
        if verdict and result.within_noise and _holds_margin(result, key):
            verdict += ", within noise"
        rows.append(Row(label, ms, text, verdict, interval_text(result, key)))
    return rows


def medians_disagree(result: EvalResult) -> bool:
    """Whether a ratio of the medians differs from its paired speedup by more than 1 %: then the
    times beside the speedups need `PAIRED_NOTE`."""
    pairs = ((result.eager_ms, result.speedup_vs_eager), (result.compile_ms, result.speedup_vs_compile))
    return bool(result.kernel_ms) and any(ms and s and abs(ms / result.kernel_ms / s - 1) > 0.01 for ms, s in pairs)


def tolerance_text(result: EvalResult) -> str | None:
    """How close a pass came to the tolerance: the verified element that used the largest share of its
    allowance (atol + rtol * |reference|), or None when not known."""
    if not result.correct or not result.tolerance_used:
        return None
    from cuda_agent.env.rules.verify import share

    error, allowed = result.tolerance_used
    used = 100 * share(result.tolerance_used)
    return f"worst error {error:.3g} of {allowed:.3g} allowed ({used:.3g} % of the tolerance)"


def totals_text(totals: float) -> str:
    """Why a median beyond the margin earned nothing: the calls' totals were not."""
    return (f"the calls' total time is only {totals:.2f}x (some calls far slower than the rest); a speed reward "
            f"needs it above {NEEDED:.2f}x too")


def interval_text(result: EvalResult, baseline: str) -> str:
    """A paired speedup's 95 % interval ("eager" or "compile"), "1.01-1.08x", or "" where none is known."""
    interval = result.speedup_ci.get(baseline)
    return f"{interval[0]:.2f}-{interval[1]:.2f}x" if interval else ""


def noise_text(result: EvalResult) -> str | None:
    """Where the reward was decided within the noise (`EvalResult.within_noise`): which interval holds
    the margin, and how the reward was decided; None otherwise."""
    if not result.within_noise:
        return None
    held = [(name, speedup, result.speedup_ci[key]) for name, key, speedup in
            (("eager", "eager", result.speedup_vs_eager), ("torch.compile", "compile", result.speedup_vs_compile))
            if speedup and _holds_margin(result, key)]
    said = "; ".join(f"speedup vs {name} {speedup:.3f}x, 95 % CI {low:.3f}-{high:.3f} includes the {NEEDED:.3f}x "
                     "margin" for name, speedup, (low, high) in held)
    timing = result.timings.get("kernel")
    after = f" after {timing.iters} timed calls" if timing else ""
    return f"within noise{after}: {said}: the reward was decided on the median (another run may decide otherwise)"


def _holds_margin(result: EvalResult, baseline: str) -> bool:
    interval = result.speedup_ci.get(baseline)
    return bool(interval) and interval[0] <= NEEDED <= interval[1]


def explain_reward(result: EvalResult, compile_skipped: bool = False) -> str:
    """One sentence: the reward and the reason for it (and, within the noise, `noise_text`)."""
    sentence = _reward_reason(result, compile_skipped)
    noise = noise_text(result) if result.correct and result.reward is not None else None
    return f"{sentence}; {noise}" if noise else sentence


def _reward_reason(result: EvalResult, compile_skipped: bool) -> str:
    if result.task_error:
        return "no reward: the task itself failed (its reference or inputs), not the solution"
    if result.reward is None:
        return "no reward: this run stopped before timing"
    if not result.compiled:
        return f"reward -1 (of {_LEVELS}): the solution did not build or import"
    if not result.correct:
        phase = result.error.phase if result.error else "verify"
        return f"reward -1 (of {_LEVELS}): it built, but the {phase} phase rejected it"
    eager = _said(result, "eager", result.speedup_vs_eager)
    compiled = _said(result, "compile", result.speedup_vs_compile)
    if result.reward == 3:
        return (f"reward 3 (the most): correct, and more than {PERCENT} faster than eager ({eager}) "
                f"and than torch.compile ({compiled})")
    if result.reward == 2:
        if result.compile_ms is None:
            missing = "was skipped" if compile_skipped else "was unavailable"
            return (f"reward 2: correct and faster than eager ({eager}); the torch.compile baseline {missing}, "
                    "so 2 is the most this run can give")
        return (f"reward 2: correct and faster than eager ({eager}), but not more than {PERCENT} faster "
                f"than torch.compile ({compiled}; reward 3 needs above {NEEDED:.2f}x)")
    if not result.time_resolved:
        return f"reward 1: correct; {UNRESOLVED}"
    if result.eager_ms is None:
        return "reward 1: correct; not timed against eager, so 1 is the most this run can give"
    return (f"reward 1: correct, but not more than {PERCENT} faster than eager ({eager}; reward 2 needs "
            f"above {NEEDED:.2f}x)")


def reward_line(result: EvalResult) -> str:
    """The workspace's reward line: the reward and what the most needs (and, within the noise,
    `noise_text`)."""
    if result.reward is None:
        return "  reward n/a"
    line = f"  reward {result.reward:g} ({max(REWARDS)} = faster than eager and torch.compile by >{PERCENT})"
    noise = noise_text(result)
    return f"{line}; {noise}" if noise else line


def reward_hint(result: EvalResult) -> str | None:
    """Which baseline still blocks the most reward, and by how much: the time saved, (t0 - t) / t0 =
    1 - 1 / paired speedup, must exceed the margin (a speedup above NEEDED); or why no speed was
    decided (`UNRESOLVED`)."""
    if result.kernel_ms is None:
        return None
    if result.correct and not result.time_resolved:
        return f"  target not decided: {UNRESOLVED}"
    read = ((name, decisive_speedup(result, key)) for name, key in (("eager PyTorch", "eager"),
                                                                     ("torch.compile", "compile")))
    baselines = [(name, s) for name, s in read if s]
    blocking = [name for name, s in baselines if not is_faster_speedup(s)]
    if not blocking:
        return None
    saved = ", ".join(f"{name} {time_saved(s):+.1%}" for name, s in baselines)
    return (f"  target not met yet: not >{PERCENT} faster than {' and '.join(blocking)} "
            f"(time saved vs {saved}; reward {max(REWARDS)} needs >{PERCENT} vs both)")


def _ratio(speedup: float | None) -> str:
    return f"{speedup:.2f}x" if speedup else "untimed"


def _said(result: EvalResult, baseline: str, speedup: float | None) -> str:
    """A speedup as the reward's sentence gives it, with the totals where they, not it, decided."""
    totals = result.speedup_totals.get(baseline)
    if totals_decide(speedup, totals):
        return f"{_ratio(speedup)} by the median call; {totals_text(totals)}"
    return _ratio(speedup)
