"""The process pool pins timeouts and crashes on the task that caused them and keeps going."""

from __future__ import annotations

import os
import re
import signal
import sys
import time

import pytest

from cuda_agent.synth.workers import PEAK_FIELD, RSS_FIELD, ProcessPool, RayPool


def _work(payload: dict) -> dict:
    if payload["what"] == "sleep":
        time.sleep(60)
    if payload["what"] == "crash":
        os.abort()
    if payload["what"] == "die":   # as the kernel's out-of-memory kill does
        os.kill(os.getpid(), signal.SIGKILL)
    return {"id": payload["id"], "ok": True, "reason": "", "pid": os.getpid()}


def _drain(pool, jobs):
    results, queue = {}, list(jobs)
    deadline = time.monotonic() + 60
    while (queue or pool.busy()) and time.monotonic() < deadline:
        while queue and pool.free():
            key, payload = queue.pop(0)
            pool.submit(key, payload)
        for key, result in pool.wait(0.2):
            results[key] = result
    return results


def test_time_spent_in_earlier_runs_counts_against_the_timeout():
    """A task resumed with 58 of its 60 s already spent is killed about 2 s in, and while it runs the
    pool reports its time with the earlier runs' included (what a stopped run journals)."""
    pool = ProcessPool(_work, workers=1, timeout_s=60.0)
    try:
        pool.submit("long", {"id": "long", "what": "sleep"}, spent_s=58.0)
        [(key, seconds)] = pool.running_seconds()
        assert key == "long" and 58.0 <= seconds < 59.0
        started, results = time.monotonic(), []
        while not results and time.monotonic() - started < 30:
            results = pool.wait(0.2)
    finally:
        pool.shutdown()
    assert results[0][1]["reason"] == "timeout"
    assert time.monotonic() - started < 10
    assert pool.running_seconds() == []


def test_timeout_and_crash_are_recorded_and_the_pool_survives():
    pool = ProcessPool(_work, workers=2, timeout_s=3.0)
    try:
        jobs = [(k, {"id": k, "what": w}) for k, w in
                [("a", "ok"), ("b", "sleep"), ("c", "crash"), ("d", "ok"), ("e", "ok")]]
        results = _drain(pool, jobs)
    finally:
        pool.shutdown()
    assert results["b"]["reason"] == "timeout" and not results["b"]["ok"]
    assert results["c"]["reason"] == "crashed" and not results["c"]["ok"]
    assert results["c"]["detail"] == "the worker process died (killed by SIGABRT)"   # how, not a guess
    assert all(results[k]["ok"] for k in "ade")
    assert results["a"]["pid"] != os.getpid()          # ran in a worker process


def test_a_worker_is_replaced_after_max_tasks_and_every_result_stays_its_own():
    """Two slots, a new worker after every two tasks: each result comes back under its own key from a
    worker that ran at most two tasks, with that worker's memory; a timeout after the replacements
    still kills the task's own worker, and the pool goes on."""
    pool = ProcessPool(_work, workers=2, timeout_s=2.0, max_tasks=2)
    try:
        first_pids = {slot.pid for slot in pool.slots}
        jobs = [(f"k{i}", {"id": f"k{i}", "what": "ok"}) for i in range(7)]
        tail = [("late", {"id": "late", "what": "sleep"}), ("last", {"id": "last", "what": "ok"})]
        results = _drain(pool, jobs + tail)
        recycled = pool.recycled
    finally:
        pool.shutdown()
    assert sorted(results) == sorted([k for k, _ in jobs] + ["late", "last"])
    assert all(results[k]["id"] == k and results[k]["ok"] for k, _ in jobs + [("last", None)])
    per_worker = {}
    for k, _ in jobs:
        per_worker.setdefault(results[k]["pid"], []).append(k)
    assert max(len(keys) for keys in per_worker.values()) <= 2 and len(per_worker) >= 4
    assert set(per_worker) - first_pids            # new workers, not the first two reused
    assert recycled >= 2
    assert results["late"]["reason"] == "timeout"
    assert all(results[k][RSS_FIELD] > 0 and results[k][PEAK_FIELD] >= results[k][RSS_FIELD] for k, _ in jobs)


