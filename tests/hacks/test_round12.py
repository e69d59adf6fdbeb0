"""The hack suite's twelfth round (cases_round12.py): candidates evaluated back to back on one kept judge
(CUDA_AGENT_PERSISTENT_JUDGE=1) try to leave something for a later evaluation through it, to find an
earlier evaluation's traces in what it hands them, and to leave it unfit for the next job (so an honest
solution fails, or a wrong one passes). The flag applies to the CUDA backend only; here it is let apply
to the CPU backend (`judges.BACKENDS`), whose judge lifecycle is the same. Each test also asserts that
the judge was in fact kept (the same process served the evaluations), so a verdict says something about
the kept judge and not about a fresh one."""

from __future__ import annotations

import re
import time

import pytest

from tests.env.helpers import wait_for_kept_judges
from tests.hacks.cases import assert_accepted, assert_rejected, describe, hack_config
from tests.hacks.cases_round12 import (
    KEY, REPORT, heavy, honest, on_call, planter, recorder, replayer, report_of, reporter, scribbler, wrong,
)

from cuda_agent.env import evaluate
from cuda_agent.env.infra import judges

ROUNDS = 2   # recorder then replayer, twice: a channel that works does so every time


def assert_verified(result) -> None:
    """Accepted by verification (an evaluation that stopped after it: no time, no reward yet)."""
    assert result.error is None and result.correct, describe(result)


@pytest.fixture
def kept(monkeypatch, cache_dir):
    """Evaluates a (task, solution) with persistent judges on (CPU too, no pre-started pairs: each
    evaluation takes the judge the last one gave back); returns (result, the idle judge's pid or None)."""
    monkeypatch.setenv(judges.ENV, "1")
    monkeypatch.setattr(judges, "BACKENDS", {"cuda", "cpu"})
    judges.discard_all()

    def run(built, stop_after=None, **settings):
        task, solution = built
        wait_for_kept_judges()   # else the evaluation may start a judge of its own
        result = evaluate(task, solution, hack_config(cache_dir, prewarm=False, **settings), stop_after=stop_after)
        idle = judges.idle("cpu", None)
        assert len(idle) <= 1, idle
        return result, (idle[0].proc.pid if idle else None)

    yield run
    judges.discard_all()


def test_nothing_a_candidate_leaves_reaches_the_next_through_the_kept_judge(kept):
    pids = set()
    for _ in range(ROUNDS):
        recorded, pid = kept(recorder())
        assert_accepted(recorded)
        replayed, again = kept(replayer(), stop_after="verify")
        assert_rejected(replayed, ("correctness",), "the replayer found the recording")
        pids |= {pid, again}
    assert len(pids) == 1 and None not in pids, pids   # one judge served all four


def test_the_recorder_did_leave_its_key(kept):
    """The staging file and the box took the key (so the replayer's failure to find it means something)."""
    result, _ = kept(reporter(f"cuda_extension.stage_record({KEY!r}) + '; ' + cuda_extension.stage_replay({KEY!r})"))
    took, found = report_of(result).split("; ")
    assert took.count("staging@") == 4 and "file:." in took, took
    assert found == took, (took, found)


def test_a_later_candidate_gets_a_blank_staging_file(kept):
    """After a recorder and a honest evaluation (inputs drawn into, outputs put into the staging file),
    the next candidate's staging file holds nothing at its start: no earlier input, output or key."""
    first, pid = kept(recorder())
    assert_accepted(first)
    result, again = kept(reporter("cuda_extension.stage_scan()"))
    scan = report_of(result)
    assert re.fullmatch(r"size=\d+ nonzero=0", scan), scan
    assert again == pid


def test_the_candidate_holds_no_judge_socket_and_sees_no_judge(kept):
    """While the kept judge serves it (the harness holds the judge's handover socket then), the candidate
    holds no socket, sees no process but itself, and no judge's folder among its mounts."""
    assert_verified(kept(honest(), stop_after="verify")[0])
    result, _ = kept(reporter("cuda_extension.seen()"))
    seen = report_of(result)
    fds = seen.split("fds: ")[1].split(" | ")[0]
    assert "socket:" not in fds, fds
    procs = seen.split("| procs: ")[1].split(" |")[0].split()
    assert set(procs) <= {"1", "2"}, seen   # its namespace: bwrap's init and itself
    assert "cuda-agent-judge-" not in seen, seen


HOSTILE = [   # (solution, the rules its own evaluation is rejected by, settings)
    (lambda: on_call(4, "hang"), ("timeout",), {"timeout_verify": 3.0}),
    (lambda: on_call(3, "crash"), ("crash",), {}),
    (lambda: on_call(2, "nan"), ("correctness",), {}),
    (scribbler, ("input-mutation",), {}),
]


