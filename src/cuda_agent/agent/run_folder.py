"""The `--out` folder of `cuda-agent solve`: what counts as an earlier run, how it is kept when a new
run goes into the same folder, and which episodes must not reach the training file.

An episode that ended because the endpoint or our own evaluator failed says nothing about the
policy; recording it with reward -1 would teach RL to avoid whatever it was doing when the network
went down. Such episodes go to `infra_failures.jsonl` instead of `trajectories.jsonl`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from cuda_agent.agent.trajectory import Trajectory

RUN_FILES = ("summary.json", "solution")
TRAINING_FILE = "trajectories.jsonl"
INFRA_FILE = "infra_failures.jsonl"
INFRA_STOP_REASONS = ("client_error", "error", "infra_error")


def earlier_run(out: Path) -> list[str]:
    """The files of an earlier run in `out` (empty: nothing to overwrite)."""
    return [name for name in RUN_FILES if (out / name).exists()]


def keep_earlier_run(out: Path) -> str | None:
    """Move an earlier run's summary and solution aside as `summary.N.json` and `solution.N/` (the
    first free N); returns the suffix used, or None when there was nothing to keep."""
    if not earlier_run(out):
        return None
    n = 1
    while (out / f"solution.{n}").exists() or (out / f"summary.{n}.json").exists():
        n += 1
    if (out / "solution").exists():
        shutil.move(str(out / "solution"), str(out / f"solution.{n}"))
    if (out / "summary.json").exists():
        shutil.move(str(out / "summary.json"), str(out / f"summary.{n}.json"))
    return str(n)


def infrastructure_failure(traj: Trajectory) -> str | None:
    """Why the episode's outcome is not the policy's doing (endpoint down, evaluator crash), else None."""
    if traj.stop_reason in INFRA_STOP_REASONS:
        return f"{traj.stop_reason}: {(traj.error or '').strip()[-300:] or 'no detail'}"
    final_error = (traj.final or {}).get("error") or {}
    if final_error.get("phase") == "internal":
        return f"the evaluator failed: {str(final_error.get('message', '')).strip()[-300:]}"
    if traj.reward is None:
        return "the episode has no reward (the task or the evaluation failed, not the policy)"
    return None
