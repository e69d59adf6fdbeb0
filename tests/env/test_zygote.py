"""Candidates forked from the sandboxed zygote (zygote.py, CUDA_AGENT_CANDIDATE_ZYGOTE=1): they
evaluate as started ones do, start faster, and reach nothing a started one could not: not the zygote,
not another candidate, not another job's folder, not what an earlier candidate left behind."""

from __future__ import annotations

import json
import os
import resource
import shutil
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from cuda_agent.env import evaluate
from cuda_agent.env.config import EvalConfig
from cuda_agent.env.infra import sandbox, zygote
from cuda_agent.env.infra.isolation import box_of, start_worker
from cuda_agent.env.infra.sandbox import descendants, sandbox_available, sandbox_prefix
from cuda_agent.env.run.worker_run import job_root
from tests.env.helpers import cpu_config, cpu_workspace, example_task
from tests.hacks.cases import example_model_new

pytestmark = pytest.mark.skipif(not sandbox_available()[0] or not sandbox.user_namespaces_work(),
                                reason="bubblewrap with user namespaces is needed")


@pytest.fixture(autouse=True)
def zygote_on(monkeypatch):
    monkeypatch.setenv(zygote.ENV, "1")


def config(cache_dir: Path) -> EvalConfig:
    return cpu_config(cache_dir, guard=False, baselines=False)   # the sandbox alone stands in the way


def zygote_warnings(result) -> list[str]:
    return [w for w in result.warnings if "zygote" in w]


def zygote_pids() -> list[int]:
    """Host pids of the running zygotes (not their keepers, which share their command line)."""
    found = []
    for server in zygote._zygotes.values():
        below = descendants(server.proc.pid)
        ours = {p for p in below if b"cuda_agent.env.infra.zygote" in _cmdline(p)}
        found += [p for p in ours if _parent(p) not in ours]
    return found


def ns_pids(pid: int) -> list[int]:
    """`pid` as each of its PID namespaces numbers it, outermost first."""
    line = next(line for line in open(f"/proc/{pid}/status") if line.startswith("NSpid:"))
    return [int(n) for n in line.split()[1:]]


def _cmdline(pid: int) -> bytes:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return b""


def _parent(pid: int) -> int | None:
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        return None


PROBE = '''
import json, os
with open("/proc/self/status") as fh:
    _status = {line.split(":")[0]: line.split(":")[1].split() for line in fh if ":" in line}
print("PROBE " + json.dumps({"nspid": _status["NSpid"], "uid": os.getuid(), "cap": _status["CapEff"][0],
                             "seccomp": _status["Seccomp"][0], "nnp": _status["NoNewPrivs"][0]}), flush=True)
'''


def test_a_candidate_from_the_zygote_evaluates_the_example(cache_dir):
    model_new = example_model_new("return cuda_extension.bias_relu(x, self.bias)", header=PROBE)
    result = evaluate(example_task(), cpu_workspace(model_new=model_new), config(cache_dir))
    assert result.correct, result.error
    assert not zygote_warnings(result), result.warnings
    seen = json.loads(next(line for line in result.log.splitlines() if line.startswith("PROBE "))[6:])
    assert seen["nspid"][-1] == "1"              # PID 1 of a namespace of its own: forked, not started by bwrap
    assert seen["uid"] == sandbox.SANDBOX_UID and int(seen["cap"], 16) == 0
    assert seen["seccomp"] == "2" and seen["nnp"] == "1"
    assert zygote_pids(), "no zygote is running"


