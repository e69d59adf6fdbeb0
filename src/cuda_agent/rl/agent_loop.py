"""verl agent loop `cuda_agent`: one kernel episode, token-in/token-out.

verl makes one loop instance per trajectory, so the loop owns its `KernelSession` (and so its
workspace, keyed by the request id) for all turns. Each turn: the rollout server generates from the
running token ids; verl's tool parser reads the calls; the session runs them with the tools,
SKILL.md and limits of `cuda-agent solve`; the tool messages are tokenized with verl's
continuous-token builder and appended with mask 0 (no loss, logprob 0.0). No truncation of tool
output beyond the session's own cap (verl's 256-character cut applies to `ToolAgentLoop` only).

The trajectory ends on a model token: tool output that would not leave room for another reply is
not appended, and the outcome reward (the milestone reward of the best correct solution, from the
session's final clean evaluation) sits on that last token. An infrastructure failure (reward None)
keeps the sample in the batch with reward 0 and an all-zero mask, so it trains nothing.

Register it for a run with a yaml for `actor_rollout_ref.rollout.agent.agent_loop_config_path`
(`register` only works in processes that import this module); `cuda-agent train` writes it:

    - name: cuda_agent
      _target_: cuda_agent.rl.agent_loop.KernelAgentLoop
      settings: runs/agentic/episode.json
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.experimental.agent_loop.tool_parser import ToolParser
from verl.tools.schemas import OpenAIFunctionToolSchema

from cuda_agent.rl.episode import (EpisodeSettings, open_session, record, remove_workspace, task_from_info,
                                   workspace_dir)

NAME = "cuda_agent"
logger = logging.getLogger(__name__)


@register(NAME)
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
        stop, outcome, session = "error", None, None
        try:
            session = open_session(task_from_info(kwargs["extra_info"]), ws, self.settings)
            opening = await session.areset()
            messages, schemas = list(opening.messages), opening.tools
            state.prompt_ids = self._cap_text_prompt_length(await self.ct_build_initial_tokens(messages, tools=schemas))
            state.runtime = list(state.prompt_ids)
            stop = await self._turns(session, state, messages, schemas, sampling_params, request_id, metrics)
        except Exception:  # an infrastructure failure must not lose the batch
            logger.exception("cuda_agent episode failed")
        finally:
            try:
                if session is not None:
                    outcome = await session.afinish(stop_reason=stop)
                    record(outcome, self.settings)
            except Exception:
                logger.exception("cuda_agent episode could not finish")
            remove_workspace(ws, self.settings)
        reward = getattr(outcome, "reward", None)
        return state.output(self.response_length, reward, metrics, stop)

    async def _turns(self, session, state, messages, schemas, sampling_params, request_id, metrics) -> str:
        parser_tools = [OpenAIFunctionToolSchema.model_validate(s) for s in schemas]
        for turn in range(1, self.max_turns + 1):
            budget = self.response_length - len(state.mask)
            if budget <= 0:
                return "response_length"
            start = time.perf_counter()
            out = await self.server_manager.generate(request_id=request_id, prompt_ids=state.runtime,
                                                     sampling_params={**sampling_params, "max_tokens": budget})
            metrics["generate_sequences"] += time.perf_counter() - start
            merge, state.mask, logprobs = await self.ct_merge_assistant_token(
                state.runtime, out.token_ids, state.mask, state.logprobs,
                assistant_logprobs=out.log_probs if state.logprobs is not None else None)
            state.runtime, state.logprobs = merge.token_ids, logprobs
            state.turns += 1
            content, calls = await self.tool_parser.extract_tool_calls(out.token_ids, parser_tools)
            assistant = _assistant_message(content, calls, turn, self.tokenizer)
            start = time.perf_counter()
            step = await session.astep(assistant.get("tool_calls") or [], assistant=assistant)
            metrics["tool_calls"] += time.perf_counter() - start
            if step.done:
                return "finish"
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


class _State:
    """The running token stream; the response is its tail after the prompt."""

    def __init__(self, want_logprobs: bool):
        self.prompt_ids: list[int] = []
        self.runtime: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] | None = [] if want_logprobs else None   # all samples or none
        self.turns = self.tool_turns = 0

    def output(self, response_length: int, reward: float | None, metrics: dict, stop: str) -> AgentLoopOutput:
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
        return AgentLoopOutput(
            prompt_ids=self.runtime[: len(self.runtime) - n] if n else list(self.runtime),
            response_ids=response, response_mask=mask, response_logprobs=logprobs,
            reward_score=0.0 if skipped else float(reward),
            num_turns=1 + self.turns + self.tool_turns,
            metrics=metrics, extra_fields={"stop_reason": stop, "skipped": skipped})


def _assistant_message(content: str, calls, turn: int, tokenizer) -> dict:
    for token in tokenizer.all_special_tokens:   # the parser decodes with special tokens kept
        content = content.replace(token, "")
    message: dict = {"role": "assistant", "content": content.strip()}
    if calls:
        message["tool_calls"] = [{"id": c.tool_call_id or f"call_{turn}_{i}", "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}}
                                 for i, c in enumerate(calls)]
    return message


def _settings(value) -> EpisodeSettings:
    if value is None:
        return EpisodeSettings()
    if isinstance(value, str):
        return EpisodeSettings.load(value)
    if not isinstance(value, dict):   # an OmegaConf node from the yaml
        from omegaconf import OmegaConf

        value = OmegaConf.to_container(value, resolve=True)
    return EpisodeSettings.from_dict(value)
