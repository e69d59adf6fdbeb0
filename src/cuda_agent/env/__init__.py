"""The evaluation environment: compile, verify, profile, reward, anti-cheating, isolation.

    from cuda_agent.env import evaluate, EvalConfig
    result = evaluate(task, solution, EvalConfig(backend="cpu"))   # EvalResult (plain data)

For many concurrent rollouts, `EvalPool` runs evaluations as asyncio calls, several in flight per GPU.
Names are imported lazily so that the worker process, which imports submodules, starts fast.
"""

from importlib import import_module

_EXPORTS = {
    "EvalConfig": "config", "default_cache_dir": "config", "detect_backend": "config",
    "EvalError": "result", "EvalResult": "result", "Timing": "result",
    "milestone_reward": "reward", "continuous_reward": "reward",
    "evaluate": "run.evaluation", "EvalPool": "infra.pool",
    "BuildError": "builds.compiler", "build_extension": "builds.compiler",
}

__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(import_module(f"cuda_agent.env.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'cuda_agent.env' has no attribute {name!r}")
