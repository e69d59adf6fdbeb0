"""A worker's environment (isolation.worker_env): one CPU thread per GPU worker unless the harness
says otherwise, one hardware queue for a GPU judge's context, the CPU workers' settings unchanged."""

from cuda_agent.env.infra.isolation import CPU_WORKER_ENV, start_worker, worker_env
from cuda_agent.env.workers.heap_fill import FILL_BYTE


def test_a_gpu_judge_gets_one_hardware_queue_and_its_candidate_keeps_the_default():
    judge = worker_env("judge", "cuda", 0, {})
    candidate = worker_env("candidate", "cuda", 0, {})
    assert judge["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in candidate   # streams of its own still run side by side
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in worker_env("judge", "cpu", None, {})


def test_gpu_workers_get_one_cpu_thread_unless_the_harness_environment_names_another_count():
    for role in ("judge", "candidate"):
        env = worker_env(role, "cuda", 0, {})
        assert (env["OMP_NUM_THREADS"], env["MKL_NUM_THREADS"]) == ("1", "1")
        mine = worker_env(role, "cuda", 0, {"OMP_NUM_THREADS": "6"})
        assert (mine["OMP_NUM_THREADS"], mine["MKL_NUM_THREADS"]) == ("6", "6")


def test_cpu_workers_keep_their_one_thread_whatever_the_harness_environment_says():
    for role in ("judge", "candidate"):
        env = worker_env(role, "cpu", None, {"OMP_NUM_THREADS": "6"})
        assert all(env[key] == value for key, value in CPU_WORKER_ENV.items())
        assert env["CUDA_VISIBLE_DEVICES"] == ""


def test_only_the_candidate_starts_with_the_heap_fill():
    """The judge times eager without the fill; the candidate's worker starts with it and sets it per
    call (workers.heap_fill)."""
    for backend in ("cpu", "cuda"):
        assert "MALLOC_PERTURB_" not in worker_env("judge", backend, None, {})
        assert worker_env("candidate", backend, None, {})["MALLOC_PERTURB_"] == str(FILL_BYTE)


def test_a_started_gpu_judge_has_these_settings_in_its_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_FORK_JUDGES", "0")   # a started process: its environment is readable
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("CUDA_AGENT_LOCK_DIR", str(tmp_path / "locks"))
    worker = start_worker("judge", tmp_path / "job", "cuda", 0)
    try:
        raw = open(f"/proc/{worker.proc.pid}/environ", "rb").read().decode()
        environ = dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)
        assert environ["CUDA_DEVICE_MAX_CONNECTIONS"] == "1" and environ["OMP_NUM_THREADS"] == "1"
    finally:
        worker.kill()
