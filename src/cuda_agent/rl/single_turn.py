"""Stage 1 (warm-up) is single-turn: one reply holds the whole solution, scored by the environment.

The prompt asks for KernelBench's single-file form (`ModelNew` building its kernels with
`load_inline`). `score` evaluates the last Python code block against the task in `extra_info` and
returns the milestone reward, or None when the evaluation failed on our side: no verdict on the reply,
so never a reward. The warm-up agent loop (`cuda_agent.rl.warmup_loop`) drops such a trajectory;
`compute_score` is the same as a verl reward function (`path=pkg://cuda_agent.rl.single_turn`,
`name=compute_score`), which cannot drop a sample: it returns score 0 and `dropped` = 1.
"""

from __future__ import annotations

import logging
import re

from cuda_agent.env.reward import PERCENT
from cuda_agent.rl.episode import EpisodeSettings, eval_config, evaluator, task_from_info
from cuda_agent.tasks import Solution, Task

logger = logging.getLogger(__name__)

SYSTEM = """\
You are an expert GPU performance engineer. Rewrite the given PyTorch program with custom CUDA kernels \
so that it is faster and numerically equivalent.

Rules (the environment enforces them):
- Define `ModelNew` with the same constructor arguments and parameters as `Model`.
- Build your kernels with torch.utils.cpp_extension.load_inline; ModelNew.forward may only allocate \
tensors and call them (no torch compute; C++ may call cuBLAS/cuDNN).
- Correct means equal to the reference within atol=rtol=1e-2 on fresh random inputs.
- Goal: correct and taking more than {margin} less time than torch.compile.

Reply with the complete new program in one ```python code block.""".format(margin=PERCENT)

USER = "Task `{name}`:\n```python\n{code}\n```"

_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def messages(task: Task) -> list[dict]:
    return [{"role": "system", "content": SYSTEM},
            {"role": "user", "content": USER.format(name=task.name, code=task.code.strip())}]


def extract_solution(text: str) -> Solution | None:
    """The last code block that defines ModelNew, or None."""
    for block in reversed(_BLOCK.findall(text)):
        if "ModelNew" in block:
            return Solution.from_code(block)
    return None


def score(task: Task, text: str, settings: EpisodeSettings) -> float | None:
    solution = extract_solution(text)
    if solution is None:
        return -1.0
    from cuda_agent.agent.evaluators import blocking_evaluator   # the agent package: only when scoring

    config = eval_config(settings.final_eval or settings.eval)
    try:
        evaluate = blocking_evaluator(evaluator(settings.evaluator, settings.service_key()))
        result = evaluate(task, solution, config)
    except Exception:   # the service is down: no verdict
        logger.exception("warm-up evaluation failed")
        return None
    if result.error is not None and result.error.phase in ("internal", "task"):
        return None
    return float(result.reward) if result.correct and result.reward is not None else -1.0


def compute_score(data_source=None, solution_str: str = "", ground_truth=None, extra_info=None,
                  settings: str | None = None, **kwargs) -> dict:
    """verl's reward-function signature; `settings` comes from `reward_kwargs` (the stage's episode.json)."""
    loaded = EpisodeSettings.load(settings) if settings else EpisodeSettings()
    value = score(task_from_info(extra_info or {}), solution_str, loaded)
    return {"score": 0.0 if value is None else value, "dropped": float(value is None)}
