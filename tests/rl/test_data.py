"""Tasks -> verl RL parquet: columns verl reads, the task carried in extra_info, disjoint splits."""

import pyarrow.parquet as pq

from cuda_agent.rl.data import build, split
from cuda_agent.rl.episode import task_from_info
from cuda_agent.tasks import Task

CODE = """import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return x * {k}
def get_inputs():
    return [torch.randn(4)]
def get_init_inputs():
    return []
"""


def tasks(n):
    return [Task(name=f"t{k}", code=CODE.format(k=k), origin=f"data.jsonl#{k}") for k in range(n)]


def test_split_is_disjoint_deterministic_and_drops_duplicates():
    ts = tasks(20) + [Task(name="dup", code=CODE.format(k=3))]
    train, val = split(ts, 0.25, seed=1)
    assert len(train) + len(val) == 20 and len(val) == 5
    assert not {t.digest for t in train} & {t.digest for t in val}
    again = split(list(reversed(ts)), 0.25, seed=1)
    assert [t.digest for t in again[1]] == [t.digest for t in val]
    assert split(tasks(1), 0.5)[1] == []   # a single task stays in training


def test_parquet_rows_carry_the_task(tmp_path):
    stats = build(tasks(10), tmp_path, val_fraction=0.2)
    assert stats == {"tasks": 10, "unique": 10, "train": 8, "val": 2}
    rows = pq.read_table(tmp_path / "train.parquet").to_pylist()
    assert [r["extra_info"]["index"] for r in rows] == list(range(8))
    by_name = {t.name: t for t in tasks(10)}
    for r in rows:
        task = task_from_info(r["extra_info"])
        assert task.code == by_name[task.name].code and r["reward_model"]["ground_truth"] == task.digest
        assert [m["role"] for m in r["prompt"]] == ["system", "user"] and task.code.strip() in r["prompt"][1]["content"]
        assert r["data_source"] == "data" and r["extra_info"]["split"] == "train"


def test_verl_reads_it(tmp_path, tiny_model):
    """verl's own RLHFDataset loads the rows and hands the agent loop what it needs."""
    import pytest

    pytest.importorskip("verl")
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    build(tasks(3), tmp_path, val_fraction=0)
    config = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 4096, "filter_overlong_prompts": False,
                               "truncation": "error", "return_raw_chat": True})
    ds = RLHFDataset(data_files=[str(tmp_path / "train.parquet")], tokenizer=AutoTokenizer.from_pretrained(tiny_model),
                     config=config)
    item = ds[1]
    assert item["index"] == 1 and task_from_info(item["extra_info"]).name == "t1"
    assert item["raw_prompt"][0]["role"] == "system"


def test_cli_writes_the_splits(tmp_path):
    import json

    from typer.testing import CliRunner

    from cuda_agent.cli import app

    data = tmp_path / "tasks.jsonl"
    data.write_text("".join(json.dumps({"code": t.code, "name": t.name}) + "\n" for t in tasks(6)))
    result = CliRunner().invoke(app, ["rl", "data", "--dataset", str(data), "--out", str(tmp_path / "rl"),
                                      "--val-fraction", "0.34"])
    assert result.exit_code == 0, result.output
    assert "4 train + 2 val" in result.output
    assert json.loads((tmp_path / "rl" / "stats.json").read_text())["val"] == 2


def test_session_limits_come_from_the_session_module():
    from cuda_agent.rl.episode import limits

    from .conftest import SESSION

    made = limits(SESSION, {"max_idle_turns": 1})
    assert type(made).__name__ == "SessionLimits" and made.max_idle_turns == 1
    assert limits(SESSION, {}) is None
