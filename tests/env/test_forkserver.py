"""Judges forked from the fork server behave as started ones do (forkserver.py, isolation.py)."""

import os
import subprocess

import pytest

from cuda_agent.env.infra import forkserver
from cuda_agent.env.infra.forkserver import ForkedProcess
from cuda_agent.env.infra.isolation import start_worker


@pytest.fixture
def judge(tmp_path):
    worker = start_worker("judge", tmp_path, "cpu", None)
    worker.wait_ready()
    yield worker
    worker.kill()


def test_a_judge_is_forked_into_a_session_and_folder_of_its_own_with_the_environment_asked_for(judge, tmp_path):
    assert isinstance(judge.proc, ForkedProcess)
    pid = judge.proc.pid
    assert os.getsid(pid) == pid and os.getpgid(pid) == pid   # killed with its group, as a started one is
    assert os.readlink(f"/proc/{pid}/cwd") == str(tmp_path)
    environ = dict(item.split("=", 1) for item in
                   open(f"/proc/{pid}/environ", "rb").read().decode().split("\0") if "=" in item)
    assert environ["CUDA_AGENT_WORKER_BACKEND"] == "cpu" and environ["CUDA_VISIBLE_DEVICES"] == ""
    assert judge.proc.poll() is None


def test_a_killed_judge_reports_the_signal_as_popen_does(judge):
    judge.kill()
    assert judge.proc.wait(30) == -9
    assert judge.proc.poll() == -9


def test_a_judge_that_exits_reports_its_code_and_wait_times_out_while_it_runs(judge):
    with pytest.raises(subprocess.TimeoutExpired):
        judge.proc.wait(0.05)
    judge.proc.stdin.close()   # the harness's end of its commands: the worker leaves cleanly
    assert judge.proc.wait(30) == 0


def test_a_dead_server_is_started_again(tmp_path):
    first = start_worker("judge", tmp_path / "a", "cpu", None)
    first.wait_ready()
    first.kill()
    forkserver._servers[None].proc.kill()
    forkserver._servers[None].proc.wait(30)
    second = start_worker("judge", tmp_path / "b", "cpu", None)
    try:
        second.wait_ready()
        assert isinstance(second.proc, ForkedProcess) and second.proc.poll() is None
    finally:
        second.kill()


def test_judges_start_python_anew_when_forking_is_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_FORK_JUDGES", "0")
    worker = start_worker("judge", tmp_path, "cpu", None)
    try:
        worker.wait_ready()
        assert isinstance(worker.proc, subprocess.Popen)
    finally:
        worker.kill()


def test_each_device_forks_its_judges_from_a_server_of_its_own(tmp_path):
    """Device 1's judge is forked while device 0's server is stopped: no server or lock is shared
    between devices (a server forks one request at a time)."""
    import signal
    import threading

    first = start_worker("judge", tmp_path / "a", "cpu", 0)
    servers = dict(forkserver._servers)
    other: list = []
    os.kill(servers[0].proc.pid, signal.SIGSTOP)
    try:
        started = threading.Thread(target=lambda: other.append(start_worker("judge", tmp_path / "b", "cpu", 1)),
                                   daemon=True)
        started.start()
        started.join(60)   # a hang guard only: with a shared server this never returns
        assert other, "device 1's judge waited for device 0's stopped server"
        assert forkserver._servers[1].proc.pid != servers[0].proc.pid
        other[0].wait_ready()
        parent = int(open(f"/proc/{other[0].proc.pid}/stat").read().rsplit(")", 1)[1].split()[1])
        assert parent == forkserver._servers[1].proc.pid   # forked by device 1's own server
    finally:
        os.kill(servers[0].proc.pid, signal.SIGCONT)
        for worker in (first, *other):
            worker.kill()


def test_a_judge_that_fails_before_its_main_says_why_in_its_log(tmp_path, monkeypatch):
    """Its folder is gone when it is forked: os.chdir raises in the child, whose traceback is in its log."""
    from cuda_agent.env.workers.protocol import ChildDied

    real = forkserver.fork_worker
    gone = tmp_path / "gone"
    monkeypatch.setattr(forkserver, "fork_worker", lambda role, env, cwd, *args, **kwargs: real(role, env, gone, *args, **kwargs))
    worker = start_worker("judge", tmp_path / "job", "cpu", None)
    try:
        with pytest.raises(ChildDied, match="exited with code 1"):
            worker.wait_ready(30)
        tail = worker.log_tail()
        assert "FileNotFoundError" in tail and str(gone) in tail, tail
    finally:
        worker.kill()


def test_a_child_that_fails_before_its_log_is_fd_2_writes_the_traceback_to_the_log(tmp_path):
    """A descriptor of the server's that cannot be closed: the child fails before its dup2s."""
    import sys
    from pathlib import Path

    log = tmp_path / "judge.log"
    src = str(Path(forkserver.__file__).resolve().parents[3])
    with open(log, "wb") as fh:
        code = f"from cuda_agent.env.infra.forkserver import _become_worker; _become_worker({{}}, None, 0, 1, {fh.fileno()}, [1000])"
        child = subprocess.run([sys.executable, "-c", code], pass_fds=(fh.fileno(),), env={**os.environ, "PYTHONPATH": src},
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert child.returncode == 1
    said = log.read_text()
    assert "OSError" in said and "Bad file descriptor" in said, (said, child.stderr)
