"""The ReAct loop: the model calls tools until it calls `finish` or runs out of turns.

    episode = run_episode(task, OpenAIClient("my-model", base_url=...), workspace_dir="ws/")
    episode.solution, episode.result.reward, episode.trajectory

A driver of a `KernelSession`, which is the episode (tools, limits, the reward's clean re-evaluation).
Here is the model's side: the client, the context sent to it (kept within its budget) and progress
events. Whatever goes wrong (a broken endpoint, a crash of ours), the trajectory is completed.
"""

from __future__ import annotations

import json
import tempfile
import traceback
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

from cuda_agent.llm.client import ChatClient, ClientError, Completion, ContextLengthError
from cuda_agent.agent.context import CHARS_PER_TOKEN, ContextBudget, compact, estimate_tokens, message_chars
from cuda_agent.agent.session import KernelSession, SessionLimits
from cuda_agent.agent.tools import ToolLimits
from cuda_agent.agent.trajectory import Trajectory
from cuda_agent.agent.workspace import Evaluator, Workspace
from cuda_agent.env.config import EvalConfig
from cuda_agent.env.result import EvalResult
from cuda_agent.tasks import Solution, Task


@dataclass
class AgentConfig:
    max_turns: int = 200                 # model calls; the published evaluation allows 200
    max_seconds: float | None = None     # wall-clock budget for the episode, if any
    context: ContextBudget = field(default_factory=ContextBudget)
    limits: ToolLimits = field(default_factory=ToolLimits)
    max_idle_turns: int = 3              # consecutive replies without a tool call before stopping
    send_reasoning: bool = False         # send earlier reasoning_content back to the server
    rescore: bool = True                 # re-evaluate the best candidates from a clean copy at the end

    def session_limits(self) -> SessionLimits:
        return SessionLimits(self.max_turns, self.max_seconds, self.max_idle_turns, self.limits)


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
    config = config or AgentConfig()
    root = Path(workspace_dir) if workspace_dir else Path(tempfile.mkdtemp(prefix="cuda-agent-ws-"))
    session = KernelSession(task, root, eval_config=eval_config, evaluator=evaluator, limits=config.session_limits(),
                            final_eval_config=final_eval_config, rescore=config.rescore,
                            model=getattr(client, "model", type(client).__name__),
                            driver_config={"agent": asdict(config)}, on_event=on_event)
    return Episode(session, client, config, on_event).run()


class Episode:
    """Drives one session with a chat client."""

    def __init__(self, session: KernelSession, client: ChatClient, config: AgentConfig,
                 on_event: EventHandler | None = None):
        self.session, self.client, self.config = session, client, config
        self.emit = on_event or (lambda kind, data: None)
        self.budget = config.context
        self.chars_per_token: float | None = None

    def run(self) -> EpisodeResult:
        opening = self.session.reset()   # outside the guard below: a workspace that cannot be made is the caller's
        self.tools = opening.tools
        self.context = [dict(m) for m in opening.messages]   # what the model is sent (compacted)
        stop_reason = error = None
        try:
            stop_reason, error = self._loop()
        except KeyboardInterrupt:  # stop promptly, but keep what we have
            stop_reason, error = "interrupted", "KeyboardInterrupt"
        except Exception:  # a bug of ours must not lose the trajectory
            stop_reason, error = "error", traceback.format_exc()[-4000:]
        outcome = self.session.finish(stop_reason, error)
        return EpisodeResult(outcome.trajectory, outcome.solution, outcome.result, self.session.workspace)

    def _loop(self) -> tuple[str | None, str | None]:
        """Model calls until the session is done; returns why it stopped when the session did not decide."""
        while not self.session.done:
            try:
                completion = self._complete()
            except ContextLengthError as exc:
                return "context_exceeded", str(exc)
            except ClientError as exc:
                return "client_error", str(exc)
            message = completion.message
            calls = message.get("tool_calls") or []
            self.context.append(dict(message))
            self.emit("model", {"turn": len(self.session.trajectory.turns), "seconds": completion.seconds,
                                "content": message.get("content") or "",
                                "tool_calls": [c["function"]["name"] for c in calls],
                                "prompt_tokens": completion.prompt_tokens,
                                "completion_tokens": completion.completion_tokens})
            step = self.session.step(calls, assistant=message)
            self.context.extend(dict(m) for m in step.messages)
        return None, None

    # -- one model call -------------------------------------------------------------------------

    def _complete(self) -> Completion:
        compacted = 0
        for attempt in (0, 1):
            compacted += compact(self.context, self.budget, self.chars_per_token or CHARS_PER_TOKEN)
            sent = self._outgoing()
            try:
                completion = self.client.complete(sent, self.tools)
                break
            except ContextLengthError:
                if attempt:
                    self.session.note_model_turn(compacted=compacted, failed=True)
                    raise
                # The window is smaller than the budget said: shrink the budget for the rest of
                # the episode (compaction then starts at once) and try again.
                now = estimate_tokens(self.context, self.chars_per_token or CHARS_PER_TOKEN)
                self.budget = replace(self.budget, max_tokens=int(min(self.budget.max_tokens, now) * 0.7),
                                      keep_recent=min(self.budget.keep_recent, 2))
            except ClientError:
                self.session.note_model_turn(compacted=compacted, failed=True)
                raise
        self.session.note_model_turn(seconds=completion.seconds, prompt_tokens=completion.prompt_tokens,
                                     completion_tokens=completion.completion_tokens,
                                     finish_reason=completion.finish_reason, compacted=compacted)
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
