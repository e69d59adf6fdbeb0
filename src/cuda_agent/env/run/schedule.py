"""The call schedule: which calls an evaluation makes, in what order, and how many a baseline run makes.

Verification calls (the task's draws, plus structured sets in the strict protocol), then warm-up,
then timed calls with structured spot checks and a few empty calls (the harness's own overhead, for
the clock cross-check) at random places. Each call's seed is fresh, and the candidate learns it only
when the call starts.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass

NULL_CALLS = 12            # empty calls for the clock cross-check
JUDGE_BATCH = 8            # timed calls the judge takes at once, beside the candidate's next ones

# The device time one task's baselines may hold: the device lock is the one resource every task of a
# `cuda-agent baseline` run queues for, so its total sets the run's floor. Medians over at least
# BASELINE_MIN_CALLS pairs of calls lasting milliseconds are as stable as over 100 (the spread of a
# long kernel is small), so a slow task takes fewer calls instead of the full count.
BASELINE_BUDGET_S = 2.0
BASELINE_MIN_CALLS = 30


@dataclass
class Call:
    kind: str                    # verify | warmup | null | timed | spot
    seed: int
    transform: str | None = None
    index: int = 0


def judge_batch(backend: str) -> int:
    """Timed calls the judge takes at once. On the GPU a batch (JUDGE_BATCH) overlaps the candidate's
    next calls. On the CPU one at a time: a judge that waited through a batch of the candidate's calls
    (tens of milliseconds idle) ran its first references up to half again slower than the candidate,
    which runs moments after the judge wrote its inputs; call by call, each side waits as long."""
    return JUDGE_BATCH if backend == "cuda" else 1


def fresh_seed() -> int:
    return secrets.randbelow(1 << 62)


def verification_calls(seeds: list[int], strict: bool) -> list[Call]:
    from cuda_agent.env.workers.draws import TRANSFORMS

    calls = [Call("verify", seed) for seed in seeds]
    if strict:
        calls += [Call("verify", fresh_seed(), transform) for transform in TRANSFORMS]
    return calls


def timing_calls(warmup: int, iters: int, strict: bool, null_calls: int, rng: random.Random,
                 settle_nulls: bool = False) -> list[Call]:
    """Warm-up, then timed calls; structured spot checks (strict) and empty calls at random places.
    The counts vary a little from evaluation to evaluation, so no solution can count on them.
    `settle_nulls`: each empty call followed by a warm-up call (`empty_calls`)."""
    warm = [Call("warmup", fresh_seed()) for _ in range(warmup + rng.randrange(4))]
    body = [Call("timed", fresh_seed()) for _ in range(iters + rng.randrange(max(2, iters // 10)))]
    extras = [empty_calls(settle_nulls) for _ in range(null_calls)]
    if strict:
        extras += [[Call("spot", fresh_seed(), "spikes")] for _ in range(max(2, iters // 20))]
    for extra in extras:
        at = rng.randrange(len(body) + 1)
        body[at:at] = extra
    return warm + body


def empty_calls(settle: bool) -> list[Call]:
    """An empty call, and where `settle`, a warm-up call after it: on the CPU, the call after an empty
    one found both workers' caches cooled (its reference ran about a third slower, the candidate's
    call a tenth), so it is not one of the timed calls. Its inputs are drawn from a fresh seed too (the
    judge draws them into the candidate's slot): one seed for every empty call would show the candidate,
    in its slot, which calls are empty before the harness's steps have run."""
    return [Call("null", fresh_seed())] + ([Call("warmup", fresh_seed())] if settle else [])


def shortened(calls: list[Call], keep: int) -> list[Call]:
    """The schedule with at most `keep` timed calls (warm-up, spots and empty calls stay)."""
    out, timed = [], 0
    for call in calls:
        if call.kind == "timed":
            timed += 1
            if timed > keep:
                continue
        out.append(call)
    return out


def baseline_calls(per_call_s: float, warmup: int, timed: int) -> tuple[int, int]:
    """(warm-up, timed) call counts for baselines whose paired call holds the device `per_call_s`:
    the full counts while they fit in BASELINE_BUDGET_S, else down to BASELINE_MIN_CALLS timed calls
    (never more than asked) and a tenth as many warm-ups (at least 3)."""
    fits = int(BASELINE_BUDGET_S / max(per_call_s, 1e-9))
    if fits >= timed:
        return warmup, timed
    keep = min(timed, max(BASELINE_MIN_CALLS, fits))
    return min(warmup, max(3, keep // 10)), keep
