"""The judge's side of the schedule: the candidate's answered calls to the judge in batches, beside
the candidate's next calls; the verdicts back in the schedule's order."""

from __future__ import annotations

import time
from typing import Callable

from cuda_agent.env.run.rounds import CallRounds
from cuda_agent.env.run.schedule import Call
from cuda_agent.env.run.worker_run import Failed
from cuda_agent.env.workers import messages as msg


class JudgePipe:
    """Calls the candidate has answered, on their way to the judge. One batch is with the judge while
    the candidate goes on with the next calls, so the two workers' parts of the schedule overlap (each
    takes the device's lock for its own timed parts). Verdicts are settled in the schedule's order, at
    most two batches after their call: a rejection then ends the evaluation as it did call by call."""

    def __init__(self, evaluation: CallRounds, phase: str, batch: int,
                 on_verdict: Callable[[Call, dict], None] | None = None):
        self.evaluation, self.phase, self.batch, self.on_verdict = evaluation, phase, batch, on_verdict
        self.queued: list[tuple[Call, dict]] = []
        self.in_flight: list[tuple[Call, dict]] = []

    def run(self, call: Call, timeout: float) -> dict | None:
        """The candidate's half of `call` now (its answer, None for an empty call), the judge's with its batch."""
        if self.evaluation.outside:   # the judge draws this call's inputs first: its answers come in order
            self._collect()
        try:
            out = self.evaluation._candidate_round(call, self.phase, timeout)
        except Failed:
            self.drain()   # a verdict on an earlier call comes first, as in the schedule
            raise
        self.add(call, out)
        return out

    def add(self, call: Call, out: dict | None) -> None:
        if out is None:   # an empty call: nothing to judge
            return
        self.queued.append((call, out))
        if len(self.queued) >= self.batch:
            self._collect()
            self._send()

    def pending(self) -> int:
        """Calls the candidate answered that the judge has not yet answered for."""
        return len(self.queued) + len(self.in_flight)

    def drain(self) -> None:
        self._collect()
        self._send()
        self._collect()

    def _send(self) -> None:
        if not self.queued:
            return
        evaluation = self.evaluation
        asked = time.perf_counter()
        evaluation.judge.channel.send(msg.JudgeCalls(items=[evaluation._judge_request(call, out)
                                                            for call, out in self.queued]))
        evaluation._traced(f"{self.phase}.judge_send", asked)
        self.in_flight, self.queued = self.queued, []

    def _collect(self) -> None:
        if not self.in_flight:
            return
        evaluation = self.evaluation
        asked = time.perf_counter()
        answers = evaluation._ask(evaluation.judge, evaluation.config.timeout_reference, "task")["answers"]
        evaluation._traced(f"{self.phase}.judge_wait", asked)
        batch, self.in_flight = self.in_flight, []
        for (call, out), verdict in zip(batch, answers):
            verdict = evaluation._judged(call, self.phase, out, verdict)
            if verdict is not None and self.on_verdict is not None:
                self.on_verdict(call, verdict)
        if len(answers) != len(batch):
            raise Failed("internal", f"the judge answered {len(answers)} of {len(batch)} calls")
