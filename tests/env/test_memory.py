"""One memory model for an evaluation (env/infra/memory.py): the capacity check, the judge's reserve
and bench's admission read the same figures for the same task."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

from cuda_agent.bench.memory import AdmittedEvaluator, evaluation_need, footprints, measurement_need
from cuda_agent.bench.selection import BenchTask
from cuda_agent.env import EvalConfig
from cuda_agent.env.infra.capacity import needed_bytes, too_large
from cuda_agent.env.infra.memory import (COMPARE_PART, CONTEXTS, POISON_FILL, evaluation_memory,
                                         measurement_memory, on_device_slot)
from cuda_agent.env.infra.reserve import judge_bytes
from cuda_agent.env.run.schedule import JUDGE_BATCH
from cuda_agent.env.run.worker_run import job_footprint
from cuda_agent.env.workers.judge import GROUP_BYTES
from cuda_agent.tasks import load_task
from cuda_agent.env.infra.task_child import estimate_footprint
from cuda_agent.tasks.footprint import Footprint
from tests.env.helpers import example_task

MIB = 1 << 20


def tasks(kernelbench):
    """The example (weights of 4 KB), 19_ReLU (6.4 GB in, 6.4 GB out) and a level-2 task with weights."""
    return [example_task(), load_task("level1/19", kernelbench), load_task("level2/1", kernelbench)]


def test_the_model_counts_each_holder_once():
    fp = Footprint(input_bytes=100 * MIB, output_bytes=10 * MIB, param_bytes=MIB)
    gpu = evaluation_memory(fp, "cuda", trials=5)
    # the judge: weights, a timed call's two draws with their outputs (eager, torch.compile)
    assert gpu.judge_device == MIB + 2 * (100 * MIB + 10 * MIB)
    # the candidate: weights, inputs and their pristine copy, the output and its snapshot
    assert gpu.candidate_device == MIB + 2 * 100 * MIB + 2 * 10 * MIB and gpu.staging == 10 * MIB
    assert (gpu.judge_host, gpu.candidate_host) == (0, 0) and gpu.host == 10 * MIB
    cpu = evaluation_memory(fp, "cpu", trials=5)
    assert cpu.device == 0 and cpu.host == gpu.host + gpu.device   # the same bytes, all in host memory
    assert gpu.admission == gpu.device + CONTEXTS + POISON_FILL
    assert evaluation_memory(fp, "cuda", trials=50) == gpu   # references are computed when compared
    assert measurement_memory(fp) == MIB + 100 * MIB + 2 * 10 * MIB + (1 << 30)


def test_a_comparison_of_a_large_output_takes_a_part_beside_it():
    fp = Footprint(input_bytes=MIB, output_bytes=1 << 30, param_bytes=0)
    gpu = evaluation_memory(fp, "cuda", trials=5)
    assert gpu.judge_device == 2 * (1 << 30) + COMPARE_PART   # the reference, the candidate's copy, a part


def test_outputs_larger_than_a_staging_slot_pass_on_the_device(kernelbench):
    """6 GiB in, 6 GiB out (level1/19): the candidate's snapshot is written into the judge's device
    slot (counted once, with the judge), nothing is staged in host memory; the whole evaluation fits an
    80 GB H100 with the capacity check's headroom, and bench admits it alone on one."""
    from cuda_agent.bench.memory import USABLE
    from cuda_agent.env.infra.capacity import HEADROOM

    relu = estimate_footprint(load_task("level1/19", kernelbench))
    six = 6 << 30
    assert on_device_slot(relu, "cuda") and not on_device_slot(relu, "cpu")
    gpu = evaluation_memory(relu, "cuda", trials=5)
    assert gpu.candidate_device == 3 * six and gpu.judge_device == 4 * six + six and gpu.host == 0
    cpu = evaluation_memory(relu, "cpu", trials=5)
    assert cpu.staging == six and cpu.candidate_host == 4 * six   # files and snapshots, as before
    h100 = 85_520_809_984   # torch.cuda.get_device_properties(0).total_memory of an H100 80GB HBM3
    for name in ("level1/19", "level1/36", "level1/38", "level1/39", "level1/47"):
        need = evaluation_memory(estimate_footprint(load_task(name, kernelbench)), "cuda", trials=5)
        assert need.device <= HEADROOM * h100 and need.admission <= USABLE * h100, name
    assert not on_device_slot(Footprint(MIB, 1 << 30, 0), "cuda")   # a staging slot's size still stages
    l2norm = load_task("level1/39", kernelbench)    # the largest: 8 GiB in, 8 GiB out
    assert too_large(l2norm, "cuda", 5, host=128 << 30, device=h100) is None
    assert "GPU memory" in too_large(l2norm, "cuda", 5, host=128 << 30, device=h100 * 3 // 4)


def test_unknown_output_counts_as_the_inputs_and_unknown_weights_as_none():
    known = evaluation_memory(Footprint(64 * MIB, 64 * MIB, 0), "cuda", 5)
    assert evaluation_memory(Footprint(64 * MIB, None, None), "cuda", 5) == known


def test_the_three_users_agree_on_each_task(kernelbench, tmp_path):
    """Same task, same figures: the capacity check's bytes, the judge's reserve, bench's reservations."""
    config = EvalConfig(backend="cuda")
    trials = config.num_correct_trials
    listed = tasks(kernelbench)
    # read in child processes side by side, as bench reads them: two, so each task's answer must
    # come back to its own key across the children
    bench = footprints([BenchTask(f"t/{i}", "t", i, t) for i, t in enumerate(listed)], processes=2,
                        cache=tmp_path)
    for i, task in enumerate(listed):
        fp = estimate_footprint(task)
        assert bench[f"t/{i}"] == fp
        model = evaluation_memory(fp, "cuda", trials)
        need = needed_bytes(fp, "cuda", trials)
        assert (need.host, need.device) == (model.host, model.device)
        assert judge_bytes(job_footprint(task), JUDGE_BATCH, GROUP_BYTES) == model.reserve(JUDGE_BATCH, GROUP_BYTES) > 0
        assert evaluation_need(fp, config) == model.admission
        assert measurement_need(fp) == measurement_memory(fp)
    assert evaluation_need(None, config) is None and measurement_need(None) is None


def test_bench_admission_reserves_the_models_figure():
    """What an admitted evaluation asks of its GPU's budget is the model's admission, with the trials
    of the configuration it runs under."""
    task = example_task()
    fp = estimate_footprint(task)
    asked = []

    class Budget:
        budget = 1 << 40

        @asynccontextmanager
        async def reserved(self, amount):
            asked.append(amount)
            yield

    class Inner:
        async def evaluate(self, task, solution, config=None):
            return "done"

    large = Footprint(6 << 30, 6 << 30, 0)
    admitted = AdmittedEvaluator(Inner(), Budget(), {task.digest: fp, "large": large}, slots=4)
    for trials in (5, 20):
        assert asyncio.run(admitted.evaluate(task, None, EvalConfig(num_correct_trials=trials))) == "done"
    task_large = type("T", (), {"digest": "large"})()
    assert asyncio.run(admitted.evaluate(task_large, None, EvalConfig())) == "done"
    assert asked == [evaluation_memory(fp, "cuda", 5).admission, evaluation_memory(fp, "cuda", 20).admission,
                     evaluation_memory(large, "cuda", 5).admission]
    assert asked[2] > asked[0]