def test_a_worker_whose_memory_passes_the_bound_is_replaced_before_its_next_task():
    pool = ProcessPool(_work, workers=1, timeout_s=30.0, max_rss_mb=1.0)   # any worker is above 1 MiB
    try:
        results = _drain(pool, [(k, {"id": k, "what": "ok"}) for k in "abc"])
    finally:
        pool.shutdown()
    assert len({results[k]["pid"] for k in "abc"}) == 3


def test_a_worker_killed_by_sigkill_is_reported_with_the_memory_facts():
    """Not the pool's kill (that is a timeout): the detail says what is known of the memory then, so a
    run's records tell an out-of-memory kill from another."""
    from cuda_agent.synth import memory

    pool = ProcessPool(_work, workers=1, timeout_s=60.0)
    try:
        assert _drain(pool, [("a", {"id": "a", "what": "ok"})])["a"]["ok"]
        pool.submit("b", {"id": "b", "what": "sleep"})
        victim = pool.slots[0].pid
        assert pool.wait(0.7) == []                      # running (and its memory read meanwhile)
        os.kill(victim, signal.SIGKILL)
        results = _drain(pool, [("c", {"id": "c", "what": "ok"})])
    finally:
        pool.shutdown()
    detail = results["b"]["detail"]
    assert results["b"]["reason"] == "crashed"
    assert detail.startswith("the worker process died (killed by SIGKILL, not by the pool: out of memory?); ")
    assert re.search(r"its RSS [\d.]+ MiB after its last task \(1 task run\), at least [\d.]+ MiB during this one",
                     detail)
    assert re.search(r"host MemAvailable [\d.]+ [MG]iB of [\d.]+ [MG]iB, Shmem [\d.]+ [MG]iB", detail)
    if memory.cgroup_memory().get("oom_kill") is not None:
        assert re.search(r"cgroup [\d.]+ [MG]iB.*, oom_kill \d+ \(0 since the pool started\)", detail)
    assert results["c"]["ok"] and results["c"]["pid"] != victim


class _FakeActorDied(Exception):
    pass


class _FakeRef:
    def __init__(self, value=None, error=None, ready=True):
        self.value, self.error, self.ready = value, error, ready


class _FakeRay:
    """Just enough of Ray's actor API to run RayPool in this process: an actor is its instance here,
    each call's result is ready at once, and a killed actor's calls fail as Ray's do; past `placeable`
    actors, the cluster has no room: those never start."""

    class exceptions:
        RayActorError = _FakeActorDied

    def __init__(self, gpus=0, placeable=1000):
        self.gpus, self.placeable, self.options, self.created, self.killed = gpus, placeable, None, [], []

    def is_initialized(self):
        return True

    def cluster_resources(self):
        return {"CPU": 64.0, **({"GPU": float(self.gpus)} if self.gpus else {})}

    def remote(self, cls):
        ray = self

        class ActorClass:
            @staticmethod
            def options(**options):
                ray.options = options

                class Creator:
                    @staticmethod
                    def remote(*args):
                        handle = _FakeActor(cls(*args), ray, placed=len(ray.created) < ray.placeable)
                        ray.created.append(handle)
                        return handle
                return Creator
        return ActorClass

    def wait(self, refs, num_returns=1, timeout=None):
        ready = [r for r in refs if r.ready][:num_returns]
        return ready, [r for r in refs if r not in ready]

    def get(self, ref):
        if ref.error is not None:
            raise ref.error
        return ref.value

    def kill(self, handle, no_restart=True):
        self.killed.append(handle)


class _FakeActor:
    def __init__(self, instance, ray, placed):
        self.instance, self.ray, self.placed = instance, ray, placed

    def __getattr__(self, name):
        method, actor = getattr(self.instance, name), self

        class Method:
            @staticmethod
            def remote(*args):
                if not actor.placed:
                    return _FakeRef(ready=False)
                if actor in actor.ray.killed:
                    return _FakeRef(error=_FakeActorDied("the actor died"))
                try:
                    return _FakeRef(method(*args))
                except Exception as exc:  # noqa: BLE001 - as Ray hands a job's exception to ray.get
                    return _FakeRef(error=exc)
        return Method


def _maybe_fail(payload):
    if payload["what"] == "fail":
        raise RuntimeError("a bug in the job")
    return {"id": payload["id"], "ok": True}