@pytest.mark.parametrize("build,rules,settings", HOSTILE, ids=["hang", "crash", "nan", "scribble"])
def test_a_hostile_candidate_leaves_the_kept_judge_fit(kept, build, rules, settings):
    """A candidate that fails in its own way (after the judge drew its inputs, sampled or compared some
    of its calls) leaves the judge kept; on that judge an honest solution is still correct, timed, and a
    wrong one still rejected."""
    first, pid = kept(honest(), stop_after="verify")
    assert_verified(first)
    hostile, after = kept(build(), stop_after="verify", **settings)
    assert_rejected(hostile, rules, "the hostile candidate")
    assert after == pid, (pid, after)   # its own failure: the judge was kept
    fine, again = kept(honest())
    assert_accepted(fine)
    bad, last = kept(wrong(), stop_after="verify")
    assert_rejected(bad, ("correctness",), "a wrong solution after the hostile one")
    assert again == last == pid


def _state(pid: int) -> str:
    """A process's state letter from /proc (Z: exited, its memory and files let go), or "gone"."""
    from pathlib import Path

    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_the_judge_is_handed_out_only_once_its_last_candidates_processes_are_gone(kept, monkeypatch):
    """The kept judge must not serve the next job while the last candidate's process is alive (its kernels
    could still write into the judge's memory it mapped, docs/environment.md). A candidate that holds 1.5 GiB
    takes a while to die; every process of its sandbox (bwrap, its init, the worker; forked from the
    zygote, the worker alone) must have exited when `judges.take` hands the judge out, not only bwrap,
    which is reaped at once. The judge's own answer to
    NextJob (its garbage collection) is taken out of the race: a stand-in answers at once."""
    from cuda_agent.env.infra import isolation, sandbox

    inside: dict[int, set[int]] = {}
    real_kill = isolation.Worker.kill

    def kill(worker):
        if worker.role == "candidate" and not worker.reaping:   # its processes, seen before the kill
            inside[id(worker)] = sandbox.descendants(worker.proc.pid) | {worker.proc.pid}
        real_kill(worker)

    monkeypatch.setattr(isolation.Worker, "kill", kill)
    result, pid = kept(heavy(1536), stop_after="verify")
    assert_verified(result)
    entry = judges._idle[("cpu", None)][0]
    real, candidate = entry.judge, entry.candidate
    entry.judge, entry.fit = _FitJudge(), None
    real.kill()
    deadline = time.monotonic() + 30
    while (taken := judges.take("cpu", None)) is None and time.monotonic() < deadline:
        time.sleep(0.005)
    alive = {p: _state(p) for p in inside[id(candidate)] if _state(p) not in ("Z", "X", "gone")}
    assert isinstance(taken, _FitJudge) and candidate.main_pid in inside[id(candidate)]
    assert not alive, f"handed out while the last candidate's processes live: {alive}"


class _FitJudge:
    """Answers NextJob fit at once."""

    def __init__(self):
        import types

        self.channel = types.SimpleNamespace(receive=lambda timeout: {"ok": True}, send=lambda message: None)

    def kill(self):
        pass


def test_the_judge_writes_nothing_through_a_link_the_candidate_planted(kept, tmp_path):
    """The judge (the harness's user, outside the sandbox) saves the reference's weights into the box,
    which the candidate may write: a candidate whose import, racing the judge's set-up (a task whose
    model takes seconds to make), plants `reference_init.pt` as a symbolic link to a file of the
    harness's must not have the judge write that file (fresh judges alike: the same set-up; the judge
    saves into a new file of its own and renames it over the name, `isolation.box_file`)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("the harness's own file")
    assert_verified(kept(honest(), stop_after="verify")[0])   # the build cached: the import comes early
    result, _ = kept(planter(str(victim), seconds=6.0), stop_after="verify")
    if REPORT in describe(result):
        pytest.skip(f"no link planted before the judge's save: {report_of(result)}")
    assert victim.read_text() == "the harness's own file", victim.read_bytes()[:40]


def test_a_judge_whose_last_candidate_lingers_inside_its_sandbox_is_not_handed_out():
    """`exited` set (bwrap reaped) while a process of the sandbox lives on: the judge is not handed out
    (it waits, idle); once that process has exited, it is."""
    import subprocess
    import threading
    import types

    judges.discard_all()
    lingering = subprocess.Popen(["sleep", "30"])
    try:
        candidate = types.SimpleNamespace(exited=threading.Event(), expected={lingering.pid}, main_pid=None)
        candidate.exited.set()
        judge = _FitJudge()
        judge.kill = lambda: setattr(judge, "killed", True)
        judges.give_back(judge, "cuda", 0, candidate=candidate)
        assert judges.take("cuda", 0) is None and not getattr(judge, "killed", False)
        lingering.kill()
        lingering.wait()
        assert judges.take("cuda", 0) is judge
    finally:
        lingering.kill()
        judges.discard_all()
