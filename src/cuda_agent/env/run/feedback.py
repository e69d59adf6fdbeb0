"""Feedback after timing: where the time goes, and the CUDA-graph baseline (a part of evaluation._Evaluation).

It runs once every timed call is over and its figures are read (evaluation.py: `_profile`), on calls
of its own, so it cannot change a time, a speedup or the reward: the profiler's overhead lands on
calls nobody times, and nothing here writes a figure the reward reads (`score` reads the paired
speedups). A failure here is a note (`feedback_notes`), never the evaluation's error.

- The profiler's tables (`EvalConfig.profile_ops`): the reference's operators by self time (the
  judge's) and the candidate's kernels, or on the CPU its operators and extension functions. The
  candidate's table comes from the candidate's own process, which runs the solution's code and could
  write anything into it: it is shown, never trusted.
- The CUDA-graph baseline (`EvalConfig.graph_baseline`, GPU only): the reference's eager forward
  captured in a CUDA graph, timed by the judge beside eager on the same draws, scaled to this
  evaluation's eager time and kept in the baseline store (baselines.py), as torch.compile's is.
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from cuda_agent.env.result import OpRow, OpTable, Timing
from cuda_agent.env.run.baselines import BaselineStore
from cuda_agent.env.run.worker_run import Failed
from cuda_agent.env.workers import messages as msg

ROWS = 8              # rows per table: sized for an LLM's context
CALLS = 3             # profiled forwards per side
GRAPH_CALLS = 20      # timed replays of the CUDA graph, each beside an eager call
ANSWER_S = 60.0       # the most a profiler pass may take before it is given up


def op_table(fields: dict) -> OpTable:
    return OpTable(clock=fields["clock"], calls=fields["calls"], total_ms=fields["total_ms"],
                   rows=[OpRow(**row) for row in fields["rows"]])


def _short(text: str | None) -> str:
    """One line of a failure's message: a traceback's last (the exception), else the first."""
    lines = (text or "").strip().splitlines()
    if not lines:
        return "no answer"
    return (lines[-1] if lines[0].startswith("Traceback") else lines[0])[:200]


class Feedback:
    """The feedback pass (see the module's docstring)."""

    def _own_operators(self) -> None:
        """The candidate's table, while the candidate is still alive (before `_baselines` ends it)."""
        if not self.config.profile_ops:
            return
        try:
            with self.lock.held(shared=True, label="harness.operators"):
                self.candidate.send(msg.ProfileOwn(calls=CALLS, rows=ROWS))
                answer = self._ask(self.candidate, min(self.config.timeout_verify, ANSWER_S), "profile")
        except Failed as failure:
            self.result.feedback_notes.append(f"your kernels' profile: {_short(failure.error.message)}")
            return
        if answer.get("ok") and answer.get("table"):
            self.result.candidate_ops = op_table(answer["table"])
        else:
            self.result.feedback_notes.append(f"your kernels' profile: {_short(answer.get('message'))}")

    def _reference_operators(self) -> None:
        """The reference's table: the judge's last work, after every baseline is timed."""
        if not self.config.profile_ops or self.judge is None:
            return
        try:
            self.judge.channel.send(msg.ProfileReference(calls=CALLS, rows=ROWS))
            answer = self._ask(self.judge, min(self.config.timeout_reference, ANSWER_S), "profile")
        except Failed as failure:
            self.result.feedback_notes.append(f"the reference's profile: {_short(failure.error.message)}")
            return
        if answer.get("table"):
            self.result.reference_ops = op_table(answer["table"])
        else:
            self.result.feedback_notes.append(f"the reference's profile: {_short(answer.get('error'))}")

    def _graph_baseline(self) -> None:
        """The reference captured in a CUDA graph: from the store where it was timed before (scaled to
        this evaluation's eager time, whatever that is: it reaches no reward, and timing it again holds
        the device while a loaded host's eager times wander), else timed by the judge (and stored)."""
        eager = self.result.timings.get("eager")
        if self.backend != "cuda" or not self.config.graph_baseline or eager is None or self.judge is None:
            return
        store, key = BaselineStore(self.config.cache_dir), self._store_key()
        entry = store.get(key)
        if entry is not None and entry.graph_error:
            self.result.feedback_notes.append(f"CUDA graph baseline: {entry.graph_error}")
            return
        if entry is not None and entry.graph and entry.graph_eager_ms:
            self._note_graph(Timing(**entry.graph), entry.graph_eager_ms, eager)
            return
        self.say("timing the CUDA-graph baseline")
        try:
            self.judge.channel.send(msg.TimeGraph(calls=GRAPH_CALLS))
            answer = self._ask(self.judge, self.config.timeout_reference, "profile")
        except Failed as failure:   # the judge failed here: no graph, and nothing else changes
            self.result.feedback_notes.append(f"CUDA graph baseline: {_short(failure.error.message)}")
            return
        graph_ms = [t for t in answer.get("graph_ms") or [] if t is not None]
        eager_ms = [t for t in answer.get("eager_ms") or [] if t is not None]
        if answer.get("error") or not graph_ms or not eager_ms:
            error = _short(answer.get("error"))
            self.result.feedback_notes.append(f"CUDA graph baseline: {error}")
            self._keep_graph(store, key, eager, graph_error=error)
            return
        graph, beside = Timing.from_samples(graph_ms), statistics.median(eager_ms)
        self._note_graph(graph, beside, eager)
        self._keep_graph(store, key, eager, graph=graph.__dict__, graph_eager_ms=beside)

    def _note_graph(self, graph: Timing, beside_ms: float, eager: Timing) -> None:
        """The graph's time scaled by this evaluation's eager time over the one timed beside it."""
        ratio = eager.median_ms / beside_ms
        self.result.graph_ms = graph.median_ms * ratio
        self.result.timings["graph"] = Timing(**{**graph.__dict__, "median_ms": self.result.graph_ms})

    def _keep_graph(self, store: BaselineStore, key: str, eager: Timing, **fields) -> None:
        from cuda_agent.env.run.baselines import task_entry

        def with_graph(entry):
            entry = entry or task_entry(self.task, self.result.device, self.config, self.backend, eager, None, None)
            return replace(entry, **{"graph": None, "graph_eager_ms": None, "graph_error": None, **fields})

        store.update(key, with_graph)
