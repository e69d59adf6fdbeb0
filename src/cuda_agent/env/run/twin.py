"""The candidate's twin: the harness's own steps in a CPU call, measured where no solution runs.

On the CPU backend a call's time is the candidate process's CPU clock, read from outside; it holds the
harness's own steps in that process (reading the command, viewing the staged inputs, answering), which
`measures.less_overhead` takes off each real call. Measured in the candidate's process, those steps are
the solution's to slow: its code can run on the harness's own thread (a profile function, a static
initializer), and every real call would lose what the empty calls gained. So they are measured in the
twin, a candidate's worker started as the candidate is (the same sandbox and settings, in a folder of its
own, handed the pair's staging file) whose job names no solution (workers/candidate.py `run_twin`): at
each of the schedule's empty calls it answers the same empty call first, on the inputs the judge drew
into the candidate's slot, under the device's lock, and its process's CPU clock is read from outside as
the candidate's is. The candidate answers that empty call as well: its threads' work there is judged.
The twin's empty calls are sampled as the candidate's are (where those are), and the interpreter's time in
them is the sampling's baseline for the timed calls. What the candidate's own empty calls reach bounds from
above only what is taken off (`measures.overhead_bound`) and that baseline (op_samples `null_interpreter`).
Only an evaluation that times its calls has a twin (`WorkerRun._start_workers`; spares always do, on the
CPU backend).
"""

from __future__ import annotations

import math
from pathlib import Path

from cuda_agent.env.builds.handed import hand
from cuda_agent.env.run.schedule import Call
from cuda_agent.env.run.worker_run import Failed, box_of, twin_dir
from cuda_agent.env.workers import messages as msg

WARMUP_CALLS = 1   # the twin's first empty calls, not measured (its first call imports and allocates)


class Twin:
    """The twin's empty calls (a part of evaluation._Evaluation; rounds.py makes one per empty call)."""

    twin_walls: list[float] = []   # each measured empty call's CPU milliseconds, in order
    twin_job: dict | None = None   # the job the twin gets once it is first needed (`_twin_job`)
    twin_started = False
    twin_sampling = None           # the twin's empty calls sampled (op_samples.OpSampling), where the candidate's are
    twin_touched_ms = 0.0          # its last empty call's own time for its reads and writes (workers/touch.py)

    def _twin_job(self, inputs_code: str, guard_lib, hold_lib: str | None) -> None:
        """The twin's job, kept until its first empty call: the candidate's, its libraries handed into the
        twin's own box, and no solution."""
        if self.twin is None:
            return
        box = box_of(twin_dir(self.job_dir))
        self.twin_job = dict(task_inputs_code=inputs_code, solution_dir="", backend=self.backend,
                             config=self._candidate_config(), box=str(box),
                             guard_lib=str(hand(Path(guard_lib), box)),
                             hold_lib=hold_lib and str(hand(Path(hold_lib), box)), crash_lib=self._crash_path(box),
                             twin=True)

    def _twin_ready(self, timeout: float) -> None:
        if self.twin_started:
            return
        if self.twin is None or self.twin_job is None:
            raise Failed("internal", "the CPU backend's calls are measured from outside, but no twin was started")
        self._wait_ready(self.twin)
        self.twin.send(msg.CandidateJob(**self.twin_job))
        loaded = self._ask(self.twin, timeout, "internal")
        if not loaded.get("ok"):
            raise Failed("internal", f"the candidate's twin did not start: {loaded.get('message')}")
        self.twin_started = True
        self.twin_walls = []
        self._sample_twin()

    def _sample_twin(self) -> None:
        """The twin's sampling, where the candidate is sampled: its empty calls' interpreter time becomes the
        candidate's sampling's baseline (`OpSampling.null_interpreter`)."""
        from cuda_agent.env.rules.op_samples import start_sampling

        sampling = self.verdicts.sampling if self.verdicts is not None else None
        if sampling is None or self.twin.main_pid is None:
            return
        self.twin_sampling, _ = start_sampling(self.twin.main_pid, self.backend, judge_files=self.config.fast_build)
        if self.twin_sampling is not None:
            sampling.twin_null = self.twin_sampling.interpreter["null"]

    def _close_twin_sampling(self) -> None:
        if self.twin_sampling is not None:
            self.twin_sampling.close()
            self.twin_sampling = None

    def _twin_call(self, call: Call, timeout: float, drawn: dict) -> None:
        """The empty call `call` made by the twin on the inputs drawn for it, measured as the candidate's calls
        are (`_outside_call`): its process's CPU time from the command to the answer, which locates the output."""
        first, touch_bytes = not self.twin_started, self._touch_bytes(call)
        self._twin_ready(timeout)
        for measured in [False] * (WARMUP_CALLS if first else 0) + [True]:
            sampling = self.twin_sampling if measured else None
            with self.lock.held(shared=False, label="harness.twin"):
                if sampling is not None:   # started before the clock is read, as the candidate's is
                    sampling.start(null=True)
                cpu_start = self.twin.cpu_seconds()
                self.twin.send(msg.CandidateCall(index=call.index, seed=call.seed, save=False, null=True,
                                                 touch_bytes=touch_bytes,
                                                 inputs={"slot": call.index % 2, "layout": drawn["layout"]}))
                out = self._ask(self.twin, timeout, "internal")
                cpu_end = self.twin.cpu_seconds()
                if sampling is not None:
                    sampling.answered()
            finish_ms = 0.0
            if out.get("ok"):   # its checks of the call count, as the candidate's do (rounds.py `_outside_call`)
                finish_ms, out = self._finish_measured(self.twin, timeout, "internal")
            if sampling is not None:
                sampling.finish(judge=False)
            if not out.get("ok") or cpu_start is None or cpu_end is None:
                raise Failed("internal", f"the candidate's twin failed an empty call: {out.get('message')}")
            if measured:   # the harness's steps alone: less what its empty forward read and wrote, by its clock
                wall_ms = (cpu_end - cpu_start) * 1e3
                self.twin_touched_ms = touched_ms(out, wall_ms) if touch_bytes else 0.0
                self.twin_walls.append(wall_ms - self.twin_touched_ms + finish_ms)


def touched_ms(answer: dict, wall_ms: float) -> float:
    """The twin's own measure of its empty forward (its reads and writes, workers/touch.py), within
    [0, wall_ms]: a process no solution reaches, so its clock is the harness's."""
    ms = answer.get("ms")
    return min(max(float(ms), 0.0), wall_ms) if isinstance(ms, (int, float)) and math.isfinite(ms) else 0.0
