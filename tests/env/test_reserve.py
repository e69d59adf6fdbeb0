"""The memory a judge asks for in its set-up (env/infra/reserve.py): how much, and that its job says what to
size it by. The allocator's side (no cudaMalloc inside a held batch) is in
tests/gpu/test_reserve.py."""

from __future__ import annotations

import fcntl
import os
from dataclasses import replace

import torch

from cuda_agent.env import EvalConfig
from cuda_agent.env.infra.memory import TRANSIENT_OUTPUTS
from cuda_agent.env.infra.reserve import judge_bytes, reserve
from cuda_agent.env.run.schedule import JUDGE_BATCH
from cuda_agent.env.run.worker_run import job_footprint
from cuda_agent.env.workers.judge import GROUP_BYTES
from cuda_agent.tasks import load_task
from cuda_agent.env.infra.task_child import estimate_footprint
from tests.env.helpers import example_task

MIB = 1 << 20
SMALL = {"input_bytes": 128 * MIB, "output_bytes": 128 * MIB}   # relu(x + bias) on 8192 x 4096 floats


def test_a_batch_of_small_calls_holds_eight_draws_and_eight_outputs():
    assert judge_bytes(SMALL, batch=8, group_bytes=1 << 30) == 8 * 256 * MIB + TRANSIENT_OUTPUTS * 128 * MIB


def test_the_group_limit_decides_for_large_inputs():
    # 300 MiB inputs: the judge's group stops once 1 GiB is drawn, at the fourth call
    large = {"input_bytes": 300 * MIB, "output_bytes": 10 * MIB}
    assert judge_bytes(large, batch=8, group_bytes=1 << 30) == 4 * 310 * MIB + TRANSIENT_OUTPUTS * 10 * MIB
    # inputs beyond the limit: one call at a time
    huge = {"input_bytes": 3 << 30, "output_bytes": MIB}
    assert judge_bytes(huge, batch=8, group_bytes=1 << 30) == (3 << 30) + MIB + TRANSIENT_OUTPUTS * MIB


def test_an_unknown_output_counts_as_large_as_the_inputs_and_no_footprint_asks_for_nothing():
    assert judge_bytes({"input_bytes": 64 * MIB, "output_bytes": None}, 2, 1 << 30) == \
        judge_bytes({"input_bytes": 64 * MIB, "output_bytes": 64 * MIB}, 2, 1 << 30)
    assert judge_bytes(None, 8, 1 << 30) == 0
    assert judge_bytes({"input_bytes": 0, "output_bytes": 0}, 8, 1 << 30) == 0


def test_nothing_is_set_aside_on_the_cpu():
    assert reserve(torch.device("cpu"), 1 << 30) == 0


def test_the_judges_job_sizes_it_by_the_tasks_footprint(kernelbench):
    task = load_task("level1/19", kernelbench)
    found = job_footprint(task)
    measured = estimate_footprint(task)   # 19_ReLU: one tensor in, one of the same size out
    assert found == {"input_bytes": measured.input_bytes, "output_bytes": measured.output_bytes}
    assert found["input_bytes"] == found["output_bytes"] > 0
    assert judge_bytes(found, JUDGE_BATCH, GROUP_BYTES) > 0


def test_the_judge_asks_for_its_memory_inside_its_set_ups_shared_hold(tmp_path, monkeypatch):
    """Memory asked for without the lock slowed other evaluations' timed calls (reserve.py): the
    judge asks for it while it holds the device's lock, which another holder then cannot take alone."""
    from cuda_agent.env.workers import judge
    from cuda_agent.env.workers.messages import JudgeJob

    lock = tmp_path / "cpu.lock"
    asked = []

    def recording_reserve(device, nbytes, call_bytes=0):
        probe = os.open(lock, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            asked.append(("lock free", nbytes))
        except BlockingIOError:
            asked.append(("lock held", nbytes))
        finally:
            os.close(probe)   # lets go of the probe's lock too, if it got it
        return 0

    monkeypatch.setattr(judge, "reserve", recording_reserve)
    task = example_task()
    footprint = {"input_bytes": 1 << 20, "output_bytes": 1 << 18}
    judge._Judge(JudgeJob(config=replace(EvalConfig(backend="cpu"), seed=1), box=str(tmp_path), backend="cpu",
                          task_code=task.code, task_name=task.name, lock=str(lock), footprint=footprint, batch=8),
                 staging=None)
    assert asked == [("lock held", judge_bytes(footprint, 8, GROUP_BYTES))]