def _start(job: Path):
    box = box_of(job)
    box.mkdir(parents=True, exist_ok=True)
    wrap = sandbox_prefix(EvalConfig(backend="cpu"), box)
    before, began = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    worker = start_worker("candidate", job, "cpu", None, wrap)
    worker.wait_ready()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return worker, time.perf_counter() - began, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def test_the_start_fresh_and_from_the_zygote_and_the_harness_reads_the_candidate(monkeypatch):
    jobs = [Path(tempfile.mkdtemp(prefix="cuda-agent-job-", dir=job_root())) for _ in range(3)]
    try:
        monkeypatch.setenv(zygote.ENV, "0")
        fresh, fresh_wall, _ = _start(jobs[0])
        fresh.kill()
        monkeypatch.setenv(zygote.ENV, "1")
        _start(jobs[1])[0].kill()   # the zygote starts (on first use)
        forked, forked_wall, _ = _start(jobs[2])
        print(f"\ncandidate start: fresh {fresh_wall:.3f} s, from the zygote {forked_wall:.3f} s")
        assert not forked.notes, forked.notes
        pid = forked.main_pid
        assert pid == forked.proc.pid                                  # the pid the kernel handed over
        assert ns_pids(pid)[-1] == 1
        assert os.readlink(f"/proc/{pid}/cwd") == str(box_of(jobs[2]))
        with open(f"/proc/{pid}/mem", "rb") as mem:                      # what CallVerdicts and Memory need
            maps = open(f"/proc/{pid}/maps").readline()
            mem.seek(int(maps.split("-")[0], 16))
            assert len(mem.read(16)) == 16
        assert os.listdir(f"/proc/{pid}/task")                           # what op_samples reads
        forked.kill()
        assert forked.proc.wait(30) == -9
    finally:
        for job in jobs:
            shutil.rmtree(job, ignore_errors=True)


ATTEMPTS = '''
import ctypes, os, signal
ZYGOTES, OTHER, OTHER_BOX = {zygotes}, {other}, {other_box!r}
MARKS = ["/tmp/cuda-agent-mark", "/dev/shm/cuda-agent-mark", os.path.expanduser("~") + "/cuda-agent-mark"]
libc = ctypes.CDLL(None, use_errno=True)


def attempt(name, action):
    try:
        detail = action()
        print(f"ESCAPE {{name}}: OPEN {{str(detail)[:80]}}", flush=True)
    except Exception as exc:
        print(f"ESCAPE {{name}}: blocked ({{type(exc).__name__}})", flush=True)


def list_proc():
    pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
    if pids != [os.getpid()]:
        return pids
    raise PermissionError("sees itself alone")


def each(action):
    # the host's pids, and the small numbers the zygote and its children have in the sandbox's namespace
    for pid in [*ZYGOTES, OTHER, *range(1, 8)]:
        if pid == os.getpid():
            continue
        try:
            return pid, action(pid)
        except OSError:
            pass
    raise PermissionError("none reached")


def mem(pid):
    with open(f"/proc/{{pid}}/mem", "rb") as fh:
        return fh.read(1)


def ptrace(pid):
    if libc.ptrace(16, pid, None, None) != 0:   # PTRACE_ATTACH
        raise OSError(ctypes.get_errno(), "ptrace")


def left_behind():
    found = [path for path in MARKS if os.path.exists(path)]
    wrote = 0
    for path in MARKS:
        try:
            open(path, "w").write("mark")
            wrote += 1
        except OSError:
            pass
    print(f"MARKS written: {{wrote}}", flush=True)
    if found:
        return found
    raise PermissionError("nothing of an earlier candidate")


def jobs_in_mounts():
    text = open("/proc/self/mountinfo").read()
    if ".cuda-agent-jobs" in text or OTHER_BOX in text:
        return [line for line in text.splitlines() if "jobs" in line or OTHER_BOX in line]
    raise PermissionError("no other job mounted")


def jobs_folder():
    found = os.listdir("/dev/.cuda-agent-jobs")   # the zygote's view of every job (an empty mount point here)
    if found:
        return found
    raise PermissionError("empty")


def write_dev():
    open("/dev/cuda-agent-mark", "w").write("shared")
    return "wrote /dev"


attempt("proc-list", list_proc)
attempt("kill", lambda: each(lambda pid: os.kill(pid, signal.SIGKILL)))
attempt("proc-mem", lambda: each(mem))
attempt("ptrace", lambda: each(ptrace))
attempt("other-box", lambda: open(OTHER_BOX + "/secret.txt").read())
attempt("jobs-folder", jobs_folder)
attempt("mounts", jobs_in_mounts)
attempt("write-dev", write_dev)
attempt("left-behind", left_behind)
attempt("unshare", lambda: (_ for _ in ()).throw(OSError()) if libc.unshare(0x10000000) else "unshared")
'''


