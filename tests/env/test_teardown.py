"""A killed worker's exit is reaped in the background; a task that takes much of a GPU waits for it."""

from __future__ import annotations

import subprocess
import threading
import time

from cuda_agent.env.infra import capacity, teardown
from cuda_agent.env.infra.isolation import Worker
from cuda_agent.tasks import Task


class SlowExit:
    """A real process whose reaping finishes only when `released` is set (a CUDA context's teardown)."""

    def __init__(self):
        self.real = subprocess.Popen(["sleep", "30"], stdin=subprocess.PIPE, start_new_session=True)
        self.pid, self.stdin = self.real.pid, self.real.stdin
        self.released = threading.Event()

    def poll(self):
        return self.real.poll()

    def kill(self):
        self.real.kill()

    def wait(self, timeout=None):
        self.released.wait(timeout)
        return self.real.wait(timeout)


class Channel:
    def close(self):
        pass


def _worker(proc, gpu, tmp_path):
    return Worker("candidate", proc, Channel(), tmp_path / "log", time.monotonic(), gpu=gpu)


def test_a_killed_workers_exit_is_waited_for_on_its_gpu_only(tmp_path):
    proc = SlowExit()
    worker = _worker(proc, 7, tmp_path)
    worker.kill()
    worker.kill()   # a second kill adds no second exit to wait for
    assert teardown.pending(7) == 1 and teardown.pending(6) == 0
    assert teardown.wait_gone(6, 5.0) < 0.5            # another GPU: nothing to wait for
    assert teardown.wait_gone(7, 0.3) >= 0.25          # still exiting: waits its timeout
    threading.Timer(0.2, proc.released.set).start()
    waited = teardown.wait_gone(7, 10.0)
    assert 0.1 <= waited < 5.0 and teardown.pending(7) == 0
    assert proc.real.poll() is not None                  # the process itself was killed


BIG_INPUTS = """
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2
def get_inputs():
    return [torch.randn(1 << 28)]    # 1 GiB of float32
def get_init_inputs():
    return []
"""


def test_only_a_task_that_takes_much_of_the_gpu_waits(monkeypatch):
    task = Task("big", BIG_INPUTS)
    monkeypatch.setattr(capacity, "device_available", lambda gpu=0: 8 << 30)
    assert capacity.takes_much_of_gpu(task, 5, 0)
    monkeypatch.setattr(capacity, "device_available", lambda gpu=0: 1 << 40)
    assert not capacity.takes_much_of_gpu(task, 5, 0)
    monkeypatch.setattr(capacity, "device_available", lambda gpu=0: None)   # no GPU to ask
    assert not capacity.takes_much_of_gpu(task, 5, 0)


def test_an_evaluation_of_a_large_task_waits_for_the_killed_workers(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from cuda_agent.env.run import evaluation

    proc = SlowExit()
    _worker(proc, 5, tmp_path).kill()
    threading.Timer(0.3, proc.released.set).start()
    large = SimpleNamespace(backend="cuda", gpu=5, task=Task("big", BIG_INPUTS), trace={},
                            config=SimpleNamespace(num_correct_trials=5))
    monkeypatch.setattr(capacity, "device_available", lambda gpu=0: 2 << 30)
    evaluation._Evaluation._wait_for_memory(large)
    assert large.trace["compile.teardown_wait"] >= 0.2 and teardown.pending(5) == 0

    small = SimpleNamespace(**{**vars(large), "trace": {}})   # the same task on a big GPU: no wait
    proc = SlowExit()
    _worker(proc, 5, tmp_path).kill()
    monkeypatch.setattr(capacity, "device_available", lambda gpu=0: 1 << 40)
    evaluation._Evaluation._wait_for_memory(small)
    assert "compile.teardown_wait" not in small.trace and teardown.pending(5) == 1
    proc.released.set()
    assert teardown.wait_gone(5, 10.0) < 10.0 and teardown.pending(5) == 0
