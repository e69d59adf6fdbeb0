"""verl agent loop `cuda_agent`: one kernel episode, token-in/token-out.

verl makes one loop instance per trajectory, so it owns its `KernelSession` (workspace keyed by the
request id) for all turns: the rollout server generates, verl's tool parser reads the calls, the
session runs them as `cuda-agent solve` would, and their messages go in with mask 0 (cut only by the
session's cap). The trajectory ends on a model token (tool output leaving no room for a reply is not
appended), which carries the outcome reward. Failures of
ours (rollout server, evaluator, an episode past `limits.max_seconds`, enforced here since a tool call
in a worker thread cannot be interrupted; an infrastructure failure) never fail the group: the sample
is `skipped`, reward 0 and an all-zero mask, at least one token (verl indexes the last one).

`cuda-agent train` registers it with a yaml for `actor_rollout_ref.rollout.agent.agent_loop_config_path`:

    - name: cuda_agent
      _target_: cuda_agent.rl.agent_loop.KernelAgentLoop
      settings: runs/agentic/episode.json

verl reads that yaml when the worker starts but imports this module only for the first trajectory,
so the import registers the bare name only where none is (never replacing the yaml's `settings`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, _agent_loop_registry
from verl.experimental.agent_loop.tool_parser import ToolParser
from verl.tools.schemas import OpenAIFunctionToolSchema

from cuda_agent.rl.episode import (EpisodeSettings, note_episode, open_session, record, remove_workspace,
                                   task_from_info, workspace_dir)

NAME = "cuda_agent"
logger = logging.getLogger(__name__)


class KernelAgentLoop(AgentLoopBase):
    def __init__(self, *args, settings: str | dict | None = None, tools=None, name: str | None = None, **kwargs):
        # `tools` is verl's own tool list (for ToolAgentLoop): ours come from the session.
        super().__init__(*args, **kwargs)
        self.settings = _settings(settings)
        self.response_length = self.rollout_config.response_length
        multi_turn = self.rollout_config.multi_turn
        # verl reads max_assistant_turns only in ToolAgentLoop; the same key bounds our episodes.
        self.max_turns = multi_turn.max_assistant_turns or 150
        self.tool_parser = ToolParser.get_tool_parser(multi_turn.format, self.tokenizer)

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        request_id = uuid.uuid4().hex
        want_logprobs = bool(sampling_params.get("logprobs"))
        ws = workspace_dir(self.settings, request_id)
        state = _State(want_logprobs)
        metrics = {"generate_sequences": 0.0, "tool_calls": 0.0, "num_preempted": -1}
        stop, outcome, session, error = "error", None, None, None
        clock = _Clock(self.settings.limits.get("max_seconds"))
        try:
            session = open_session(task_from_info(kwargs["extra_info"]), ws, self.settings)
            opening = await session.areset()
            messages, schemas = list(opening.messages), opening.tools
            state.prompt_ids = self._cap_text_prompt_length(await self.ct_build_initial_tokens(messages, tools=schemas))
            state.runtime = list(state.prompt_ids)
            stop = await self._turns(session, state, messages, schemas, sampling_params, request_id, metrics, clock)
        except _OutOfTime:
            stop, error = "time_limit", "the episode's wall clock ran out inside a model or tool call"
        except Exception as exc:  # an infrastructure failure must not lose the batch
            logger.exception("cuda_agent episode failed")
            error = f"{type(exc).__name__}: {exc}"
        finally:
            outcome = await self._finish(session, stop, error, clock)
            remove_workspace(ws, self.settings)
        reward = getattr(outcome, "reward", None)
        note_episode(self.settings, stop=stop, reward=reward, turns=state.turns, seconds=clock.elapsed(),
                     infra_error=getattr(outcome, "infra_error", None) or (error if reward is None else None))
        return state.output(self.response_length, self.tokenizer, reward, metrics, stop)

    async def _finish(self, session, stop: str, error: str | None, clock: "_Clock"):
        """The final clean evaluation and the trajectory record. A step still running in its thread
        (the episode ran out of time inside it) leaves the session busy: the episode is dropped."""
        if session is None or clock.abandoned:
            return None
        try:
            outcome = await asyncio.wait_for(session.afinish(stop_reason=stop, error=error),
                                             self.settings.finish_seconds)
            record(outcome, self.settings)
            return outcome
        except Exception:
            logger.exception("cuda_agent episode could not finish")
            return None

    async def _turns(self, session, state, messages, schemas, sampling_params, request_id, metrics, clock) -> str:
        parser_tools = [OpenAIFunctionToolSchema.model_validate(s) for s in schemas]
        for turn in range(1, self.max_turns + 1):
            budget = self.response_length - len(state.mask)
            if budget <= 0:
                return "response_length"
            start = time.perf_counter()
            out = await clock.bound(self.server_manager.generate(
                request_id=request_id, prompt_ids=state.runtime, sampling_params={**sampling_params, "max_tokens": budget}))
            metrics["generate_sequences"] += time.perf_counter() - start
            merge, state.mask, logprobs = await self.ct_merge_assistant_token(
                state.runtime, out.token_ids, state.mask, state.logprobs,
                assistant_logprobs=out.log_probs if state.logprobs is not None else None)
            state.runtime, state.logprobs = merge.token_ids, logprobs
            state.turns += 1
            content, calls = await self.tool_parser.extract_tool_calls(out.token_ids, parser_tools)
            text = self.tokenizer.decode(out.token_ids, skip_special_tokens=False)
            assistant = _assistant_message(content, tool_calls(text, calls, turn), self.tokenizer)
            start = time.perf_counter()
            step = await clock.bound(session.astep(assistant.get("tool_calls") or [], assistant=assistant),
                                     abandon=True)
            metrics["tool_calls"] += time.perf_counter() - start
            if step.done:
                return step.stop_reason or "finish"
            if turn == self.max_turns:
                return "max_turns"
            if len(state.mask) >= self.response_length:
                return "response_length"
            previous = messages + [assistant]
            updated = previous + list(step.messages)
            merge, mask, logprobs = await self.ct_merge_context_msg(previous, updated, state.runtime, state.mask,
                                                                    state.logprobs, tools=schemas)
            if len(mask) >= self.response_length:   # no room left for a reply: end on the model's tokens
                return "response_length"
            messages[:] = updated
            state.runtime, state.mask, state.logprobs = merge.token_ids, mask, logprobs
            state.tool_turns += 1
        return "max_turns"


class _OutOfTime(Exception):
    pass


class _Clock:
    """The episode's wall clock. `bound` stops waiting for a call at the deadline; a tool call left
    running in its thread (`abandon=True`) leaves the session busy, so the episode cannot finish."""

    def __init__(self, max_seconds: float | None):
        self.start = time.monotonic()
        self.deadline = self.start + max_seconds if max_seconds else None
        self.abandoned = False

    def elapsed(self) -> float:
        return round(time.monotonic() - self.start, 3)

    async def bound(self, awaitable, abandon: bool = False):
        if self.deadline is None:
            return await awaitable
        try:
            return await asyncio.wait_for(awaitable, max(0.0, self.deadline - time.monotonic()))
        except asyncio.TimeoutError:
            self.abandoned |= abandon
            raise _OutOfTime() from None


class _State:
    """The running token stream; the response is its tail after the prompt."""

    def __init__(self, want_logprobs: bool):
        self.prompt_ids: list[int] = []
        self.runtime: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] | None = [] if want_logprobs else None   # all samples or none
        self.turns = self.tool_turns = 0

    def output(self, response_length: int, tokenizer, reward: float | None, metrics: dict, stop: str) -> AgentLoopOutput:
        n = len(self.mask)
        response = self.runtime[len(self.runtime) - n:] if n else []
        mask = list(self.mask)
        logprobs = list(self.logprobs) if self.logprobs is not None else None
        response, mask = response[:response_length], mask[:response_length]
        if logprobs is not None:
            logprobs = logprobs[:response_length]
        while mask and mask[-1] == 0:   # the reward goes on the last token: it must be the model's
            response, mask = response[:-1], mask[:-1]
            if logprobs is not None:
                logprobs = logprobs[:-1]
        skipped = reward is None
        if skipped:
            mask = [0] * len(mask)
        if not response:   # nothing was generated: one masked token (verl indexes the last one)
            skipped = True
            response, mask = [tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0], [0]
            logprobs = [0.0] if logprobs is not None else None
        prompt = self.runtime[: len(self.runtime) - n] if n else list(self.runtime)
        return AgentLoopOutput(
            prompt_ids=prompt or list(self.prompt_ids), response_ids=response, response_mask=mask,
            response_logprobs=logprobs, reward_score=0.0 if skipped else float(reward),
            num_turns=1 + self.turns + self.tool_turns,
            metrics=metrics, extra_fields={"stop_reason": stop, "skipped": skipped,
                                           # verl reports these per data source (validation: the RFT rollout)
                                           "reward_extra_info": {"dropped": float(skipped)}})


_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.S)


def tool_calls(text: str, parsed, turn: int) -> list[dict]:
    """The reply's calls in order, OpenAI format: those verl's parser read, and the `<tool_call>`
    blocks it dropped (JSON that does not parse, no name or arguments, no closing tag) with their
    raw text as arguments, so the session records them as invalid calls and the RFT filter sees them."""
    parsed, out = list(parsed), []
    for body in (b.strip() for b in _CALL.findall(text)):
        if parsed and _is_call(body):
            c = parsed.pop(0)
            out.append({"id": c.tool_call_id or f"call_{turn}_{len(out)}", "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments}})
        else:
            out.append({"id": f"call_{turn}_{len(out)}", "type": "function",
                        "function": {"name": _name_of(body), "arguments": body}})
    for c in parsed:   # a parser that reads another format than <tool_call> blocks
        out.append({"id": c.tool_call_id or f"call_{turn}_{len(out)}", "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments}})
    return out


def _is_call(body: str) -> bool:
    try:
        value = json.loads(body)
        return isinstance(value, dict) and "name" in value and "arguments" in value
    except ValueError:
        return False


def _assistant_message(content: str, calls: list[dict], tokenizer) -> dict:
    for token in tokenizer.all_special_tokens:   # the parser decodes with special tokens kept
        content = content.replace(token, "")
    content = _CALL.sub("", content)   # an unclosed block the parser left in the text
    message: dict = {"role": "assistant", "content": content.strip()}
    if calls:
        message["tool_calls"] = calls
    return message


def _name_of(body: str) -> str:
    found = re.search(r'"name"\s*:\s*"([^"]*)"', body)
    return found.group(1) if found else ""


def _settings(value) -> EpisodeSettings:
    if value is None:
        logger.warning("cuda_agent loop built without `settings` (the stage's episode.json): "
                       "default settings, no evaluator, no trajectory record")
        return EpisodeSettings()
    if isinstance(value, str):
        return EpisodeSettings.load(value)
    if not isinstance(value, dict):   # an OmegaConf node from the yaml
        from omegaconf import OmegaConf

        value = OmegaConf.to_container(value, resolve=True)
    return EpisodeSettings.from_dict(value)


# verl reads the stage's yaml into the registry before it imports this module: never replace that entry.
_agent_loop_registry.setdefault(NAME, {"_target_": f"{__name__}.KernelAgentLoop"})
