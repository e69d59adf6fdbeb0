"""What an RL episode runs under, and the `KernelSession` that runs it.

Both trainers (verl's agent loop, TRL's environment) drive one `KernelSession` per trajectory and
talk to it only through its surface (reset/step/finish and their async forms). The settings travel
as a small JSON file, because verl builds agent loops and reward functions inside Ray workers from
config strings, not from Python objects.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from cuda_agent.tasks import Task

SESSION = "cuda_agent.agent:KernelSession"


@dataclass
class EpisodeSettings:
    eval: dict = field(default_factory=dict)         # EvalConfig fields for compile/verify/profile
    final_eval: dict | None = None                   # ... for the final clean evaluation (default: eval)
    evaluator: str | None = None                     # "module:factory" -> the evaluation service; None: see service
    service: dict | None = None                      # placement of the Ray evaluation service (rl.evaluation);
                                                     # None and no evaluator: evaluate in the rollout's process
    limits: dict = field(default_factory=dict)       # SessionLimits fields
    tools: list[str] | None = None                   # tool names; None: those of `cuda-agent solve`
    workspace_root: str | None = None                # per-trajectory workspaces go here (default: temp dir)
    keep_workspaces: bool = False
    trajectories: str | None = None                  # append finished trajectories (JSONL), for RFT
    episodes: str | None = None                      # append one summary line per episode (JSONL): stage metrics
    finish_seconds: float = 900.0                    # the final clean evaluation's own wall clock
    session: str = SESSION                           # "module:Class" with the KernelSession surface

    @classmethod
    def from_dict(cls, data: dict) -> "EpisodeSettings":
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown episode settings: {', '.join(sorted(unknown))}")
        return cls(**data)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "EpisodeSettings":
        return cls.from_dict(json.loads(Path(path).read_text()))

    def service_key(self) -> str | None:
        """`service` as a hashable key (one client per process and placement)."""
        return json.dumps({"placement": self.service, "eval": self.eval}, sort_keys=True) if self.service else None

    def dump(self, path: str | os.PathLike) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=2) + "\n")
        return path


def load_object(spec: str) -> Any:
    """`package.module:name` (or `package.module.name`) -> the object."""
    module, _, name = spec.partition(":") if ":" in spec else spec.rpartition(".")
    return getattr(importlib.import_module(module), name)


@lru_cache(maxsize=None)
def evaluator(spec: str | None, service: str | None = None):
    """One evaluator per process (a pool or Ray-actor client is expensive to build): the factory
    named by `spec` is called once, with no arguments; else the Ray evaluation service placed as
    `service` says (`EpisodeSettings.service_key()`); else None (evaluate in this process)."""
    if spec:
        return load_object(spec)()
    if service:
        from cuda_agent.rl.evaluation import service_client

        return service_client(service)
    return None


def eval_config(fields: dict | None):
    from cuda_agent.env.config import EvalConfig

    if fields is None:
        return None
    fields = dict(fields)
    if "cache_dir" in fields:
        fields["cache_dir"] = Path(fields["cache_dir"])
    return EvalConfig(**fields)


def tools(names: list[str] | None):
    from cuda_agent.agent.tools import AGENT_TOOLS, registry

    if names is None:
        return None
    known = registry(AGENT_TOOLS)
    missing = [n for n in names if n not in known]
    if missing:
        raise ValueError(f"unknown tools: {', '.join(missing)}")
    return tuple(known[n] for n in names)


def limits(session_spec: str, fields: dict):
    """The session's limits object (`SessionLimits`, from where the session is imported), built by
    field name from the settings: no field is guessed here."""
    module = session_spec.partition(":")[0] if ":" in session_spec else session_spec.rpartition(".")[0]
    if not fields:
        return None
    fields = dict(fields)
    if isinstance(fields.get("tools"), dict):   # nested ToolLimits, by field name too
        fields["tools"] = load_object(f"{module}:ToolLimits")(**fields["tools"])
    return load_object(f"{module}:SessionLimits")(**fields)


def task_from_info(info: dict) -> Task:
    """The task a dataset row carries in `extra_info` (see `cuda_agent.rl.data`)."""
    return Task(name=str(info["task_name"]), code=str(info["task_code"]), origin=str(info.get("task_origin") or ""))


def open_session(task: Task, workspace_dir: str | os.PathLike, settings: EpisodeSettings):
    cls = load_object(settings.session)
    kwargs: dict[str, Any] = {"eval_config": eval_config(settings.eval),
                              "final_eval_config": eval_config(settings.final_eval),
                              "evaluator": evaluator(settings.evaluator, settings.service_key()), "tools": tools(settings.tools)}
    made = limits(settings.session, settings.limits)
    if made is not None:
        kwargs["limits"] = made
    return cls(task, workspace_dir, **kwargs)


def workspace_dir(settings: EpisodeSettings, key: str) -> Path:
    root = Path(settings.workspace_root) if settings.workspace_root else Path(tempfile.gettempdir()) / "cuda-agent-rl"
    root.mkdir(parents=True, exist_ok=True)
    return root / key


def remove_workspace(path: Path, settings: EpisodeSettings) -> None:
    if not settings.keep_workspaces:
        shutil.rmtree(path, ignore_errors=True)


def record(outcome, settings: EpisodeSettings) -> None:
    """Append the finished trajectory for rejection fine-tuning (one write: safe across workers)."""
    if settings.trajectories and getattr(outcome, "trajectory", None) is not None:
        from cuda_agent.agent.trajectory import append_jsonl

        append_jsonl(settings.trajectories, outcome.trajectory)


def note_episode(settings: EpisodeSettings, *, stop: str, reward: float | None, turns: int, seconds: float,
                 infra_error: str | None) -> None:
    """One summary line per episode (one write: safe across workers): what the stage's metrics count."""
    if not settings.episodes:
        return
    line = json.dumps({"stop_reason": stop, "reward": reward, "dropped": reward is None, "turns": turns,
                       "seconds": seconds, "infra_error": (infra_error or None) and infra_error[-500:]})
    path = Path(settings.episodes)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def episode_stats(path: str | os.PathLike) -> dict:
    """Counts over a stage's episode lines: episodes, dropped (reward None: our failure, not the
    policy's), stop reasons, mean reward of the scored ones."""
    path = Path(path)
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []
    scored = [x["reward"] for x in lines if x["reward"] is not None]
    stops: dict[str, int] = {}
    for x in lines:
        stops[x["stop_reason"]] = stops.get(x["stop_reason"], 0) + 1
    return {"episodes": len(lines), "dropped": len(lines) - len(scored), "stop_reasons": stops,
            "mean_reward": round(sum(scored) / len(scored), 4) if scored else None}
