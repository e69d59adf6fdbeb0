"""One agent episode, driven turn by turn from outside: `reset`, `step`, `finish`.

    session = KernelSession(task, "ws/", eval_config=EvalConfig(backend="cuda"))
    opening = session.reset()            # .messages: system prompt and task; .tools: the tools' schemas
    while True:
        message = my_model(conversation, opening.tools)        # the driver owns the model
        step = session.step(message.get("tool_calls") or [], assistant=message)
        conversation += [message, *step.messages]
        if step.done:
            break
    outcome = session.finish()           # clean re-evaluation: reward, solution, result, trajectory

Everything of an episode but the model: the workspace and tools, protected files restored after every
call, commands run through bash read back, verified candidates tracked (ours trusted, the model's
claims not), turn, idle and time limits, and the clean re-evaluation of the best candidates, which
alone sets the reward. `areset`/`astep`/`afinish` run the same code in worker threads, so sessions
can share one event loop and async evaluator; one caller drives a session at a time.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from cuda_agent.agent.evaluators import LoopEvaluator, blocking_evaluator
from cuda_agent.agent.prompts import NUDGE, NUDGE_TRUNCATED, opening_messages
from cuda_agent.agent.tools import AGENT_TOOLS, Tool, ToolContext, ToolLimits, call_tool, registry
from cuda_agent.agent.tracking import VERIFYING, BestTracker, Candidate, rank
from cuda_agent.agent.trajectory import ToolCallRecord, Trajectory, TurnRecord
from cuda_agent.agent.workspace import Workspace
from cuda_agent.env.config import EvalConfig
from cuda_agent.env.result import EvalError, EvalResult
from cuda_agent.tasks import Solution, Task

# Tool calls of async sessions run here, not in the event loop's default executor: a 10-minute
# build in one session must not hold up the driver's own work (verl tokenizes in that executor).
_THREADS = ThreadPoolExecutor(max_workers=256, thread_name_prefix="kernel-session")

EventHandler = Callable[[str, dict], None]


class SessionError(RuntimeError):
    """The session was driven out of order (a step before reset, or after the end)."""


@dataclass
class SessionLimits:
    max_turns: int | None = 200          # steps (model turns); the published evaluation allows 200
    max_seconds: float | None = None     # wall-clock budget from reset
    max_idle_turns: int = 3              # consecutive steps without a tool call before the session ends
    tools: ToolLimits = field(default_factory=ToolLimits)


@dataclass
class Opening:
    messages: list[dict]                 # [system, user]
    tools: list[dict]                    # OpenAI function schemas


@dataclass
class StepInfo:
    turn: int
    calls: list[ToolCallRecord] = field(default_factory=list)     # also in the trajectory
    candidates: list[Candidate] = field(default_factory=list)     # verified this step (trusted or claimed)
    restored: list[str] = field(default_factory=list)             # protected files put back
    eval_seconds: float = 0.0            # spent in compile/verify/profile tool calls
    new_best: bool = False


@dataclass
class Step:
    messages: list[dict]                 # tool results, and a nudge (role user) after a reply without calls
    done: bool
    info: StepInfo
    stop_reason: str | None = None       # set when done


@dataclass
class Outcome:
    reward: float | None                 # None: the outcome says nothing about the policy (see infra_error)
    solution: Solution | None            # the best solution after the clean re-evaluation; None if none passed
    result: EvalResult | None            # its clean evaluation (or the failed one of the final state)
    stop_reason: str
    trajectory: Trajectory
    infra_error: str | None = None


class KernelSession:
    def __init__(self, task: Task, workspace_dir: str | Path, eval_config: EvalConfig | None = None,
                 evaluator: Any = None, tools: Iterable[str | Tool] | None = None,
                 limits: SessionLimits | None = None, final_eval_config: EvalConfig | None = None,
                 rescore: bool = True, *, model: str = "", driver_config: dict | None = None,
                 on_event: EventHandler | None = None):
        """`evaluator`: a callable (task, solution, config) -> EvalResult, an object with an async
        `evaluate(task, solution, config)`, or None for the local `evaluate`. `tools`: names (or
        Tools), default the agent's set with `finish`. `final_eval_config` (default: the workspace's)
        drives the clean re-evaluation. `model` and `driver_config` (the driver's own settings) are
        recorded in the trajectory; `on_event(kind, data)` hears start, tool, best, stop, rescore, final."""
        self.task = task
        self.workspace_dir = Path(workspace_dir)
        self.eval_config = eval_config
        self.final_eval_config = final_eval_config
        self.evaluator = blocking_evaluator(evaluator)
        self.tools = registry(AGENT_TOOLS if tools is None else tools)
        self.limits = limits or SessionLimits()
        self.rescore = rescore
        self.model = model
        self.driver_config = driver_config
        self.emit = on_event or (lambda kind, data: None)
        self.existing: Workspace | None = None
        self.workspace: Workspace | None = None
        self.trajectory: Trajectory | None = None
        self.outcome: Outcome | None = None

    @classmethod
    def attach(cls, workspace: Workspace, **kwargs) -> "KernelSession":
        """A session on a workspace that exists already (the MCP server's): reset keeps its files."""
        kwargs.setdefault("eval_config", workspace.eval_config)
        session = cls(workspace.task, workspace.root, **kwargs)
        session.existing = workspace
        return session

    # -- the episode ------------------------------------------------------------------------------

    def reset(self) -> Opening:
        """A fresh workspace (or the attached one), fresh records; the opening messages and tool schemas."""
        if self.existing is not None:
            ws = self.existing
            ws.evaluator = self.evaluator
        else:
            ws = Workspace.create(self.task, self.workspace_dir, eval_config=self.eval_config,
                                  evaluator=self.evaluator, overwrite=True)
        self.workspace = ws
        self.final_config = self.final_eval_config or ws.eval_config
        self.ctx = ToolContext(ws, self.limits.tools)
        self.tracker = BestTracker()
        _, self.records_offset = ws.read_records(0)   # what was there before the session is not its own
        self.turn = self.idle = 0
        self.stop_reason: str | None = None
        self.outcome = None
        self.pending_turn: TurnRecord | None = None
        self.started = time.perf_counter()
        self.timings = {"model_s": 0.0, "tools_s": 0.0, "eval_s": 0.0, "final_eval_s": 0.0, "total_s": 0.0}
        schemas = [t.schema() for t in self.tools.values()]
        driver = self.driver_config if self.driver_config is not None else {"limits": asdict(self.limits)}
        task = self.task
        self.trajectory = Trajectory(
            task={"name": task.name, "origin": task.origin, "digest": task.digest, "code": task.code},
            model=self.model, tools=schemas,
            config={**driver, "eval": ws.eval_config.to_dict(), "final_eval": self.final_config.to_dict(),
                    "backend": ws.backend})
        opening = opening_messages(task.name, ws.backend, task.code)
        self.trajectory.messages = [dict(m) for m in opening]
        self.emit("start", {"task": task.name, "workspace": str(ws.root), "model": self.model})
        if self.limits.max_turns is not None and self.limits.max_turns <= 0:
            self.stop_reason = "max_turns"
        return Opening(opening, schemas)

    def note_model_turn(self, *, seconds: float = 0.0, prompt_tokens: int | None = None,
                        completion_tokens: int | None = None, finish_reason: str | None = None,
                        compacted: int = 0, failed: bool = False) -> None:
        """Record the driver's model call for the turn the next `step` runs: latency, token counts,
        finish reason ("length" earns the cut-off nudge), messages compacted before it. A failed
        call (`failed=True`) is recorded as a turn without usage."""
        self._require_reset()
        record = TurnRecord(turn=len(self.trajectory.turns) + 1, compacted=compacted)
        self.trajectory.turns.append(record)
        self.pending_turn = record
        if failed:
            return
        record.seconds = round(seconds, 3)
        record.prompt_tokens, record.completion_tokens = prompt_tokens, completion_tokens
        record.finish_reason = finish_reason
        self.timings["model_s"] += seconds
        usage = self.trajectory.usage
        usage["calls"] += 1
        usage["prompt_tokens"] += prompt_tokens or 0
        usage["completion_tokens"] += completion_tokens or 0

    def step(self, tool_calls: list[dict], assistant: dict | None = None) -> Step:
        """Run one turn's tool calls, in order. `tool_calls`: OpenAI format, or {"name", "arguments"}
        (ids are made up). `assistant`: the model's message, recorded in the transcript (without it,
        one carrying the calls is recorded)."""
        self._require_running()
        record = self.pending_turn or self._new_turn()
        self.pending_turn = None
        self.turn = record.turn
        calls = [_openai_call(call, record.turn, i) for i, call in enumerate(tool_calls)]
        message = dict(assistant) if assistant is not None else {"role": "assistant", "content": ""}
        if calls and not message.get("tool_calls"):
            message["tool_calls"] = calls
        self.trajectory.messages.append(message)
        info = StepInfo(turn=record.turn)
        messages = []
        finished = False
        for call in calls:
            reply, finish = self._run_call(call, record, info)
            messages.append(reply)
            finished |= finish
        self.idle = 0 if calls else self.idle + 1
        if not calls and self.idle < self.limits.max_idle_turns:
            nudge = NUDGE_TRUNCATED if record.finish_reason == "length" else NUDGE
            messages.append({"role": "user", "content": nudge})
            self.trajectory.messages.append({"role": "user", "content": nudge})
        self.stop_reason = self._stop_reason(finished, bool(calls))
        return Step(messages, self.stop_reason is not None, info, self.stop_reason)

    def finish(self, stop_reason: str | None = None, error: str | None = None, *,
               unscored: str | None = None) -> Outcome:
        """End the episode: re-evaluate the best candidates from clean copies and settle the reward.
        `stop_reason` (default: the session's own, or "stopped") and `error` say why it ended.
        `unscored`: end without any evaluation, for this reason (a driver that cannot wait for
        one); the reward is then None and the trajectory says why. A second call returns the
        same outcome."""
        if self.outcome is not None:
            return self.outcome
        self._require_reset()
        traj = self.trajectory
        traj.stop_reason = stop_reason or self.stop_reason or "stopped"
        self.stop_reason = traj.stop_reason
        if error is not None:
            traj.error = error
        self.emit("stop", {"reason": traj.stop_reason, "error": traj.error})
        self._read_claims(self.turn, None, None)   # made after the last step
        if unscored is None:
            rescore = self.rescore and traj.stop_reason != "interrupted"
            solution, result, rescored = self._final_evaluation(rescore)
            self._settle(result, rescored)
        else:
            solution, result = None, None
            traj.reward, traj.infra_error = None, f"not scored: {unscored}"
        self.timings["total_s"] = time.perf_counter() - self.started
        traj.timings = {k: round(v, 3) for k, v in self.timings.items()}
        self.emit("final", {"reward": traj.reward, "speedup_vs_compile": traj.speedup_vs_compile, "result": result})
        self.outcome = Outcome(traj.reward, solution, result, traj.stop_reason, traj, traj.infra_error)
        return self.outcome

    @property
    def done(self) -> bool:
        return self.stop_reason is not None

    # -- the same, for drivers that are coroutines ------------------------------------------------

    async def areset(self) -> Opening:
        return await self._in_thread(self.reset)

    async def astep(self, tool_calls: list[dict], assistant: dict | None = None) -> Step:
        return await self._in_thread(self.step, tool_calls, assistant)

    async def afinish(self, stop_reason: str | None = None, error: str | None = None, *,
                      unscored: str | None = None) -> Outcome:
        return await self._in_thread(functools.partial(self.finish, unscored=unscored), stop_reason, error)

    async def _in_thread(self, method, *args):
        loop = asyncio.get_running_loop()
        if isinstance(self.evaluator, LoopEvaluator):   # its coroutines run here (kept if we are cancelled)
            self.evaluator.loop = loop
        return await loop.run_in_executor(_THREADS, functools.partial(method, *args))

    # -- one tool call ----------------------------------------------------------------------------

    def _run_call(self, call: dict, record: TurnRecord, info: StepInfo) -> tuple[dict, bool]:
        name = call["function"].get("name") or ""
        arguments = call["function"].get("arguments")
        start = time.perf_counter()
        out = call_tool(self.tools, self.ctx, name, arguments)
        seconds = time.perf_counter() - start
        self.timings["tools_s"] += seconds
        rec = ToolCallRecord(id=call["id"], name=name, arguments=arguments if isinstance(arguments, str)
                             else json.dumps(arguments), ok=out.ok, error=out.error, seconds=round(seconds, 3))
        text = out.text
        restored = self.workspace.restore_protected()
        if restored:
            text += f"\nnote: protected files were modified and have been restored: {', '.join(restored)}"
            info.restored += restored
        command = out.command
        if command is not None and command.result is not None:
            self.timings["eval_s"] += command.seconds
            info.eval_seconds += command.seconds
            rec.command = command.command
            rec.env.append(command.result.to_dict())
            rec.answered_from_record.append(command.answered_by is not None)
            if command.solution is not None and command.command in VERIFYING:
                self._offer(Candidate(command.solution, command.result, record.turn, trusted=True), info)
        self._read_claims(record.turn, rec, info)
        rec.output_chars = len(text)
        record.tool_calls.append(rec)
        info.calls.append(rec)
        reply = {"role": "tool", "tool_call_id": call["id"], "content": text}
        self.trajectory.messages.append(dict(reply))
        self.emit("tool", {"turn": record.turn, "name": name, "arguments": arguments, "ok": out.ok, "text": text,
                           "seconds": seconds, "command": rec.command})
        return reply, out.finish

    def _read_claims(self, turn: int, rec: ToolCallRecord | None, info: StepInfo | None) -> None:
        """Results of commands the model ran through bash, from the workspace's records: claims."""
        records, self.records_offset = self.workspace.read_records(self.records_offset)
        for r in records:
            if rec is not None:
                rec.command = rec.command or r.get("command")
                rec.env.append(r["result"].to_dict())
                rec.answered_from_record.append(bool(r.get("answered_from_record")))
            if r.get("command") in VERIFYING:
                self._offer(Candidate(r["solution"], r["result"], turn, trusted=False), info)

    def _offer(self, candidate: Candidate, info: StepInfo | None) -> None:
        if info is not None and rank(candidate.result) is not None:
            info.candidates.append(candidate)
        if self.tracker.offer(candidate):
            if info is not None:
                info.new_best = True
            r = candidate.result
            self.trajectory.best = {"turn": candidate.turn, "digest": candidate.solution.digest,
                                    "files": candidate.solution.files, "result": r.to_dict(),
                                    "trusted": candidate.trusted}
            self.emit("best", {"turn": candidate.turn, "reward": rank(r)[0], "speedup_vs_compile": r.speedup_vs_compile,
                               "speedup_vs_eager": r.speedup_vs_eager})

    # -- limits and order -------------------------------------------------------------------------

    def _stop_reason(self, finished: bool, called: bool) -> str | None:
        limits = self.limits
        if finished:
            return "finish"
        if not called and self.idle >= limits.max_idle_turns:
            return "no_tool_calls"
        if limits.max_turns is not None and self.turn >= limits.max_turns:
            return "max_turns"
        if limits.max_seconds and time.perf_counter() - self.started > limits.max_seconds:
            return "time_limit"
        return None

    def _new_turn(self) -> TurnRecord:
        record = TurnRecord(turn=len(self.trajectory.turns) + 1)
        self.trajectory.turns.append(record)
        return record

    def _require_reset(self) -> None:
        if self.trajectory is None:
            raise SessionError("call reset() first")

    def _require_running(self) -> None:
        self._require_reset()
        if self.outcome is not None or self.stop_reason is not None:
            raise SessionError(f"the session is over ({self.stop_reason}); call finish() for the outcome")

    # -- the end ----------------------------------------------------------------------------------

    def _final_evaluation(self, rescore: bool) -> tuple[Solution | None, EvalResult | None, list[EvalResult]]:
        """Re-evaluate the best candidates from a clean copy; the best of those is the answer."""
        candidates: dict[str, Solution] = {}
        for c in (self.tracker.best, self.tracker.best_trusted):
            if c is not None:
                candidates.setdefault(c.solution.digest, c.solution)
        try:
            current = self.workspace.snapshot()
            candidates.setdefault(current.digest, current)   # work the model never verified
        except (OSError, ValueError):
            pass
        if not rescore:
            best = self.tracker.best
            return (best.solution, best.result, []) if best else (None, None, [])
        start = time.perf_counter()
        best_solution, best_result, rescored = None, None, []
        for solution in candidates.values():
            result = self._evaluate_clean(solution)
            rescored.append(result)
            self.emit("rescore", {"digest": solution.digest, "result": result})
            if best_result is None or (rank(result) or (-2,)) > (rank(best_result) or (-2,)):
                best_solution, best_result = solution, result
        self.timings["final_eval_s"] += time.perf_counter() - start
        if best_result is None or not best_result.correct:
            best_solution = None   # nothing verified; traj.final still says why the last state failed
        return best_solution, best_result, rescored

    def _evaluate_clean(self, solution: Solution) -> EvalResult:
        try:
            return self.evaluator(self.task, solution, self.final_config)
        except Exception as exc:
            return EvalResult(task=self.task.name, backend=self.workspace.backend,
                              error=EvalError("internal", f"{type(exc).__name__}: {exc}"))

    def _settle(self, result: EvalResult | None, rescored: list[EvalResult]) -> None:
        traj = self.trajectory
        traj.final = result.to_dict() if result is not None else None
        if result is None:
            traj.reward = -1
        else:
            traj.reward = result.reward if result.reward is not None or result.task_error else -1
            traj.speedup_vs_compile = result.speedup_vs_compile
        traj.infra_error = infra_error(traj.stop_reason, traj.error, result, rescored)
        if traj.infra_error is not None:
            traj.reward = None


def infra_error(stop_reason: str, error: str | None, result: EvalResult | None,
                rescored: list[EvalResult]) -> str | None:
    """Why an outcome says nothing about the policy, or None. A clean re-evaluation that failed on
    our side leaves the score unknown; an episode cut short by the endpoint or by a bug of ours
    before anything verified was not the policy's failure."""
    for r in rescored:
        if r.error is not None and r.error.phase == "internal":
            return f"the final evaluation failed on our side: {r.error.message[-2000:]}"
    if stop_reason in ("client_error", "error") and (result is None or not result.correct):
        return f"{stop_reason}: {(error or '')[-2000:]}"
    return None


def _openai_call(call: dict, turn: int, index: int) -> dict:
    """A tool call in OpenAI format, from that format or from {"name", "arguments"}."""
    if "function" in call:
        return {**call, "id": call.get("id") or f"call_{turn}_{index}", "type": call.get("type") or "function"}
    arguments = call.get("arguments")
    return {"id": call.get("id") or f"call_{turn}_{index}", "type": "function",
            "function": {"name": call.get("name") or "",
                         "arguments": arguments if isinstance(arguments, str) or arguments is None
                         else json.dumps(arguments)}}
