"""The CPU core kept for timing (cores.py): the plan, the switch, and an evaluation that uses them."""

import os
import re
import threading

import pytest

from cuda_agent.env import evaluate
from cuda_agent.env.cores import CorePlan, core_plan, on_timing_core, physical_cores, plan_for
from cuda_agent.tasks import load_task
from tests.env.helpers import EXAMPLES, cpu_config, cpu_workspace


def smt_siblings(cpu: int) -> set[int]:
    """16 CPUs, 8 physical cores: CPU i and i + 8 share one (a common cloud layout)."""
    return {cpu % 8, cpu % 8 + 8}


def test_each_gpu_keeps_one_whole_physical_core_and_the_rest_is_shared():
    assert physical_cores(range(16), smt_siblings)[0] == {0, 8}
    one = core_plan(range(16), gpu=0, gpus=1, siblings=smt_siblings)
    assert one.timing == {7, 15} and one.others == set(range(16)) - {7, 15}
    first, second = (core_plan(range(16), gpu=g, gpus=2, siblings=smt_siblings) for g in (0, 1))
    assert first.timing == {7, 15} and second.timing == {6, 14}
    assert first.others == second.others == set(range(16)) - {6, 7, 14, 15}   # no GPU's core is shared
    # siblings outside the allowed CPUs are not ours to keep
    assert core_plan([0, 1, 2, 3, 8], gpu=0, gpus=1, siblings=smt_siblings).timing == {3}


def test_no_core_is_kept_where_the_rest_of_the_work_would_be_starved():
    no_smt = lambda cpu: {cpu}   # noqa: E731
    assert core_plan(range(4), gpu=0, gpus=1, siblings=no_smt).others == {0, 1, 2}
    assert core_plan(range(3), gpu=0, gpus=1, siblings=no_smt) is None            # 2 left: under 3 per GPU
    assert core_plan(range(7), gpu=0, gpus=2, siblings=no_smt) is None            # 5 left for 2 GPUs
    assert core_plan(range(8), gpu=1, gpus=2, siblings=no_smt).timing == {6}       # 6: 3 each
    assert core_plan(range(2), gpu=0, gpus=1, min_other_cores=1, siblings=no_smt).timing == {1}
    assert core_plan(range(16), gpu=2, gpus=2, siblings=no_smt) is None           # no such GPU


def test_the_plan_travels_in_the_environment_and_a_bad_one_is_ignored():
    plan = CorePlan(timing=frozenset({7, 15}), others=frozenset(range(7)))
    assert CorePlan.from_env(plan.to_env()) == plan
    for bad in (None, "", "7;", ";1,2", "a;b", "1,2"):
        assert CorePlan.from_env(bad) is None


def test_the_setting_decides_where_a_core_is_kept():
    assert plan_for("off", "cuda", 0) is None
    assert plan_for("auto", "cpu", None) is None   # the CPU backend's kernels need every core
    if len(os.sched_getaffinity(0)) >= 2:
        forced = plan_for("on", "cpu", None)
        assert forced is not None and forced.timing and not forced.timing & forced.others


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_the_calling_thread_moves_to_the_timing_core_for_the_block_only():
    cpus = sorted(os.sched_getaffinity(0))
    plan = CorePlan(timing=frozenset(cpus[-1:]), others=frozenset(cpus[:-1]))
    seen = []

    def thread():   # a thread of its own: the test process keeps its affinity
        os.sched_setaffinity(0, plan.others)
        with on_timing_core(plan):
            seen.append(os.sched_getaffinity(0))
        seen.append(os.sched_getaffinity(0))
        with pytest.raises(ZeroDivisionError), on_timing_core(plan):
            1 / 0
        seen.append(os.sched_getaffinity(0))

    worker = threading.Thread(target=thread)
    worker.start()
    worker.join()
    assert seen == [plan.timing, plan.others, plan.others]
    assert on_timing_core(None).__enter__() is None   # no plan: nothing moves


AFFINITY_LINE = "print('cpus=' + ','.join(map(str, sorted(os.sched_getaffinity(0)))), flush=True)"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_timed_calls_of_both_workers_run_on_the_kept_core_and_nothing_else_does(cache_dir, tmp_path):
    """With a core kept (forced on the CPU backend), the candidate starts on the other cores, and
    its forward runs on the kept core exactly in the timed calls; the judge's reference likewise."""
    seen_by_judge = tmp_path / "judge_cpus.txt"
    task_code = (EXAMPLES / "model.py").read_text().replace(
        "        return torch.relu(x + self.bias)",
        f"        with open({str(seen_by_judge)!r}, 'a') as fh:\n"
        "            import os, threading\n"
        "            fh.write(','.join(map(str, sorted(os.sched_getaffinity(0)))) + ' %d %s\\n' % (os.getpid(), threading.current_thread().name))\n"
        "        return torch.relu(x + self.bias)")
    task_file = tmp_path / "model.py"
    task_file.write_text(task_code)
    model_new = "import os\n" + (EXAMPLES / "solution_cpu" / "model_new.py").read_text()
    model_new = model_new.replace("        super().__init__()\n", f"        super().__init__()\n        {AFFINITY_LINE}\n")
    model_new = model_new.replace("    def forward(self, x):\n", f"    def forward(self, x):\n        {AFFINITY_LINE}\n")
    config = cpu_config(cache_dir, timing_core="on", sandbox="none" if not _bwrap() else "auto")
    plan = plan_for("on", "cpu", None)
    result = evaluate(load_task(task_file), cpu_workspace(model_new=model_new), config)
    assert result.correct, result.error
    timing, others = ",".join(map(str, sorted(plan.timing))), ",".join(map(str, sorted(plan.others)))
    candidate = re.findall(r"^cpus=([\d,]+)$", result.log, re.M)
    assert candidate[0] == others                       # __init__, before any call
    assert set(candidate) == {timing, others}
    # every timed call (and warm-up and spot check: they look the same) on the kept core; the
    # verification calls (7 input sets) on the others
    assert candidate.count(others) >= 1 + 7 and candidate.count(timing) >= result.timings["kernel"].iters
    # the judge's runs of the reference (the harness's own, in this process, aside)
    judge = [line.split()[0] for line in seen_by_judge.read_text().splitlines() if line.split()[1] != str(os.getpid())]
    assert set(judge) == {timing, others} and judge.count(timing) >= result.timings["eager"].iters


def _bwrap() -> bool:
    from cuda_agent.env.sandbox import sandbox_available

    return sandbox_available()[0]