def test_an_actor_killed_by_ray_s_memory_monitor_is_named_so(monkeypatch):
    """Ray's error for an actor its memory monitor killed: the detail says so, with the cause's text,
    not the error's first lines (the actor's class, id and pid)."""
    fake = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    pool = RayPool(_maybe_fail, workers=1, timeout_s=30, address="local")
    ray_text = ("The actor died unexpectedly before finishing this task.\n\tclass_name: _FilterActor\n"
                "\tactor_id: 852fb0c0\n\tpid: 4242\n\tip: 10.0.0.2\nThe actor is dead because its worker "
                "process has died. Worker exit type: USER_ERROR Worker exit detail: Task was killed due to the "
                "node running low on memory. Memory on the node was 120GB / 128GB (0.96), which exceeds the "
                "memory usage threshold of 0.95.")
    try:
        results = _drain(pool, [("a", {"id": "a", "what": "ok"})])
        pool.slots[0].actor.run = type("Dead", (), {"remote": staticmethod(
            lambda payload: _FakeRef(error=_FakeActorDied(ray_text)))})
        results.update(_drain(pool, [("b", {"id": "b", "what": "ok"})]))
    finally:
        pool.shutdown()
    detail = results["b"]["detail"]
    assert results["a"]["ok"] and results["b"]["reason"] == "crashed"
    assert detail.startswith("the filter actor (pid ") and "killed by Ray's memory monitor" in detail, detail
    assert "Memory on the node was 120GB / 128GB" in detail and "actor_id" not in detail, detail
    assert "after its last task (1 task run)" in detail


def test_ray_pool_interface(monkeypatch):
    """Every actor is created at once and takes jobs once it has answered; a job that raises is the
    job's error (`internal_error`) and its actor goes on; shutting down kills every actor."""
    fake = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    pool = RayPool(_maybe_fail, workers=2, timeout_s=60, address="auto")
    assert len(fake.created) == 2 and pool.free() == 0 and pool.busy() == 2
    assert pool.wait(0.1) == [] and pool.free() == 2
    results = _drain(pool, [("a", {"id": "a", "what": "ok"}), ("b", {"id": "b", "what": "fail"}),
                            ("c", {"id": "c", "what": "ok"})])
    assert results["a"]["ok"] and results["c"]["ok"] and results["a"][RSS_FIELD] > 0
    assert results["b"]["reason"] == "internal_error" and "a bug in the job" in results["b"]["detail"]
    assert len(fake.created) == 2 and not fake.killed
    pool.shutdown()
    assert fake.killed == fake.created


def test_a_ray_pool_works_with_the_actors_the_cluster_can_place(monkeypatch):
    """Three slots on a cluster with room for one actor: the pool waits while none has started, then
    works with the one (a run ends once its jobs are done, not waiting for the others); with room for
    none, the pool gives up after START_TIMEOUT_S."""
    import pytest

    from cuda_agent.synth import workers

    monkeypatch.setitem(sys.modules, "ray", _FakeRay(placeable=1))
    pool = RayPool(_maybe_fail, workers=3, timeout_s=60, address="auto")
    assert pool.free() == 0 and pool.busy() == 3       # waiting for an actor
    assert pool.wait(0.1) == [] and pool.free() == 1 and pool.busy() == 0
    results = _drain(pool, [(k, {"id": k, "what": "ok"}) for k in "ab"])
    assert results["a"]["ok"] and results["b"]["ok"] and pool.busy() == 0
    monkeypatch.setitem(sys.modules, "ray", _FakeRay(placeable=0))
    monkeypatch.setattr(workers, "START_TIMEOUT_S", 0.0)
    pool = RayPool(_maybe_fail, workers=2, timeout_s=60, address="auto")
    with pytest.raises(RuntimeError, match="no filter actor started"):
        pool.wait(0.1)


def test_ray_actors_share_the_cluster_s_gpus_as_local_workers_do(monkeypatch):
    """48 filter actors over 4 GPUs: each holds a twelfth of one (not a whole GPU, which let only four
    run at once) and a CPU, with the workers' environment; a cluster without GPUs is refused up front."""

    fake = _FakeRay(gpus=4)
    monkeypatch.setitem(sys.modules, "ray", fake)
    env = {"TORCHINDUCTOR_COMPILE_THREADS": "1"}
    pool = RayPool(_maybe_fail, workers=48, timeout_s=60, address="auto", gpu=True, env=env)
    assert pool.sharing == 12 and fake.options["num_gpus"] == 0.0833 and 12 * pool.num_gpus <= 1
    assert fake.options["num_cpus"] == 1 and fake.options["runtime_env"] == {"env_vars": env}
    assert fake.options["max_restarts"] == 0 and len(fake.created) == 48
    monkeypatch.setitem(sys.modules, "ray", _FakeRay(gpus=0))
    with pytest.raises(RuntimeError, match="no GPUs"):
        RayPool(_maybe_fail, workers=48, timeout_s=60, address="auto", gpu=True)


