"""Drive the `cuda_agent` loop the way verl does at scale: verl's own `AgentLoopWorker` (the v0
worker) and `AgentLoopWorkerTQ` (the v1 default, with TransferQueue replaced by an in-memory
store), fed by verl's `RLHFDataset` from our parquet, many trajectories per worker, on a scripted
token server that answers every trajectory from its own copy of the script.

Each run starts as a fresh Ray worker process does: `cuda_agent.rl.agent_loop` not imported yet,
so verl imports it while it builds the first trajectory.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from cuda_agent.rl.data import build
from cuda_agent.rl.episode import EpisodeSettings
from cuda_agent.rl.stages import LOOPS, compose
from cuda_agent.tasks import Task

from .test_data import CODE

LOGPROB = -0.25
LOOP_MODULES = ("cuda_agent.rl.agent_loop", "cuda_agent.rl.warmup_loop")


def call(name, **arguments):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


class ScriptServer:
    """verl's LLMServerClient.generate surface. Every request id (one trajectory) plays the script
    from its start (`scripts`: one script per trajectory, by order of first request); `fail` names
    the trajectories whose first call raises."""

    def __init__(self, tokenizer, script=(), fail=(), delay: float = 0.0, scripts=None):
        self.tokenizer, self.script, self.fail, self.delay = tokenizer, list(script), set(fail), delay
        self.scripts = [list(x) for x in scripts] if scripts else None
        self.order: dict[str, int] = {}
        self.prompts: list[tuple[list[int], dict]] = []   # every call's prompt ids and sampling params
        self.progress: dict[str, int] = {}
        self.calls = 0

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        if request_id not in self.progress:
            self.order[request_id] = len(self.progress)
            self.progress[request_id] = 0
            if self.order[request_id] in self.fail:
                raise RuntimeError("the rollout server is down")
        self.prompts.append((list(prompt_ids), dict(sampling_params)))
        turn = self.progress[request_id]
        self.progress[request_id] += 1
        self.calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        script = self.scripts[self.order[request_id] % len(self.scripts)] if self.scripts else self.script
        text = script[min(turn, len(script) - 1)]
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        ids = ids[: sampling_params.get("max_tokens", len(ids))]
        return TokenOutput(token_ids=ids, log_probs=[LOGPROB] * len(ids))


@dataclass
class Setup:
    config: object
    tokenizer: object
    dataset: object
    settings: EpisodeSettings
    folder: Path
    extra: dict = field(default_factory=dict)


def setup(tmp_path: Path, model, settings: EpisodeSettings, *, tasks: int = 1, n: int = 8,
          response_length: int = 2048, max_turns: int = 6, overrides=()) -> Setup:
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    build([Task(name=f"t{k}", code=CODE.format(k=k + 2)) for k in range(tasks)], tmp_path / "data", val_fraction=0)
    episode = settings.dump(tmp_path / "episode.json")
    (tmp_path / "loops.yaml").write_text("".join(f"- name: {name}\n  _target_: {target}\n  settings: "
                                                 f"{json.dumps(str(episode))}\n" for name, target in LOOPS.items()))
    config = compose("ppo_trainer", [
        f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.rollout.name=vllm",
        "data.max_prompt_length=4096", f"data.max_response_length={response_length}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={tmp_path / 'loops.yaml'}",
        f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={max_turns}",
        f"actor_rollout_ref.rollout.n={n}", *overrides])
    if not any(o.startswith("actor_rollout_ref.rollout.agent.default_agent_loop=") for o in overrides):
        config.actor_rollout_ref.rollout.agent.default_agent_loop = "cuda_agent"
    tokenizer = AutoTokenizer.from_pretrained(model)
    dataset = RLHFDataset(data_files=[str(tmp_path / "data" / "train.parquet")], tokenizer=tokenizer,
                          config=config.data)
    return Setup(config, tokenizer, dataset, settings, tmp_path)


def fresh_worker_process(monkeypatch) -> None:
    """As in a new Ray worker: the loop's module is imported by verl, not by us."""
    import cuda_agent.rl

    for module in LOOP_MODULES:
        monkeypatch.delitem(sys.modules, module, raising=False)
        # hydra looks for the attribute on the package before it imports
        monkeypatch.delattr(cuda_agent.rl, module.rpartition(".")[2], raising=False)


def rows(s: Setup, n: int) -> dict:
    """The batch verl's trainer sends: every dataset row repeated n times (rollout.n), in order."""
    from verl.utils.dataset.rl_dataset import collate_fn

    return collate_fn([s.dataset[i] for i in range(len(s.dataset)) for _ in range(n)])


def run_v0(s: Setup, server, n: int):
    """verl's v0 `AgentLoopWorker.generate_sequences` on one batch of len(dataset) * n trajectories."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto

    worker = AgentLoopWorker(s.config, server)
    batch = DataProto.from_single_dict(rows(s, n))
    start = time.perf_counter()
    out = asyncio.run(worker.generate_sequences(batch))
    return out, time.perf_counter() - start


class MemoryTQ:
    """TransferQueue's client calls that AgentLoopWorkerTQ makes, kept in memory."""

    def __init__(self):
        self.status: dict[str, str] = {}
        self.samples: dict[str, dict] = {}

    def init(self, *args, **kwargs):
        pass

    async def async_kv_put(self, key, partition_id, tag=None, **kwargs):
        self.status[key] = tag["status"]

    async def async_kv_batch_put(self, keys, fields, tags, partition_id, **kwargs):
        for i, key in enumerate(keys):
            self.samples[key] = {"fields": fields[i], "tag": tags[i]}


def run_v1(s: Setup, server, monkeypatch, validate: bool = False):
    """verl's v1 `AgentLoopWorkerTQ.generate_sequences`: one group of `rollout.n` (or val_kwargs.n)
    trajectories per prompt, results put into the (in-memory) TransferQueue."""
    import numpy as np
    from verl.trainer.ppo.v1 import agent_loop_tq
    from verl.utils import tensordict_utils as tu

    store = MemoryTQ()
    monkeypatch.setattr(agent_loop_tq, "tq", store)
    worker_cls = agent_loop_tq.AgentLoopWorkerTQ.__ray_metadata__.modified_class.__mro__[1]
    batch_dict = rows(s, 1)
    batch_dict["uid"] = np.array([uuid.uuid4().hex for _ in range(len(s.dataset))], dtype=object)

    async def go():
        worker = worker_cls(s.config, server)
        batch = tu.get_tensordict(batch_dict)
        tu.assign_non_tensor_data(batch, "global_steps", 1)
        tu.assign_non_tensor_data(batch, "validate", validate)
        start = time.perf_counter()
        await worker.generate_sequences(batch)
        while worker.background_tasks:
            await asyncio.gather(*list(worker.background_tasks))
        return time.perf_counter() - start

    seconds = asyncio.run(go())
    return store, list(batch_dict["uid"]), seconds


def records(s: Setup) -> list[dict]:
    path = Path(s.settings.trajectories)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
