"""A worker runs on the GPU the harness means: the harness's index is translated through its own
CUDA_VISIBLE_DEVICES (as under Ray, whose actor sees its one GPU as index 0), for the worker's
environment and for the device lock alike."""

import time

from cuda_agent.env.infra.devices import physical_gpu
from cuda_agent.env.infra.isolation import start_worker
from cuda_agent.env.infra.locks import lock_path


def test_an_index_names_the_entry_of_the_process_s_own_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5, 7")
    assert [physical_gpu(0), physical_gpu(1), physical_gpu(None)] == ["5", "7", "5"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1b2c,GPU-9f8e")
    assert physical_gpu(1) == "GPU-9f8e"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert physical_gpu(3) == "3"   # every GPU visible: the index is the machine's own


def _environ_once_exec_done(pid: int, wait_s: float = 10.0) -> dict:
    """The process's environment once it reads back: `Popen` returns when the new program replaced the
    old, before the kernel has set up the new one's environment, which reads empty until then."""
    deadline = time.monotonic() + wait_s
    while True:
        raw = open(f"/proc/{pid}/environ", "rb").read().decode()
        if raw or time.monotonic() > deadline:
            return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)
        time.sleep(0.01)


def test_a_worker_for_index_one_is_given_the_second_visible_gpu_and_the_lock_names_it_too(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    monkeypatch.setenv("CUDA_AGENT_FORK_JUDGES", "0")   # a started process: its environment is readable
    monkeypatch.setenv("CUDA_AGENT_LOCK_DIR", str(tmp_path / "locks"))
    worker = start_worker("judge", tmp_path / "job", "cuda", 1)
    try:
        environ = _environ_once_exec_done(worker.proc.pid)
        assert environ["CUDA_VISIBLE_DEVICES"] == "7"
    finally:
        worker.kill()
    assert lock_path("cuda", 1).name == "cuda-7.lock"
