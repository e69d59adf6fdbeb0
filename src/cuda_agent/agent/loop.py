"""The ReAct loop: the model calls tools until it calls `finish` or runs out of turns.

    episode = run_episode(task, OpenAIClient("my-model", base_url=...), workspace_dir="ws/")
    episode.solution, episode.result.reward, episode.trajectory

Every verified solution seen during the episode is tracked (reward first, then speedup over
torch.compile). At the end the best candidates are re-evaluated from a clean copy by the
environment, against the task held here in memory: the run's score never rests on the agent's
own claims or on files it could have touched. Whatever goes wrong (a broken endpoint, a crash of
ours), the trajectory is completed and returned.
"""

from __future__ import annotations

import json
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

from cuda_agent.agent.client import ChatClient, ClientError, ContextLengthError
from cuda_agent.agent.context import CHARS_PER_TOKEN, ContextBudget, compact, estimate_tokens, message_chars
from cuda_agent.agent.tools import AGENT_TOOLS, ToolContext, ToolLimits, ToolOutput, call_tool, registry
from cuda_agent.agent.trajectory import ToolCallRecord, Trajectory, TurnRecord
from cuda_agent.agent.workspace import Evaluator, Workspace, default_evaluator
from cuda_agent.env.config import EvalConfig
from cuda_agent.env.result import EvalError, EvalResult
from cuda_agent.tasks import Solution, Task

SYSTEM_PROMPT = """\
You are an expert GPU performance engineer. You write custom kernels that replace the PyTorch \
operations of a program and make it faster, working in a workspace through tools.

Rules (the environment enforces them):
- ModelNew in model_new.py has the same constructor arguments and parameters as Model in model.py.
- Its forward pass may not compute with torch: only allocate tensors and call your own kernels \
from kernels/, built into the module `cuda_extension`. C++ may call cuBLAS/cuDNN, not torch ops.
- Correct means equal to the reference within atol=rtol=1e-2 on fresh random inputs.
- Goal: correct and at least 5% faster than torch.compile.
- model.py, SKILL.md and the compile/verify/profile commands are protected.

Read SKILL.md first (rules, layout, workflow, optimisation playbook). Work in small steps: write, \
compile, verify, profile, improve. Call `finish` when you are done."""

TASK_PROMPT = """\
Task `{name}` ({backend} backend). The workspace is the current directory of `bash`:
model.py (the program to speed up), model_new.py (your starting point), kernels/, SKILL.md, \
and the commands ./compile, ./verify, ./profile (also available as the tools compile, verify, profile).

model.py:
```python
{code}
```"""

VERIFYING = ("verify", "profile")   # commands whose success makes a candidate (compile checks less)

NUDGE = ("No tool was called. Continue the work by calling a tool; call `finish` when your solution "
         "is verified and you cannot make it faster.")
NUDGE_TRUNCATED = ("Your reply was cut off at the output token limit before a complete tool call. "
                   "Make smaller calls (write large files in parts, or edit instead of rewriting).")


@dataclass
class AgentConfig:
    max_turns: int = 200                 # model calls; the published evaluation allows 200
    max_seconds: float | None = None     # wall-clock budget for the episode, if any
    context: ContextBudget = field(default_factory=ContextBudget)
    limits: ToolLimits = field(default_factory=ToolLimits)
    max_idle_turns: int = 3              # consecutive replies without a tool call before stopping
    send_reasoning: bool = False         # send earlier reasoning_content back to the server
    rescore: bool = True                 # re-evaluate the best candidates from a clean copy at the end


@dataclass
class Candidate:
    solution: Solution
    result: EvalResult
    turn: int
    trusted: bool                        # evaluated by us (a tool call), not read from a bash record


def rank(result: EvalResult | None) -> tuple | None:
    """Sort key of a verified result: reward, then speedup vs torch.compile, then vs eager.
    A result verified without timing counts as reward 1 (correct, speed unknown)."""
    if result is None or not result.correct:
        return None
    reward = result.reward if result.reward is not None and result.kernel_ms is not None else 1
    return (reward, result.speedup_vs_compile or 0.0, result.speedup_vs_eager or 0.0)


