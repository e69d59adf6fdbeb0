"""The device lock: timed work alone, the rest side by side, a waiting writer first (locks.py).

Each assertion probes the lock files with a non-blocking flock from a separate open file, as
another process would: no sleeps, no timing."""

import fcntl
import os
import threading

import pytest

from cuda_agent.env.locks import DeviceLock


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


def test_locks_of_different_devices_are_independent(tmp_path):
    a, b = DeviceLock(tmp_path / "cuda-0.lock"), DeviceLock(tmp_path / "cuda-1.lock")
    with a.held():
        with b.held():
            assert not _can_lock(a.path, fcntl.LOCK_SH) and not _can_lock(b.path, fcntl.LOCK_SH)
