"""The empty calls the candidate answers before its solution loads, on the task's own input layout.

They are the candidate's first calls, made before any of the solution's code can run: they warm its
process up, and the operator sampling (rules/op_samples.py) counts them as the harness's own calls, the
cheapest call (the harness's part of each call, which the solution can make neither smaller nor larger
here) and the interpreter's time in an empty call among them. Their times are logged (`calibrated`) and
taken off nothing: the harness's overhead taken off a real call is its twin's (twin.py).
"""

from __future__ import annotations

from cuda_agent.env.run.schedule import Call
from cuda_agent.env.run.worker_run import Failed
from cuda_agent.env.workers import transfer

CALIBRATION_CALLS = 7     # the first warms up


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