class BestTracker:
    """The best candidate overall and the best one we evaluated ourselves (claims can be forged)."""

    def __init__(self):
        self.best: Candidate | None = None
        self.best_trusted: Candidate | None = None

    def offer(self, candidate: Candidate) -> bool:
        key = rank(candidate.result)
        if key is None:
            return False
        if candidate.trusted and (self.best_trusted is None or key > rank(self.best_trusted.result)):
            self.best_trusted = candidate
        if self.best is None or key > rank(self.best.result):
            self.best = candidate
            return True
        return False


@dataclass
class EpisodeResult:
    trajectory: Trajectory
    solution: Solution | None            # the best solution (after the clean re-evaluation); None if none passed
    result: EvalResult | None            # its clean evaluation (or the failed one of the final state)
    workspace: Workspace

    @property
    def reward(self) -> float | None:
        return self.trajectory.reward


EventHandler = Callable[[str, dict], None]


def run_episode(task: Task, client: ChatClient, *, workspace_dir: str | Path | None = None,
                config: AgentConfig | None = None, eval_config: EvalConfig | None = None,
                final_eval_config: EvalConfig | None = None, evaluator: Evaluator | None = None,
                on_event: EventHandler | None = None) -> EpisodeResult:
    """One episode of `client` on `task`. `eval_config` drives the compile/verify/profile commands;
    `final_eval_config` (default: the same) the clean re-evaluation that sets the reward."""
    root = Path(workspace_dir) if workspace_dir else Path(tempfile.mkdtemp(prefix="cuda-agent-ws-"))
    ws = Workspace.create(task, root, eval_config=eval_config, evaluator=evaluator or default_evaluator,
                          overwrite=True)
    return Episode(ws, client, config or AgentConfig(), final_eval_config or ws.eval_config, on_event).run()


