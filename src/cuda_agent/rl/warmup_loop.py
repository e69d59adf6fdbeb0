"""verl agent loop `cuda_agent_single_turn`: the warm-up stage's single reply, scored in the loop.

verl's `single_turn_agent` generates; this loop then scores the reply (`single_turn.score`: the last
Python block, evaluated by the stage's evaluator) and sets `reward_score`, so verl's reward function
is not needed. What a reward function cannot do is drop a sample: here a reply whose evaluation
failed on our side (service down or slow past `finish_seconds`, an internal error) and a reply the
rollout server failed to produce keep reward 0 with an all-zero mask (`skipped`), counted in the
stage's episode lines. Registered by the stage's yaml, like `cuda_agent`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, _agent_loop_registry
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from cuda_agent.rl.agent_loop import _settings
from cuda_agent.rl.episode import note_episode, task_from_info
from cuda_agent.rl.single_turn import score

NAME = "cuda_agent_single_turn"
logger = logging.getLogger(__name__)


class WarmupAgentLoop(SingleTurnAgentLoop):
    def __init__(self, *args, settings: str | dict | None = None, tools=None, name: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.settings = _settings(settings)

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        start, stop, value = time.monotonic(), "finish", None
        try:
            out = await asyncio.wait_for(super().run(sampling_params, **kwargs),
                                         self.settings.limits.get("max_seconds"))
        except Exception as exc:   # the rollout server failed: no reply to score
            logger.exception("warm-up generation failed")
            stop = "time_limit" if isinstance(exc, asyncio.TimeoutError) else "error"
            prompt = await self.ct_build_initial_tokens(list(kwargs["raw_prompt"]))
            out = AgentLoopOutput(prompt_ids=prompt, response_ids=[], response_mask=[], num_turns=1,
                                  response_logprobs=[] if sampling_params.get("logprobs") else None,
                                  metrics={}, extra_fields={"turn_scores": [], "tool_rewards": []})
        if out.response_ids:
            text = self.tokenizer.decode(out.response_ids, skip_special_tokens=True)
            task = task_from_info(kwargs["extra_info"])
            loop = asyncio.get_running_loop()
            try:
                value = await asyncio.wait_for(loop.run_in_executor(None, score, task, text, self.settings),
                                               self.settings.finish_seconds)
            except asyncio.TimeoutError:
                stop = "time_limit"
        _drop_if_unscored(out, value, self.tokenizer)
        out.extra_fields.update({"stop_reason": stop, "skipped": value is None,
                                 "reward_extra_info": {"dropped": float(value is None)}})
        note_episode(self.settings, stop=stop, reward=value, turns=1, seconds=round(time.monotonic() - start, 3),
                     infra_error=None if value is not None else f"not scored ({stop})")
        return out


def _drop_if_unscored(out: AgentLoopOutput, value: float | None, tokenizer) -> None:
    if not out.response_ids:   # one masked token: verl indexes the last response token
        out.response_ids = [tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0]
        out.response_mask = [0]
        out.response_logprobs = [0.0] if out.response_logprobs is not None else None
    if value is None:
        out.response_mask = [0] * len(out.response_mask)
    out.reward_score = 0.0 if value is None else float(value)


# verl reads the stage's yaml into the registry before it imports this module: never replace that entry.
_agent_loop_registry.setdefault(NAME, {"_target_": f"{__name__}.WarmupAgentLoop"})
