"""Timing a candidate whose outputs are wrong (`EvalConfig.unscored`), so a policy can tell whether a
faster but wrong idea is worth fixing.

Only wrong values are passed over: a verdict the comparison alone decided (values outside the
tolerance, NaN/Inf where the reference is finite). Every other rule (a crash, a timeout, the guard's
findings, a wrong shape or dtype) ends the evaluation as it always does. The first wrong verdict is
kept; the calls go on; at the end the times move to `EvalResult.unscored` and the kept failure is
raised, so the result is a verification failure with reward -1 whose scored fields (kernel_ms, the
speedups, timings) stay empty: nothing that reads a result as scored can take these times for a score.
"""

from __future__ import annotations

from cuda_agent.env.run.schedule import Call
from cuda_agent.env.run.worker_run import Failed

UNSCORED_FIELDS = ("kernel_ms", "eager_ms", "compile_ms", "speedup_vs_eager", "speedup_vs_compile")


class UnscoredTiming:
    """An evaluation's wrong verdicts held back while it times (a part of evaluation._Evaluation)."""

    unscored_failure: Failed | None = None   # the first wrong output, raised once timing is over

    def _unscored_miss(self, call: Call, phase: str, verdict: dict) -> bool:
        """Whether a failed verdict is held back (EvalConfig.unscored, wrong values only): kept as the
        evaluation's failure, and the call counts as judged."""
        if not self.config.unscored or verdict.get("rule"):
            return False
        try:
            self._reject(call, phase, verdict)
        except Failed as failure:
            if self.unscored_failure is None:
                self.unscored_failure = failure
        return True

    def _unscored_end(self) -> None:
        """After timing: the times to `EvalResult.unscored`, out of every scored field, and the kept
        failure raised (nothing to do when every output was right)."""
        failure = self.unscored_failure
        if failure is None:
            return
        result = self.result
        if result.kernel_ms is not None:
            result.unscored = {name: getattr(result, name) for name in UNSCORED_FIELDS}
        for name in UNSCORED_FIELDS:
            setattr(result, name, None)
        result.timings = {}
        raise failure


UNSCORED_HEADLINE = "unscored: verification failed, no reward (the reward stays -1); the wrong outputs' times:"


def unscored_lines(result) -> list[str]:
    """What a policy reads of `EvalResult.unscored`: the headline, then each side's time and the
    speedups (paired, as a scored profile's); no lines without it."""
    from cuda_agent.env.reward import speedup_words

    times = result.unscored
    if not times:
        return []
    lines = [UNSCORED_HEADLINE]
    for label, ms, speedup in (("your kernel", times.get("kernel_ms"), None),
                               ("eager PyTorch", times.get("eager_ms"), times.get("speedup_vs_eager")),
                               ("torch.compile", times.get("compile_ms"), times.get("speedup_vs_compile"))):
        if ms is None:
            continue
        words = f"   (you would be {speedup_words(speedup)})" if speedup else ""
        lines.append(f"  {label:<14} {ms:.4g} ms{words}")
    return lines
