"""EvalPool pipelining: several evaluations in flight per GPU, spread over GPUs first, spare worker
pairs sized to what a GPU has in flight (a stand-in for `evaluate`; no GPU needed)."""

import asyncio
import threading

from cuda_agent.env.infra import pool as pool_module
from cuda_agent.env.config import EvalConfig
from cuda_agent.env.infra.pool import EvalPool
from cuda_agent.env.result import EvalResult
from cuda_agent.tasks import Solution, Task
from tests.gates import StartGate


class Recorder:
    def __init__(self, overlap: int):
        self.gate = StartGate(overlap)   # the first `overlap` calls surely run at once
        self.lock = threading.Lock()
        self.running: dict = {}
        self.most: dict = {}
        self.calls: list = []

    def __call__(self, task, solution, config, gpu=None):
        with self.lock:
            self.running[gpu] = self.running.get(gpu, 0) + 1
            self.most[gpu] = max(self.most.get(gpu, 0), self.running[gpu])
            self.calls.append((task.name, gpu, config.prewarm))
        self.gate.wait()
        with self.lock:
            self.running[gpu] -= 1
        return EvalResult(task=task.name, backend=config.backend)


def test_per_device_pipelining_and_prewarm(monkeypatch):
    recorder = Recorder(overlap=6)
    monkeypatch.setattr(pool_module, "evaluate", recorder)
    pool = EvalPool(EvalConfig(backend="cuda", prewarm=True), gpus=[0, 1], per_device=3, processes=False)
    assert pool.capacity == 6 and pool.slots[:2] == [0, 1]   # the first jobs go to different GPUs
    jobs = [(Task(f"t{i}", "code"), Solution.from_code("")) for i in range(12)]
    results = asyncio.run(pool.evaluate_many(jobs))
    assert [r.task for r in results] == [f"t{i}" for i in range(12)]
    assert recorder.most == {0: 3, 1: 3}
    assert {prewarm for _, _, prewarm in recorder.calls} == {9}   # 3x the evaluations in flight wait started
    gpu_of = {name: gpu for name, gpu, _ in recorder.calls}
    assert {gpu_of["t0"], gpu_of["t1"]} == {0, 1}

    cpu = EvalPool(EvalConfig(backend="cpu"), cpu_slots=2)
    assert cpu.per_device == 1 and cpu.capacity == 2
    explicit = EvalPool(EvalConfig(backend="cuda", prewarm=7), gpus=[0], per_device=2)
    assert explicit._sized(explicit.config).prewarm == 7   # more spares, when asked, stay


def test_a_pool_serves_one_event_loop_after_another(monkeypatch):
    """Two `asyncio.run` calls on one pool (a script measuring twice): the second finds its slots free
    instead of a queue bound to the first loop."""
    recorder = Recorder(overlap=1)
    monkeypatch.setattr(pool_module, "evaluate", recorder)
    pool = EvalPool(EvalConfig(backend="cuda"), gpus=[0], per_device=2)
    jobs = [(Task(f"t{i}", "code"), Solution.from_code("")) for i in range(3)]
    for _ in range(2):
        assert [r.task for r in asyncio.run(pool.evaluate_many(jobs))] == ["t0", "t1", "t2"]
    assert len(recorder.calls) == 6 and recorder.most[0] <= 2


def test_a_harness_process_per_device_evaluates_and_reports_its_death(cache_dir):
    """`processes=True`: each device's evaluations run in a spawned harness process of their own (two
    CPU slots here, as GPUs would be); real evaluations come back as results, and a process that dies
    fails what waited on it with a clear error instead of hanging the caller."""
    import os
    import signal

    import pytest

    from cuda_agent.env.infra.device_host import DeviceHostDied
    from tests.env.helpers import cpu_config, cpu_workspace, example_task

    pool = EvalPool(cpu_config(cache_dir), cpu_slots=2,
                    processes=True)
    try:
        hosts = [pool._hosts[0].process.pid, pool._hosts[1].process.pid]
        assert os.getpid() not in hosts and hosts[0] != hosts[1]
        task, solution = example_task(), cpu_workspace()
        results = asyncio.run(pool.evaluate_many([(task, solution)] * 2))
        assert [r.correct for r in results] == [True, True], [r.error for r in results]
        assert all(r.reward >= 1 for r in results)

        os.kill(hosts[0], signal.SIGKILL)
        pool._hosts[0].process.join(10)
        with pytest.raises(DeviceHostDied):
            asyncio.run(pool.evaluate(task, solution))   # device 0's slot comes first
    finally:
        pool.close()
    assert pool._hosts is None


def test_a_host_that_dies_between_the_check_and_the_send_is_reported_dead():
    """A harness process killed after `is_alive()` said yes: the send's broken pipe is the same
    `DeviceHostDied`, and nothing is left waiting for an answer."""
    import threading
    from types import SimpleNamespace

    import pytest

    from cuda_agent.env.infra.device_host import DeviceHost, DeviceHostDied

    class BrokenPipe:
        def send(self, _):
            raise BrokenPipeError(32, "Broken pipe")

    host = DeviceHost.__new__(DeviceHost)
    host.process = SimpleNamespace(is_alive=lambda: True, name="cuda-agent-device-0")
    host._conn, host._lock, host._waiting = BrokenPipe(), threading.Lock(), {}
    host._ids = iter(range(10))
    with pytest.raises(DeviceHostDied, match="not running"):
        host.submit(None, None, None)
    assert host._waiting == {}
