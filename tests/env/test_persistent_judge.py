"""Persistent judges (infra/judges.py, workers/handover.py): one judge process serves evaluations one
after another. The flag applies to the CUDA backend only; here it is let apply to the CPU backend
(`judges.BACKENDS`), whose lifecycle is the same, since no GPU runs here."""

import re
import time
from pathlib import Path

import pytest

from cuda_agent.env import evaluate
from cuda_agent.env.infra import judges
from cuda_agent.tasks import Task
from tests.env.helpers import (EXAMPLES, WRONG_BODY, cpu_config, cpu_workspace, example_task, kernel,
                               wait_for_kept_judges)


@pytest.fixture
def persistent(monkeypatch):
    """The flag on, for the CPU backend too; no idle judge before or after the test."""
    monkeypatch.setenv(judges.ENV, "1")
    monkeypatch.setattr(judges, "BACKENDS", {"cuda", "cpu"})
    judges.discard_all()
    yield
    judges.discard_all()


def _idle_pids() -> list[int]:
    return [judge.proc.pid for judge in judges.idle("cpu", None)]


def _verify(cache_dir, solution, task=None, progress=None, **settings):
    wait_for_kept_judges()   # else the evaluation may start a judge of its own
    config = cpu_config(cache_dir, seed=1234, baselines=False, **settings)
    return evaluate(task or example_task(), solution, config, stop_after="verify", progress=progress)


def _verdicts(result) -> tuple:
    return result.correct, result.error, result.max_abs_error


def test_the_flag_is_off_by_default_and_for_the_cpu_backend(monkeypatch):
    monkeypatch.delenv(judges.ENV, raising=False)
    assert not judges.enabled("cuda") and not judges.enabled("cpu")
    monkeypatch.setenv(judges.ENV, "1")
    assert judges.enabled("cuda") and not judges.enabled("cpu")


def test_fresh_judges_are_not_kept(cache_dir, monkeypatch):
    monkeypatch.delenv(judges.ENV, raising=False)
    judges.discard_all()
    assert _verify(cache_dir, cpu_workspace()).correct
    assert judges.idle("cpu", None) == []


def test_one_judge_serves_evaluations_in_turn_with_a_fresh_judges_verdicts(cache_dir, persistent, monkeypatch):
    wrong = cpu_workspace(kernel(WRONG_BODY))
    runs = [_verify(cache_dir, cpu_workspace())]
    first = _idle_pids()
    assert len(first) == 1
    runs.append(_verify(cache_dir, wrong))   # the candidate's failure leaves the judge fit
    wait_for_kept_judges()
    runs.append(evaluate(example_task(), cpu_workspace(), cpu_config(cache_dir, seed=1234)))   # timed too
    assert _idle_pids() == first
    assert runs[0].correct and not runs[1].correct and runs[2].correct and runs[2].kernel_ms > 0
    assert runs[1].error.phase == "verify" and "wrong output" in runs[1].error.message
    monkeypatch.setenv(judges.ENV, "0")   # the same evaluations with fresh judges: the same verdicts
    assert _verdicts(_verify(cache_dir, cpu_workspace())) == _verdicts(runs[0])
    assert _verdicts(_verify(cache_dir, wrong)) == _verdicts(runs[1])


def _flaky(fail_at: int, how: str) -> Task:
    code = (EXAMPLES / "model.py").read_text()
    return Task("flaky", code.replace("    def forward(self, x):\n",
                                      f"    calls = 0\n\n    def forward(self, x):\n        Model.calls += 1\n"
                                      f"        if Model.calls == {fail_at}:\n            {how}\n"))


@pytest.mark.parametrize("how", ["raise RuntimeError('call 2')", "import time; time.sleep(60)"])
def test_a_judge_whose_task_failed_or_timed_out_is_not_kept(cache_dir, persistent, how):
    assert _verify(cache_dir, cpu_workspace()).correct
    kept = _idle_pids()
    result = _verify(cache_dir, cpu_workspace(), task=_flaky(2, how), timeout_reference=8.0)
    assert result.error.phase == "task" and not result.correct
    assert judges.idle("cpu", None) == []   # the judge that served it was the kept one, and is gone
    assert _verify(cache_dir, cpu_workspace()).correct
    assert _idle_pids() and _idle_pids() != kept


