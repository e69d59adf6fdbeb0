"""The shipped Ops-6K set (data/ops6k/): 6,000 tasks in the published mix, an `rl data` split with no task
in both halves, and outputs that the saved build writes again exactly, without a GPU."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path

import pytest

pq = pytest.importorskip("pyarrow.parquet")

DATA = Path(__file__).resolve().parents[2] / "data" / "ops6k"
PUBLISHED_MIX = {1: 3.4, 2: 83.8, 3: 7.6, 4: 2.8, 5: 1.2}


def test_six_thousand_tasks_in_the_published_mix_each_timed_in_the_window():
    tasks = pq.read_table(DATA / "tasks.parquet").to_pylist()
    assert len(tasks) == 6000 and len({t["code"] for t in tasks}) == 6000
    chains = Counter(len(t["ops"]) for t in tasks if t["data_source"] != "transformers")
    for length, share in PUBLISHED_MIX.items():
        assert chains[length] == round(6000 * share / 100), (length, chains)
    assert all(1.0 <= t["eager_ms"] <= 100.0 and t["device"] and t["torch"] for t in tasks)
    assert max(t["kb_similarity"] for t in tasks) <= 0.9


def test_the_rl_split_holds_every_task_once():
    train, val = (pq.read_table(DATA / "rl" / f"{half}.parquet").to_pylist() for half in ("train", "val"))
    digests = [row["reward_model"]["ground_truth"] for row in train + val]
    assert (len(train), len(val)) == (5700, 300) and len(set(digests)) == 6000


@pytest.mark.slow
def test_the_saved_build_writes_the_shipped_tasks_again(tmp_path, kernelbench):
    with tarfile.open(DATA / "build.tar.xz") as tar:
        tar.extractall(tmp_path, members=[m for m in tar.getmembers() if Path(m.name).parts[:1] == ("work",)],
                       filter="data")
    subprocess.run([sys.executable, "-m", "cuda_agent.cli", "synth", "--num", "6000", "--out", str(tmp_path),
                    "--backend", "cuda", "--seed", "0", "--kernelbench", str(kernelbench), "--write-only"],
                   check=True, capture_output=True, timeout=600)
    assert pq.read_table(tmp_path / "tasks.parquet").equals(pq.read_table(DATA / "tasks.parquet"))