def test_the_workers_start_together(monkeypatch):
    """Every worker is asked to start before the pool waits for any (a spawned worker takes a second
    or more to import: started one after another, 48 of them took most of a short run)."""
    import concurrent.futures as cf

    from cuda_agent.synth import workers

    events = []

    class _Started(cf.Future):
        def result(self, timeout=None):
            events.append("wait")
            return 4242

    class _Executor:
        def __init__(self, **_options):
            pass

        def submit(self, fn, *args):
            events.append("start")
            return _Started()

    monkeypatch.setattr(workers.cf, "ProcessPoolExecutor", _Executor)
    pool = ProcessPool(_work, workers=4, timeout_s=3.0)
    assert events == ["start"] * 4 + ["wait"] * 4
    assert [slot.pid for slot in pool.slots] == [4242] * 4


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray cluster declaring 4 GPUs (Ray hands them out as CUDA_VISIBLE_DEVICES ids without
    touching a device), started once for this module's tests (several seconds)."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, num_gpus=4, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _where(payload: dict) -> dict:
    return {"id": payload["id"], "ok": True, "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "compile_threads": os.environ.get("TORCHINDUCTOR_COMPILE_THREADS")}


def test_ray_pool_on_a_real_local_cluster_shares_gpus_and_sets_the_environment(local_ray):
    """8 actors at a half GPU each (two placed at once: the cluster has 2 CPUs), each job told one
    GPU, with the workers' environment."""
    pool = RayPool(_where, workers=8, timeout_s=120, address="local", gpu=True,
                   env={"TORCHINDUCTOR_COMPILE_THREADS": "1"})
    try:
        assert pool.sharing == 2 and pool.num_gpus == 0.5
        results = _drain(pool, [(k, {"id": k}) for k in "abcd"])
    finally:
        pool.shutdown()
    assert sorted(results) == list("abcd")
    assert all(r["ok"] and r["compile_threads"] == "1" for r in results.values()), results
    assert all(r["gpus"] in {"0", "1", "2", "3"} for r in results.values()), results


def test_a_ray_slot_runs_its_jobs_in_one_actor_and_replaces_it_when_worn_timed_out_or_dead(local_ray):
    """One slot holding a GPU, a fresh actor after two jobs: the jobs run in one long-lived process
    (a Ray task holding a GPU would get a new process per job), a job past the timeout has its actor
    killed, a job that kills its own process is `crashed`, and after each the slot's next job runs in
    a new actor."""
    pool = RayPool(_work, workers=1, timeout_s=4.0, address="local", gpu=True, max_tasks=2)
    try:
        jobs = [(k, {"id": k, "what": w}) for k, w in
                [("a", "ok"), ("b", "ok"), ("c", "ok"), ("d", "die"), ("e", "ok"), ("f", "sleep"), ("g", "ok")]]
        results = _drain(pool, jobs)
        summary = pool.memory_summary()
    finally:
        pool.shutdown()
    assert sorted(results) == list("abcdefg")
    pid = {k: results[k]["pid"] for k in "abceg"}
    assert pid["a"] == pid["b"] != os.getpid()                 # one process for both jobs
    assert len({pid["b"], pid["c"], pid["e"], pid["g"]}) == 4    # worn, then died, then timed out
    detail = results["d"]["detail"]
    assert results["d"]["reason"] == "crashed" and detail.startswith("the filter actor (pid ")
    # Ray's cause without its identity lines and advice, and the actor's memory as last seen
    assert "Worker exit type" in detail and "actor_id" not in detail and "common causes" not in detail, detail
    assert re.search(r"its RSS [\d.]+ [MG]iB after its last task \(1 task run\)$", detail), detail
    assert "\n" not in detail and len(detail) < 500
    assert results["f"]["reason"] == "timeout"
    assert all(results[k][RSS_FIELD] > 0 and results[k][PEAK_FIELD] >= results[k][RSS_FIELD] for k in pid)
    assert summary["workers_recycled"] == 1 and summary["worker_peak_rss_mb"] > 0
