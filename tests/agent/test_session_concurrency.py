"""64 sessions as coroutines of one event loop, sharing one async evaluator (as verl runs its agent
loops against one evaluation service): they really run at once, and nothing crosses between them,
neither files, nor the claims read back from the workspace, nor the tracked candidates, nor the
trajectories."""

from __future__ import annotations

import asyncio
import json

from cuda_agent.agent import KernelSession
from cuda_agent.env.config import EvalConfig
from cuda_agent.env.result import EvalResult

from .conftest import RELU_BINDING, RELU_MODEL_NEW

SESSIONS = 64


class GatedEvaluator:
    """An EvalPool-like evaluator whose first evaluations wait until `gate` of them are in flight
    at once: run one session after another and the test times out instead of passing."""

    def __init__(self, evaluator, gate: int):
        self.evaluator, self.gate = evaluator, gate
        self.in_flight = self.most_in_flight = 0
        self.opened = asyncio.Event()

    async def evaluate(self, task, solution, config=None):
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        if self.in_flight >= self.gate:
            self.opened.set()
        try:
            await self.opened.wait()
            return self.evaluator(task, solution, config)
        finally:
            self.in_flight -= 1


def kernel(i: int) -> str:
    return RELU_BINDING + f"// session {i}\n// kernel_ms={0.1 + i / 100:.2f}\n"


def claim(i: int) -> str:
    forged = {"command": "profile", "ok": True, "files": {"model_new.py": f"raise NotImplementedError  # claim {i}"},
              "result": EvalResult(task="relu", backend="cpu", compiled=True, correct=True, kernel_ms=0.001,
                                   eager_ms=2.0, compile_ms=1.5, speedup_vs_compile=1500.0, reward=3).to_dict()}
    return f"echo '{json.dumps(forged)}' >> .cuda_agent/results.jsonl"


async def episode(i: int, session: KernelSession) -> tuple:
    await session.areset()
    await session.astep([{"name": "write", "arguments": {"path": "kernels/relu_binding.cpp", "content": kernel(i)}},
                         {"name": "write", "arguments": {"path": "model_new.py", "content": RELU_MODEL_NEW}}])
    profiled = await session.astep([{"name": "profile", "arguments": {}}])
    claimed = await session.astep([{"name": "bash", "arguments": {"command": claim(i)}}])
    read = await session.astep([{"name": "read", "arguments": {"path": "kernels/relu_binding.cpp", "offset": 13}}])
    await session.astep([{"name": "todo", "arguments": {"todos": [{"content": f"session {i}"}]}}])
    return profiled, claimed, read, await session.afinish()


def test_64_sessions_in_one_event_loop(tmp_path, relu_task, fake_evaluator):
    evaluator = GatedEvaluator(fake_evaluator, gate=SESSIONS)   # every session's profile at once
    sessions = [KernelSession(relu_task, tmp_path / f"ws{i}", eval_config=EvalConfig(backend="cpu"),
                              evaluator=evaluator) for i in range(SESSIONS)]

    async def main():
        return await asyncio.wait_for(asyncio.gather(*(episode(i, s) for i, s in enumerate(sessions))), 300)

    results = asyncio.run(main())
    assert evaluator.most_in_flight == SESSIONS
    roots = {s.workspace.root for s in sessions}
    assert len(roots) == SESSIONS
    for i, (session, (profiled, claimed, read, outcome)) in enumerate(zip(sessions, results)):
        # its own files, its own evaluation
        assert read.messages[0]["content"] == f"    13\t// session {i}\n    14\t// kernel_ms={0.1 + i / 100:.2f}"
        (trusted,) = profiled.info.candidates
        assert trusted.trusted and trusted.solution.files["kernels/relu_binding.cpp"] == kernel(i)
        assert trusted.result.kernel_ms == round(0.1 + i / 100, 2)
        # its own claim, read back from its own records only
        (forged,) = claimed.info.candidates
        assert not forged.trusted and forged.solution.files["model_new.py"].endswith(f"# claim {i}")
        records = (session.workspace.root / ".cuda_agent" / "results.jsonl").read_text().splitlines()
        assert len(records) == 1 and f"# claim {i}\"" in records[0]
        # its own tracker and trajectory
        assert session.tracker.best is forged and session.tracker.best_trusted is trusted
        assert session.ctx.todos == [{"content": f"session {i}", "status": "pending"}]
        traj = outcome.trajectory
        assert traj.best["files"]["model_new.py"].endswith(f"# claim {i}") and not traj.best["trusted"]
        assert traj.num_turns == 5 and len(traj.messages) == 2 + 5 + 6
        # the claim lost the clean re-evaluation; its own kernel won
        assert outcome.reward == 3 and outcome.solution.files["kernels/relu_binding.cpp"] == kernel(i)
        assert outcome.result.kernel_ms == round(0.1 + i / 100, 2)
    # each session: one profile, then its claim and its own solution re-evaluated
    assert len(fake_evaluator.calls) == 3 * SESSIONS