class Episode:
    def __init__(self, ws: Workspace, client: ChatClient, config: AgentConfig, final_config: EvalConfig,
                 on_event: EventHandler | None):
        self.ws, self.client, self.config, self.final_config = ws, client, config, final_config
        self.emit = on_event or (lambda kind, data: None)
        self.tools = registry(AGENT_TOOLS)
        self.ctx = ToolContext(ws, config.limits)
        self.budget = config.context
        self.tracker = BestTracker()
        self.records_offset = 0
        self.chars_per_token: float | None = None
        self.timings = {"model_s": 0.0, "tools_s": 0.0, "eval_s": 0.0, "final_eval_s": 0.0, "total_s": 0.0}
        schemas = [t.schema() for t in self.tools.values()]
        task = ws.task
        self.traj = Trajectory(
            task={"name": task.name, "origin": task.origin, "digest": task.digest, "code": task.code},
            model=getattr(client, "model", type(client).__name__), tools=schemas,
            config={"agent": asdict(config), "eval": ws.eval_config.to_dict(), "final_eval": final_config.to_dict(),
                    "backend": ws.backend})
        first = [{"role": "system", "content": SYSTEM_PROMPT},
                 {"role": "user", "content": TASK_PROMPT.format(name=task.name, backend=ws.backend,
                                                                code=task.code.strip())}]
        self.traj.messages = [dict(m) for m in first]     # full transcript
        self.context = [dict(m) for m in first]           # what the model is sent (compacted)

    # -- driver ---------------------------------------------------------------------------------

    def run(self) -> EpisodeResult:
        start = time.perf_counter()
        self.emit("start", {"task": self.ws.task.name, "workspace": str(self.ws.root), "model": self.traj.model})
        try:
            self.traj.stop_reason = self._loop(start)
        except KeyboardInterrupt:  # stop promptly, but keep what we have
            self.traj.stop_reason, self.traj.error = "interrupted", "KeyboardInterrupt"
        except Exception:  # a bug of ours must not lose the trajectory
            self.traj.stop_reason, self.traj.error = "error", traceback.format_exc()[-4000:]
        self.emit("stop", {"reason": self.traj.stop_reason, "error": self.traj.error})
        solution, result = self._finalize(rescore=self.config.rescore and self.traj.stop_reason != "interrupted")
        self.timings["total_s"] = time.perf_counter() - start
        self.traj.timings = {k: round(v, 3) for k, v in self.timings.items()}
        self.emit("final", {"reward": self.traj.reward, "speedup_vs_compile": self.traj.speedup_vs_compile,
                            "result": result})
        return EpisodeResult(self.traj, solution, result, self.ws)

    def _loop(self, start: float) -> str:
        idle = 0
        for turn in range(1, self.config.max_turns + 1):
            if self.config.max_seconds and time.perf_counter() - start > self.config.max_seconds:
                return "time_limit"
            record = TurnRecord(turn=turn)
            self.traj.turns.append(record)
            try:
                completion = self._complete(record)
            except ContextLengthError as exc:
                self.traj.error = str(exc)
                return "context_exceeded"
            except ClientError as exc:
                self.traj.error = str(exc)
                return "client_error"
            message = completion.message
            calls = message.get("tool_calls") or []
            self._append(message)
            self.emit("model", {"turn": turn, "seconds": completion.seconds, "content": message.get("content") or "",
                                "tool_calls": [c["function"]["name"] for c in calls],
                                "prompt_tokens": completion.prompt_tokens,
                                "completion_tokens": completion.completion_tokens})
            if not calls:
                idle += 1
                if idle >= self.config.max_idle_turns:
                    return "no_tool_calls"
                nudge = NUDGE_TRUNCATED if completion.finish_reason == "length" else NUDGE
                self._append({"role": "user", "content": nudge})
                continue
            idle = 0
            finished = False
            for call in calls:
                finished |= self._run_call(turn, call, record)
            if finished:
                return "finish"
        return "max_turns"

    # -- one model call -------------------------------------------------------------------------

    def _complete(self, record: TurnRecord):
        for attempt in (0, 1):
            record.compacted += compact(self.context, self.budget, self.chars_per_token or CHARS_PER_TOKEN)
            sent = self._outgoing()
            try:
                completion = self.client.complete(sent, self.traj.tools)
                break
            except ContextLengthError:
                if attempt:
                    raise
                # The window is smaller than the budget said: shrink the budget for the rest of
                # the episode (compaction then starts at once) and try again.
                now = estimate_tokens(self.context, self.chars_per_token or CHARS_PER_TOKEN)
                self.budget = replace(self.budget, max_tokens=int(min(self.budget.max_tokens, now) * 0.7),
                                      keep_recent=min(self.budget.keep_recent, 2))
        record.seconds = round(completion.seconds, 3)
        record.prompt_tokens, record.completion_tokens = completion.prompt_tokens, completion.completion_tokens
        record.finish_reason = completion.finish_reason
        self.timings["model_s"] += completion.seconds
        usage = self.traj.usage
        usage["calls"] += 1
        usage["prompt_tokens"] += completion.prompt_tokens or 0
        usage["completion_tokens"] += completion.completion_tokens or 0
        if completion.prompt_tokens:  # calibrate the estimate on what the server counted
            self.chars_per_token = max(1.0, sum(message_chars(m) for m in sent) / completion.prompt_tokens)
        return completion

    def _outgoing(self) -> list[dict]:
        """The context as sent: no reasoning unless asked, and tool-call arguments that parse as JSON
        (servers re-parse them, and one malformed call must not break every later request)."""
        out = []
        for m in self.context:
            m = dict(m)
            if not self.config.send_reasoning:
                m.pop("reasoning_content", None)
            if m.get("tool_calls"):
                m["tool_calls"] = [_sanitized_call(c) for c in m["tool_calls"]]
            out.append(m)
        return out

    def _append(self, message: dict) -> None:
        self.traj.messages.append(message)
        self.context.append(dict(message))

    # -- one tool call --------------------------------------------------------------------------

    def _run_call(self, turn: int, call: dict, record: TurnRecord) -> bool:
        name = call["function"].get("name") or ""
        arguments = call["function"].get("arguments")
        start = time.perf_counter()
        out: ToolOutput = call_tool(self.tools, self.ctx, name, arguments)
        seconds = time.perf_counter() - start
        self.timings["tools_s"] += seconds
        rec = ToolCallRecord(id=call["id"], name=name, arguments=arguments if isinstance(arguments, str)
                             else json.dumps(arguments), ok=out.ok, error=out.error, seconds=round(seconds, 3))
        text = out.text
        restored = self.ws.restore_protected()
        if restored:
            text += f"\nnote: protected files were modified and have been restored: {', '.join(restored)}"
        if out.command is not None and out.command.result is not None:
            self.timings["eval_s"] += out.command.seconds
            rec.command = out.command.command
            rec.env.append(out.command.result.to_dict())
            if out.command.solution is not None and out.command.command in VERIFYING:
                self._offer(Candidate(out.command.solution, out.command.result, turn, trusted=True))
        records, self.records_offset = self.ws.read_records(self.records_offset)
        for r in records:  # commands the model ran through bash
            rec.command = rec.command or r.get("command")
            rec.env.append(r["result"].to_dict())
            if r.get("command") in VERIFYING:
                self._offer(Candidate(r["solution"], r["result"], turn, trusted=False))
        rec.output_chars = len(text)
        record.tool_calls.append(rec)
        self._append({"role": "tool", "tool_call_id": call["id"], "content": text})
        self.emit("tool", {"turn": turn, "name": name, "arguments": arguments, "ok": out.ok, "text": text,
                           "seconds": seconds, "command": rec.command})
        return out.finish

    def _offer(self, candidate: Candidate) -> None:
        if self.tracker.offer(candidate):
            r = candidate.result
            self.traj.best = {"turn": candidate.turn, "digest": candidate.solution.digest,
                              "files": candidate.solution.files, "result": r.to_dict(), "trusted": candidate.trusted}
            self.emit("best", {"turn": candidate.turn, "reward": rank(r)[0], "speedup_vs_compile": r.speedup_vs_compile,
                               "speedup_vs_eager": r.speedup_vs_eager})

    # -- the end ----------------------------------------------------------------------------------

    def _finalize(self, rescore: bool) -> tuple[Solution | None, EvalResult | None]:
        """Re-evaluate the best candidates from a clean copy; the best of those is the answer."""
        candidates: dict[str, Solution] = {}
        for c in (self.tracker.best, self.tracker.best_trusted):
            if c is not None:
                candidates.setdefault(c.solution.digest, c.solution)
        try:
            current = self.ws.snapshot()
            candidates.setdefault(current.digest, current)   # work the model never verified
        except (OSError, ValueError):
            pass
        if not rescore:
            best = self.tracker.best
            return self._settle(best.solution if best else None, best.result if best else None)
        start = time.perf_counter()
        best_solution, best_result = None, None
        for solution in candidates.values():
            result = self._evaluate_clean(solution)
            self.emit("rescore", {"digest": solution.digest, "result": result})
            if best_result is None or (rank(result) or (-2,)) > (rank(best_result) or (-2,)):
                best_solution, best_result = solution, result
        self.timings["final_eval_s"] += time.perf_counter() - start
        if best_result is None or not best_result.correct:
            best_solution = None   # nothing verified; traj.final still says why the last state failed
        return self._settle(best_solution, best_result)

    def _evaluate_clean(self, solution: Solution) -> EvalResult:
        try:
            return self.ws.evaluator(self.ws.task, solution, self.final_config)
        except Exception as exc:
            return EvalResult(task=self.ws.task.name, backend=self.ws.backend,
                              error=EvalError("internal", f"{type(exc).__name__}: {exc}"))

    def _settle(self, solution: Solution | None, result: EvalResult | None):
        self.traj.final = result.to_dict() if result is not None else None
        if result is None:
            self.traj.reward = -1
        else:
            self.traj.reward = result.reward if result.reward is not None or result.task_error else -1
            self.traj.speedup_vs_compile = result.speedup_vs_compile
        return solution, result


def _sanitized_call(call: dict) -> dict:
    arguments = call["function"].get("arguments")
    try:
        json.loads(arguments) if isinstance(arguments, str) else None
        valid = isinstance(arguments, str)
    except json.JSONDecodeError:
        valid = False
    if valid:
        return call
    return {**call, "function": {**call["function"], "arguments": "{}"}}