def test_a_forked_candidate_reaches_neither_the_zygote_nor_another_candidate_nor_its_box(cache_dir):
    warm = evaluate(example_task(), cpu_workspace(), config(cache_dir))   # the zygote runs
    assert warm.correct and not zygote_warnings(warm), (warm.error, warm.warnings)
    zygotes = zygote_pids()
    assert zygotes
    other_job = Path(tempfile.mkdtemp(prefix="cuda-agent-job-", dir=job_root()))
    try:
        other, _, _ = _start(other_job)   # another candidate of the same zygote, alive meanwhile
        (box_of(other_job) / "secret.txt").write_text("the other job's")
        inner = [ns_pids(p)[-1] for p in zygotes]   # their numbers in the sandbox's namespace
        header = ATTEMPTS.format(zygotes=zygotes + inner, other=other.main_pid, other_box=str(box_of(other_job)))
        model_new = example_model_new("return cuda_extension.bias_relu(x, self.bias)", header=textwrap.dedent(header))
        results = [evaluate(example_task(), cpu_workspace(model_new=model_new), config(cache_dir)) for _ in range(2)]
        for result in results:
            assert result.correct and not zygote_warnings(result), (result.error, result.warnings)
            lines = [line for line in result.log.splitlines() if line.startswith("ESCAPE ")]
            assert len(lines) == 10, result.log[-2000:]
            assert not [line for line in lines if ": OPEN" in line], lines
            # each left marks the next could have found: /tmp and /dev/shm at least (home is read-only
            # where Python lives in it)
            assert "MARKS written: 2" in result.log or "MARKS written: 3" in result.log, result.log[-800:]
        assert other.proc.poll() is None and all(os.path.exists(f"/proc/{p}") for p in zygotes)
        assert (box_of(other_job) / "secret.txt").read_text() == "the other job's"
        other.kill()
    finally:
        shutil.rmtree(other_job, ignore_errors=True)


def test_without_a_user_namespace_the_candidate_starts_afresh_and_says_why(cache_dir, monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_SANDBOX_USERNS", "0")
    sandbox._bwrap_status.cache_clear()
    try:
        result = evaluate(example_task(), cpu_workspace(), config(cache_dir))
    finally:
        sandbox._bwrap_status.cache_clear()
    assert result.correct, result.error
    assert any("no user namespace" in w and "started afresh" in w for w in zygote_warnings(result)), result.warnings


def test_a_zygote_that_cannot_start_is_not_tried_again_and_the_candidate_starts_afresh(cache_dir, monkeypatch):
    split = zygote._split
    monkeypatch.setattr(zygote, "_split", lambda wrap, box: (lambda p, plan, libs: (
        [*p, "--no-such-option"], plan, libs))(*split(wrap, box)))
    monkeypatch.setattr(zygote, "_broken", {})
    started = []
    init = zygote._Zygote.__init__
    monkeypatch.setattr(zygote._Zygote, "__init__", lambda self, *a: (started.append(1), init(self, *a))[1])
    results = [evaluate(example_task(), cpu_workspace(), config(cache_dir)) for _ in range(2)]
    for result in results:
        assert result.correct, result.error
        said = zygote_warnings(result)
        assert len(said) == 1 and "the zygote stopped" in said[0] and "no-such-option" in said[0], said
    assert len(started) == 1


def test_a_child_that_cannot_set_its_sandbox_up_runs_nothing_and_the_candidate_starts_afresh(cache_dir, monkeypatch):
    monkeypatch.setattr(zygote, "ZYGOTE_ALLOWED", frozenset())   # the zygote's filter refuses mount and unshare
    monkeypatch.setattr(zygote, "_zygotes", {})
    result = evaluate(example_task(), cpu_workspace(), config(cache_dir))
    assert result.correct, result.error
    said = zygote_warnings(result)
    assert len(said) == 1 and "could not be set up" in said[0] and "Operation not permitted" in said[0], said