def _printing(mark: str, how: str = "") -> Task:
    """The example task, its reference printing `mark` on every call (to the judge's log) and then `how`."""
    code = (EXAMPLES / "model.py").read_text()
    return Task("printing", code.replace("    def forward(self, x):\n",
                                         f"    def forward(self, x):\n        print({mark!r}, flush=True)\n"
                                         + (f"        {how}\n" if how else "")))


def test_a_kept_judge_s_crash_quotes_its_own_job_s_log_not_the_jobs_before(cache_dir, persistent):
    assert _verify(cache_dir, cpu_workspace(), task=_printing("FIRST-JOB-LINE")).correct
    result = _verify(cache_dir, cpu_workspace(), task=_printing("SECOND-JOB-LINE", "import os; x.is_meta or os._exit(3)"))
    assert result.error.phase == "task" and "SECOND-JOB-LINE" in result.error.message, result.error.message
    assert "FIRST-JOB-LINE" not in result.error.message


def _staging_inodes(pid: int) -> set[str]:
    """The inodes of the staging files mapped in process `pid` (its /proc/PID/maps)."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return {line.split()[4] for line in maps.splitlines() if re.search(r"memfd:cuda-agent-staging", line)}


def test_each_evaluation_hands_the_judge_its_own_staging_file_and_the_last_is_unmapped(cache_dir, persistent,
                                                                                     monkeypatch):
    started = []
    monkeypatch.setattr(judges, "start", lambda *args, real=judges.start: started.append(real(*args)) or started[-1])
    seen = []

    def watch(text: str) -> None:
        if text == "verifying":   # the judge has set up: it maps this evaluation's staging file
            seen.append(_staging_inodes(started[0].proc.pid))

    for _ in range(2):
        assert _verify(cache_dir, cpu_workspace(), progress=watch).correct
    assert len(started) == 1 and len(seen) == 2
    assert len(seen[0]) == 1 and len(seen[1]) == 1 and seen[0] != seen[1]
    wait_for_kept_judges()
    judge = judges.take("cpu", None)   # its answer to NextJob read: it let go of the second job
    try:
        assert judge is started[0] and _staging_inodes(judge.proc.pid) == set()
    finally:
        judge.kill()


def test_idle_judges_are_capped_and_killed_at_discard(cache_dir, persistent, monkeypatch):
    monkeypatch.setattr(judges, "IDLE_PER_GPU", 1)
    extra = judges.start("cpu", None)
    extra.wait_ready()
    assert _verify(cache_dir, cpu_workspace()).correct
    kept = judges.idle("cpu", None)
    assert len(kept) == 1
    wait_for_kept_judges()
    judges.give_back(extra, "cpu", None)   # one over the cap: the newest killed, none lingering
    assert judges.idle("cpu", None) == kept and extra.proc.wait(10) is not None
    judges.discard_all()
    assert judges.idle("cpu", None) == [] and kept[0].proc.wait(10) is not None
    assert not extra.own_dir.exists() or _gone_soon(extra.own_dir)


def _gone_soon(path: Path) -> bool:
    import time

    for _ in range(50):   # removed by the reaper thread once the process has exited
        if not path.exists():
            return True
        time.sleep(0.1)
    return False


def test_a_judge_started_as_a_separate_interpreter_is_kept_too(cache_dir, persistent, monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_FORK_JUDGES", "0")   # its socket inherited by Popen, not the fork server
    assert _verify(cache_dir, cpu_workspace()).correct
    first = _idle_pids()
    assert _verify(cache_dir, cpu_workspace()).correct
    assert first and _idle_pids() == first


def test_what_leaves_a_judge_unfit_for_another_job():
    from cuda_agent.env.workers import messages as msg
    from cuda_agent.env.workers.handover import leaves_doubt

    assert leaves_doubt(msg.Verdicts(answers=[msg.Verdict(ok=False, message="wrong output")])) is None
    assert leaves_doubt(msg.Verdicts(answers=[msg.Verdict(ok=True), msg.Verdict(ok=False, task_error="boom")]))
    assert leaves_doubt(msg.Compiled(ok=True)) is None
    assert "Compiled" in leaves_doubt(msg.Compiled(ok=False, error="inductor failed"))
    assert leaves_doubt(msg.GraphTimed(error="capture failed"))
    assert leaves_doubt(msg.Drawn(ok=False, task_error="get_inputs failed"))


def test_the_torch_settings_a_task_may_change_are_put_back():
    import torch

    from cuda_agent.env.workers.handover import TorchSettings

    settings = TorchSettings()
    before = settings.values
    torch.set_default_dtype(torch.float64)
    torch.set_default_device("meta")
    torch.backends.cudnn.benchmark = not torch.backends.cudnn.benchmark
    torch.use_deterministic_algorithms(not torch.are_deterministic_algorithms_enabled())
    torch.set_float32_matmul_precision("medium" if torch.get_float32_matmul_precision() != "medium" else "high")
    torch.set_anomaly_enabled(True)
    torch.set_flush_denormal(True)
    try:
        changed = TorchSettings().values
        assert {name for name in before if changed[name] != before[name]} >= {   # tf32 follows the precision
            "default_dtype", "default_device", "cudnn_benchmark", "deterministic", "matmul_precision", "anomaly"}
    finally:
        settings.restore()
    assert TorchSettings().values == before and torch.get_default_dtype() == torch.float32
    assert torch.tensor([1e-40]).item() != 0.0   # a denormal kept: not flushed to zero


def test_putting_back_unchanged_settings_sets_nothing(monkeypatch):
    """The deterministic-algorithms setter imports torch._inductor's config (most of a second the
    first time): a job that changed nothing costs no setter."""
    import torch

    from cuda_agent.env.workers import handover

    settings = handover.TorchSettings()
    calls = []
    monkeypatch.setitem(handover._SETTINGS, "deterministic",
                        (handover._deterministic, lambda value: calls.append(value)))
    settings.restore()
    assert calls == []
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        settings.restore()
        assert calls == [(False, False)]
    finally:
        torch.use_deterministic_algorithms(False)


class _FakeJudge:
    """Answers NextJob fit; records whether it was killed."""

    def __init__(self):
        import types

        self.killed = False
        self.channel = types.SimpleNamespace(receive=lambda timeout: {"ok": True}, send=lambda message: None)

    def kill(self):
        self.killed = True


def test_a_judge_is_handed_out_only_once_its_last_candidate_has_exited(monkeypatch):
    """Until the last candidate's process is gone its kernels may write into memory of the judge's
    that it mapped: before, `take` has no judge to give (the caller starts one) once its short wait is
    over; the judge stays idle and is handed out after that exit."""
    import threading
    import types

    judges.discard_all()
    monkeypatch.setattr(judges, "TAKE_WAIT_S", 0.2)
    lingering = types.SimpleNamespace(exited=threading.Event())
    judge = _FakeJudge()
    judges.give_back(judge, "cuda", 0, candidate=lingering)
    began = time.monotonic()
    assert judges.take("cuda", 0) is None and 0.2 <= time.monotonic() - began < 1.0
    assert judges.idle("cuda", 0) == [judge] and not judge.killed
    lingering.exited.set()
    assert judges.take("cuda", 0) is judge and not judge.killed
    judges.discard_all()


def test_an_evaluation_starting_as_the_last_ends_waits_briefly_for_its_judge(monkeypatch):
    """Evaluations one after another (an agent's edit loop): the last one's candidate is still tearing
    down its CUDA context when the next asks for a judge. `take` waits for it (up to TAKE_WAIT_S, less
    than a judge's start) rather than start a second judge; with no judge idle it returns at once."""
    import threading
    import types

    judges.discard_all()
    monkeypatch.setattr(judges, "TAKE_WAIT_S", 5.0)
    began = time.monotonic()
    assert judges.take("cuda", 0) is None and time.monotonic() - began < 0.5   # none idle: no wait
    tearing_down = types.SimpleNamespace(exited=threading.Event())
    judge = _FakeJudge()
    judges.give_back(judge, "cuda", 0, candidate=tearing_down)
    threading.Timer(0.3, tearing_down.exited.set).start()
    began = time.monotonic()
    assert judges.take("cuda", 0) is judge and 0.3 <= time.monotonic() - began < 2.0
    assert not judge.killed and judges.idle("cuda", 0) == []
    judges.discard_all()


def test_a_judge_still_letting_go_of_its_job_is_not_waited_for_past_the_bound(monkeypatch):
    """Its answer to NextJob (garbage collection) not come within TAKE_WAIT_S: `take` hands out a
    judge that has answered, or none; the other stays idle and is handed out once it answers."""
    import types

    from cuda_agent.env.workers.protocol import ChildTimeout

    judges.discard_all()
    monkeypatch.setattr(judges, "TAKE_WAIT_S", 0.2)
    answers = []

    def receive(timeout):
        if not answers:
            raise ChildTimeout("no answer yet")
        return answers.pop()

    slow = _FakeJudge()
    slow.channel = types.SimpleNamespace(receive=receive, send=lambda message: None)
    judges.give_back(slow, "cuda", 0)
    began = time.monotonic()
    assert judges.take("cuda", 0) is None and time.monotonic() - began < 1.0
    ready = _FakeJudge()
    judges.give_back(ready, "cuda", 0)
    assert judges.take("cuda", 0) is ready
    assert judges.idle("cuda", 0) == [slow] and not slow.killed
    answers.append({"ok": True})
    assert judges.take("cuda", 0) is slow and not slow.killed
    judges.discard_all()


def test_over_the_cap_a_judge_whose_candidate_lingers_goes_first(monkeypatch):
    import threading
    import types

    judges.discard_all()
    monkeypatch.setattr(judges, "IDLE_PER_GPU", 2)
    gone, lingering = types.SimpleNamespace(exited=threading.Event()), types.SimpleNamespace(exited=threading.Event())
    gone.exited.set()
    first, second, third = _FakeJudge(), _FakeJudge(), _FakeJudge()
    judges.give_back(first, "cuda", 0, candidate=gone)
    judges.give_back(second, "cuda", 0, candidate=lingering)
    judges.give_back(third, "cuda", 0, candidate=gone)
    assert second.killed and not first.killed and not third.killed
    assert judges.idle("cuda", 0) == [first, third]
    judges.discard_all()


def test_a_judge_whose_last_candidate_is_gone_is_taken_before_an_older_one_still_waiting(monkeypatch):
    import threading
    import types

    judges.discard_all()
    gone, lingering = types.SimpleNamespace(exited=threading.Event()), types.SimpleNamespace(exited=threading.Event())
    gone.exited.set()
    older, newer = _FakeJudge(), _FakeJudge()
    judges.give_back(older, "cuda", 0, candidate=lingering)
    judges.give_back(newer, "cuda", 0, candidate=gone)
    assert judges.take("cuda", 0) is newer   # no wait behind the older one's candidate
    assert judges.idle("cuda", 0) == [older]
    judges.discard_all()
    assert older.killed


def test_a_pool_reuses_kept_judges_over_many_evaluations(cache_dir, persistent, monkeypatch):
    """As a pool runs at scale (evaluations in flight, spares started ahead: candidates alone): honest
    and wrong solutions get a fresh judge's verdicts, and kept judges serve the later evaluations: with
    fresh judges each of those would start one."""
    import asyncio

    from cuda_agent.env import EvalPool

    events = []
    real_start, real_give_back = judges.start, judges.give_back
    monkeypatch.setattr(judges, "start", lambda *a: events.append("start") or real_start(*a))
    monkeypatch.setattr(judges, "give_back", lambda *a, **k: events.append("back") or real_give_back(*a, **k))
    wrong = cpu_workspace(kernel(WRONG_BODY))
    jobs = [(example_task(), wrong if i % 3 == 2 else cpu_workspace()) for i in range(EVALUATIONS)]
    pool = EvalPool(cpu_config(cache_dir, seed=1234, baselines=False, prewarm=True), cpu_slots=1, per_device=2,
                    processes=False)
    results = asyncio.run(pool.evaluate_many(jobs))
    assert [r.correct for r in results] == [i % 3 != 2 for i in range(EVALUATIONS)], [r.error for r in results]
    assert all(r.kernel_ms > 0 for r in results if r.correct)
    later = events[[i for i, event in enumerate(events) if event == "back"][3]:]   # from the fourth one back
    assert later.count("back") == EVALUATIONS - 3
    assert later.count("start") <= 2, events
    assert len(judges.idle("cpu", None)) <= judges.IDLE_PER_GPU


EVALUATIONS = 12
