"""The harness's own overhead in a call, measured before any of the solution's code runs.

On the CPU backend a call's time is the candidate process's CPU clock, read from outside; it holds
the harness's own steps in that process (reading the command, viewing the staged inputs, answering),
which the schedule's empty calls measure and `measures.less_overhead` takes off each real call. Those
steps run in the candidate's process, after its solution loaded: its code (a static initializer, a
thread of its own) can make them slow, and every real call would then lose what they gained. So the
candidate's worker first answers CALIBRATION_CALLS empty calls on the task's own input layout, before
it loads the solution (`workers/candidate.py run_candidate`); what the schedule's empty calls measure
is taken off only up to CAP_FACTOR times their median plus CAP_SLACK_MS (the schedule's empty calls
run between real calls and the judge's, in cold caches, and honestly cost up to about twice as much).
What the solution's code can still gain is bounded by that allowance, a few tenths of a millisecond a
call; its threads working in an empty call are refused (rules/call_verdict.py).
"""

from __future__ import annotations

import statistics

from cuda_agent.env.run.schedule import Call
from cuda_agent.env.run.worker_run import Failed
from cuda_agent.env.workers import transfer

CALIBRATION_CALLS = 7     # the first warms up and is dropped
CAP_FACTOR = 2.5     # the schedule's empty calls measured 1.6-2.4x the calibrating ones (honest, loaded 2-core machine)
CAP_SLACK_MS = 0.1


def calibration_layout(task, backend: str, staging: bool, gpu: int | None = None) -> dict | None:
    """The task's input layout for the calibrating calls: on the CPU backend with a staging file, where
    the task's inputs (measured on the meta device, in a child process) fit a slot; else None (no calibration)."""
    from cuda_agent.env.infra.task_child import estimate_footprint

    if backend != "cpu" or not staging:
        return None
    found = estimate_footprint(task, backend, gpu)
    if found is None or found.input_layout is None:
        return None
    try:
        return found.input_layout if transfer.layout_fits(found.input_layout) else None
    except ValueError:   # a layout the staging file does not carry (UnreadableOutput): no calibration
        return None


def overhead_cap(calibrated: list[float] | tuple) -> float | None:
    """The most the harness takes off a real call as its own overhead, or None (no calibration)."""
    usable = list(calibrated)[1:]
    if not usable:
        return None
    return CAP_FACTOR * statistics.median(usable) + CAP_SLACK_MS


class Calibration:
    """The calibrating calls (a part of evaluation._Evaluation; rounds.py measures each)."""

    calibrated: list[float] = []   # each calibrating call's CPU milliseconds, in order
    calibration: dict | None = None   # the layout the candidate job was told to calibrate on

    def _calibration_calls(self) -> int:
        self.calibration = calibration_layout(self.task, self.backend, bool(self.candidate.has_staging), self.gpu)
        return CALIBRATION_CALLS if self.calibration is not None else 0

    def _calibrate(self) -> None:
        """The empty calls the candidate answers before it loads the solution, timed as the schedule's
        are (`_outside_call`), under the device's lock."""
        self.calibrated = []
        if self.calibration is None:
            return
        with self.candidate.channel.aside():   # the job's answer (Loaded) comes after these
            for number in range(CALIBRATION_CALLS):
                call = Call("null", 0)
                call.index = -1 - number
                self._verdict("compile", self.verdicts.before_call, False, True)   # counted as the guard counts them
                with self.lock.held(shared=False, label="harness.calibrate") as hold:
                    out, wall_ms, _ = self._outside_call(call, "compile", self.config.timeout_verify, hold,
                                                         {"layout": self.calibration})
                if not out.get("ok"):
                    raise Failed("internal", f"an empty call before the solution loaded failed: {out.get('message')}")
                self._verdict("compile", self.verdicts.after_call, True, 0)
                self.calibrated.append(wall_ms)
        self.candidate.resume()   # on to loading the solution, which needs no command
