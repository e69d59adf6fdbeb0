"""The device lock: timed work alone, the rest side by side, a waiting writer first (locks.py).

Each assertion probes the lock files with a non-blocking flock from a separate open file, as
another process would: no sleeps, no timing."""

import fcntl
import os
import threading

import pytest

from cuda_agent.env.infra.locks import DeviceLock


def _can_lock(path, kind) -> bool:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


@pytest.fixture
def lock(tmp_path):
    return DeviceLock(tmp_path / "cuda-0.lock")


def test_exclusive_holder_keeps_everyone_out(lock):
    with lock.held():
        assert not _can_lock(lock.path, fcntl.LOCK_SH)
        assert not _can_lock(lock.gate, fcntl.LOCK_EX)   # new shared holders wait at the gate
    assert _can_lock(lock.path, fcntl.LOCK_EX) and _can_lock(lock.gate, fcntl.LOCK_EX)


def test_shared_holders_overlap_and_keep_timing_out(lock):
    with lock.held(shared=True), lock.held(shared=True):   # two holders (own files each) at once
        assert _can_lock(lock.path, fcntl.LOCK_SH)
        assert not _can_lock(lock.path, fcntl.LOCK_EX)
        assert _can_lock(lock.gate, fcntl.LOCK_EX)          # the gate is open again behind them
    assert _can_lock(lock.path, fcntl.LOCK_EX)


def test_a_waiting_writer_closes_the_gate_to_new_shared_holders(lock):
    """A timed call waiting for shared work to end is not overtaken by shared work arriving later."""
    order = []
    reader_in = threading.Event()
    release_reader = threading.Event()

    def first_reader():
        with lock.held(shared=True):
            reader_in.set()
            release_reader.wait(10)
            order.append("reader 1 done")

    def writer():
        with lock.held():
            order.append("writer")

    def late_reader():
        with lock.held(shared=True):
            order.append("reader 2")

    t1 = threading.Thread(target=first_reader)
    t1.start()
    reader_in.wait(10)
    tw = threading.Thread(target=writer)
    tw.start()
    # the writer holds the gate while it waits for the first reader: probe until it has it
    while _can_lock(lock.gate, fcntl.LOCK_EX):
        tw.join(0.001)
    t2 = threading.Thread(target=late_reader)
    t2.start()
    release_reader.set()
    for t in (t1, tw, t2):
        t.join(10)
    assert order == ["reader 1 done", "writer", "reader 2"]


def test_an_exclusive_hold_shares_its_rest_and_a_writer_then_waits_for_it(lock, tmp_path, monkeypatch):
    """`share()`: after a timed call's timing, its checks run beside other evaluations' shared work,
    while the next timed call still waits for them; the lock log shows the two parts apart."""
    from cuda_agent.env.infra.lock_log import read_log

    log = tmp_path / "lock.log"
    monkeypatch.setenv("CUDA_AGENT_LOCK_LOG", str(log))
    with lock.held(label="harness.profile.timed") as hold:
        assert not _can_lock(lock.path, fcntl.LOCK_SH) and not _can_lock(lock.gate, fcntl.LOCK_EX)
        hold.share()
        assert _can_lock(lock.gate, fcntl.LOCK_EX)          # the gate is open to shared holders
        assert _can_lock(lock.path, fcntl.LOCK_SH)          # they get in
        assert not _can_lock(lock.path, fcntl.LOCK_EX)      # a writer does not
        with lock.held(shared=True) as other:
            other.share()                                   # a shared hold has nothing to share
            assert not _can_lock(lock.path, fcntl.LOCK_EX)
        hold.share()                                        # twice is once
    assert _can_lock(lock.path, fcntl.LOCK_EX) and _can_lock(lock.gate, fcntl.LOCK_EX)
    parts = [(h["label"], h["shared"]) for h in read_log(log)]
    assert parts == [("-", True), ("harness.profile.timed", False), ("harness.profile.timed.shared", True)]


def test_locks_of_different_devices_are_independent(tmp_path):
    a, b = DeviceLock(tmp_path / "cuda-0.lock"), DeviceLock(tmp_path / "cuda-1.lock")
    with a.held():
        with b.held():
            assert not _can_lock(a.path, fcntl.LOCK_SH) and not _can_lock(b.path, fcntl.LOCK_SH)


def test_the_lock_log_records_each_hold_and_its_split(lock, tmp_path, monkeypatch):
    """CUDA_AGENT_LOCK_LOG: one line per hold; lock_log splits a run's wall time into alone, shared
    (their union), handed over (free while someone waited) and idle."""
    from cuda_agent.env.infra.lock_log import by_label, occupancy, read_log

    log = tmp_path / "lock.log"
    monkeypatch.setenv("CUDA_AGENT_LOCK_LOG", str(log))
    with lock.held(label="timed"):
        pass
    with lock.held(shared=True, label="draw"):
        pass
    holds = read_log(log)
    assert [(h["label"], h["shared"]) for h in holds] == [("timed", False), ("draw", True)]
    assert all(h["asked"] <= h["got"] <= h["released"] for h in holds)
    # a made-up run of 10 s: alone 0-2, two shared holds overlapping 3-6, a waiter 6-7 served at 7-8
    made_up = [{"label": "a", "shared": False, "asked": 0.0, "got": 0.0, "released": 2.0},
               {"label": "b", "shared": True, "asked": 3.0, "got": 3.0, "released": 5.0},
               {"label": "b", "shared": True, "asked": 4.0, "got": 4.0, "released": 6.0},
               {"label": "a", "shared": False, "asked": 6.0, "got": 7.0, "released": 8.0},
               {"label": "c", "shared": True, "asked": 10.0, "got": 10.0, "released": 10.0}]
    split = occupancy(made_up)
    assert (split["wall_s"], split["exclusive_s"], split["shared_s"], split["handover_s"], split["idle_s"]) == \
        (10.0, 3.0, 3.0, 1.0, 3.0)
    rows = {row["label"]: row for row in by_label(made_up)}
    assert rows["a"]["holds"] == 2 and rows["a"]["held_total_s"] == 3.0 and rows["a"]["wait_total_s"] == 1.0
    assert rows["b"]["mode"] == "shared" and rows["b"]["held_median_ms"] == 2000.0


def test_no_lock_log_unless_asked(lock, tmp_path, monkeypatch):
    monkeypatch.delenv("CUDA_AGENT_LOCK_LOG", raising=False)
    monkeypatch.chdir(tmp_path)
    with lock.held(label="timed"):
        pass
    assert not any(p.name.endswith(".log") for p in tmp_path.iterdir())
