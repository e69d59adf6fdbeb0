"""TEST DOUBLE: a minimal stand-in for `cuda_agent.agent.KernelSession` until the real class lands.

It has exactly the published surface (constructor, reset/step/finish and their async forms, the
opening/step/outcome fields) and is built on today's `Workspace` and tools, so the RL adapters can
be tested against the real workspace and environment. Once `cuda_agent.agent.KernelSession` exists,
delete this file and point `SESSION` in tests/rl/conftest.py at the real class; the adapters only
talk to the surface.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from cuda_agent.agent.loop import NUDGE, SYSTEM_PROMPT, TASK_PROMPT, rank
from cuda_agent.agent.tools import AGENT_TOOLS, ToolContext, ToolLimits, call_tool, registry
from cuda_agent.agent.trajectory import ToolCallRecord, Trajectory, TurnRecord
from cuda_agent.agent.workspace import Workspace, default_evaluator
from cuda_agent.env.result import EvalError, EvalResult


@dataclass
class SessionLimits:
    max_idle_turns: int = 3
    tools: ToolLimits = field(default_factory=ToolLimits)


@dataclass
class Opening:
    messages: list[dict]
    tools: list[dict]


@dataclass
class Step:
    messages: list[dict]
    done: bool
    info: dict = field(default_factory=dict)


@dataclass
class Outcome:
    reward: float | None
    solution: object
    result: EvalResult | None
    stop_reason: str
    trajectory: Trajectory


class FakeKernelSession:
    def __init__(self, task, workspace_dir, eval_config=None, evaluator=None, tools=None,
                 limits=None, final_eval_config=None, rescore=True):
        self.task, self.root = task, Path(workspace_dir)
        self.eval_config, self.final_eval_config = eval_config, final_eval_config
        self.evaluator = evaluator or default_evaluator
        self.tools = registry(tools or AGENT_TOOLS)
        self.limits = limits or SessionLimits()
        self.done, self.idle, self.best = False, 0, None

    # -- sync surface ---------------------------------------------------------------------------

    def reset(self) -> Opening:
        self.ws = Workspace.create(self.task, self.root, eval_config=self.eval_config,
                                   evaluator=self.evaluator, overwrite=True)
        self.ctx = ToolContext(self.ws, self.limits.tools)
        schemas = [t.schema() for t in self.tools.values()]
        messages = [{"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": TASK_PROMPT.format(name=self.task.name, backend=self.ws.backend,
                                                                   code=self.task.code.strip())}]
        self.traj = Trajectory(task={"name": self.task.name, "origin": self.task.origin,
                                     "digest": self.task.digest, "code": self.task.code},
                               model="rl", tools=schemas, messages=[dict(m) for m in messages])
        self.done, self.idle, self.best = False, 0, None
        return Opening(messages, schemas)

    def step(self, tool_calls, assistant=None) -> Step:
        if self.done:
            raise RuntimeError("the episode has ended")
        record = TurnRecord(turn=len(self.traj.turns) + 1)
        self.traj.turns.append(record)
        calls = [_openai_call(c) for c in tool_calls or []]
        self.traj.messages.append(assistant or {"role": "assistant", "content": "", "tool_calls": calls or None})
        if not calls:
            self.idle += 1
            self.done = self.idle >= self.limits.max_idle_turns
            out = [] if self.done else [{"role": "user", "content": NUDGE}]
            self.traj.messages += out
            return Step(out, self.done, {"idle": self.idle})
        self.idle, out = 0, []
        for call in calls:
            name, arguments = call["function"]["name"], call["function"]["arguments"]
            start = time.perf_counter()
            res = call_tool(self.tools, self.ctx, name, arguments)
            self.ws.restore_protected()
            record.tool_calls.append(ToolCallRecord(id=call["id"], name=name, arguments=arguments, ok=res.ok,
                                                    error=res.error, seconds=time.perf_counter() - start))
            command = res.command
            if command is not None and command.result is not None and command.command in ("verify", "profile"):
                if rank(command.result) is not None and (self.best is None or rank(command.result) > rank(self.best[1])):
                    self.best = (command.solution, command.result)
            out.append({"role": "tool", "tool_call_id": call["id"], "content": res.text})
            self.done |= res.finish
        self.traj.messages += out
        return Step(out, self.done, {"calls": len(calls)})

    def finish(self, stop_reason=None) -> Outcome:
        self.done = True
        candidates = {}
        if self.best is not None:
            candidates[self.best[0].digest] = self.best[0]
        try:
            current = self.ws.snapshot()
            candidates.setdefault(current.digest, current)
        except (OSError, ValueError):
            pass
        best_solution, best_result = None, None
        config = self.final_eval_config or self.ws.eval_config
        for solution in candidates.values():
            try:
                result = self.evaluator(self.task, solution, config)
            except Exception as exc:  # infrastructure failure: no reward
                result = EvalResult(task=self.task.name, backend=self.ws.backend,
                                    error=EvalError("internal", f"{type(exc).__name__}: {exc}"))
            if best_result is None or (rank(result) or (-2,)) > (rank(best_result) or (-2,)):
                best_solution, best_result = solution, result
        infra = best_result is not None and best_result.error is not None and best_result.error.phase == "internal"
        reward = None if infra else (best_result.reward if best_result is not None and best_result.correct else -1)
        self.traj.reward, self.traj.stop_reason = reward, stop_reason or "finish"
        self.traj.final = best_result.to_dict() if best_result is not None else None
        return Outcome(reward, best_solution if best_result is not None and best_result.correct else None,
                       best_result, self.traj.stop_reason, self.traj)

    # -- async surface --------------------------------------------------------------------------

    async def areset(self) -> Opening:
        return await asyncio.to_thread(self.reset)

    async def astep(self, tool_calls, assistant=None) -> Step:
        return await asyncio.to_thread(self.step, tool_calls, assistant)

    async def afinish(self, stop_reason=None) -> Outcome:
        return await asyncio.to_thread(self.finish, stop_reason)


def _openai_call(call: dict) -> dict:
    if "function" in call:
        fn = call["function"]
        return {"id": call.get("id") or "call_" + uuid.uuid4().hex[:8], "type": "function",
                "function": {"name": fn.get("name", ""), "arguments": _text(fn.get("arguments"))}}
    return {"id": "call_" + uuid.uuid4().hex[:8], "type": "function",
            "function": {"name": call.get("name", ""), "arguments": _text(call.get("arguments"))}}


def _text(arguments) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments or {})
