"""Recording of the hack suite's verdicts (for tests/hacks/figures.py).

Set CUDA_AGENT_HACKS_REPORT=path.jsonl and each test appends one line per evaluated solution:
its id, hacks.md row, kind, the rules it was expected to trip, and what the environment said.
"""

from __future__ import annotations

import json
import os

import pytest

REPORT_ENV = "CUDA_AGENT_HACKS_REPORT"


def verdict(kind: str, result, neutralised: bool = False) -> str:
    """'rejected' / 'accepted' for what the environment decided; 'neutralised' for a cheat that was
    accepted but gained nothing (its trick had no effect on what was measured)."""
    rejected = (not result.correct) and result.reward == -1
    if kind == "hack" and not rejected and neutralised:
        return "neutralised"
    return "rejected" if rejected else "accepted"


@pytest.fixture
def record():
    def _record(case_id: str, row: str, kind: str, result, *, expected=(), invented: bool = False,
                neutralised: bool = False, what: str = "", verdict_override: str | None = None) -> None:
        path = os.environ.get(REPORT_ENV)
        if not path:
            return
        error = result.error
        line = {
            "id": case_id, "row": row, "kind": kind, "invented": invented, "what": what,
            "expected": list(expected), "verdict": verdict_override or verdict(kind, result, neutralised),
            "rule": error.rule if error else None, "phase": error.phase if error else None,
            "message": (error.message[:300] if error else ""), "correct": result.correct,
            "reward": result.reward, "kernel_ms": result.kernel_ms, "warnings": result.warnings,
        }
        _append(path, line)

    return _record


@pytest.fixture(scope="session")
def honest_results() -> dict:
    """The honest controls' results by case id, kept for the tests that measure a cheat against the same
    honest solution (one evaluation feeds both)."""
    return {}


@pytest.fixture
def record_line():
    """For checks that are not an evaluation (e.g. the data filter): write the fields as given."""
    def _record_line(**fields) -> None:
        path = os.environ.get(REPORT_ENV)
        if path:
            _append(path, fields)

    return _record_line


def _append(path: str, line: dict) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(line) + "\n")
