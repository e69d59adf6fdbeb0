"""The hack suite's thirteenth round (cases_round13.py): a spare's candidate (kept judges: the candidate
alone, its staging file held by the harness until its evaluation takes a judge) and the staging file it
shares with that judge; failures of the candidate's own that the harness would record as its own; ATen's
code run from a file of the candidate's own; and the link check's other names for what it refuses. The
kept-judge cases let the flag apply to the CPU backend (`judges.BACKENDS`), as round twelve's do, and run
with spares (`prewarm`); each asserts that the judge was in fact kept and the candidate a spare's."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.env.helpers import wait_for_kept_judges
from tests.hacks.cases import assert_accepted, assert_rejected, describe, hack_config
from tests.hacks.cases_round12 import recorder, replayer
from tests.hacks.cases_round13 import (
    HONEST, LIBC_ALIASES, LIBC_ALIASES_SOURCE, cloaked, honest, loader, odd_mapping, puncher, renamed, report_of,
    reporter,
)

from cuda_agent.env import evaluate
from cuda_agent.env.infra import judges, spares
from cuda_agent.env.rules.symbols import check_library, check_symbol

PYTORCH_RULES = ("torch-op", "protocol-forgery")


def assert_verified(result) -> None:
    """Accepted by verification (an evaluation that stopped after it: no time, no reward yet)."""
    assert result.error is None and result.correct, describe(result)


def assert_own_failure(result, rules: tuple[str, ...], what: str) -> None:
    """Rejected (-1) by one of `rules`: the candidate's failure, never the harness's or the task's (which
    RL scoring drops instead of scoring)."""
    assert result.error is None or result.error.phase not in ("internal", "task"), \
        f"the candidate's doing recorded as the harness's ({what}): {describe(result)}"
    assert_rejected(result, rules, what)


@pytest.fixture
def kept_spares(monkeypatch, cache_dir):
    """Evaluates a (task, solution) with persistent judges on (CPU too) and `prewarm` spares; returns
    (result, the idle judge's pid or None, whether its candidate was a spare's)."""
    monkeypatch.setenv(judges.ENV, "1")
    monkeypatch.setattr(judges, "BACKENDS", {"cuda", "cpu"})
    judges.discard_all()
    spares.discard_all()
    taken: list = []
    real_take = spares.take
    monkeypatch.setattr(spares, "take", lambda key: taken.append(real_take(key)) or taken[-1])

    def run(built, stop_after="verify", prewarm=1, **settings):
        task, solution = built
        wait_for_kept_judges()   # else the evaluation may start a judge of its own
        taken.clear()
        result = evaluate(task, solution, hack_config(cache_dir, prewarm=prewarm, **settings), stop_after=stop_after)
        idle = judges.idle("cpu", None)
        assert len(idle) <= 1, idle
        from_spare = bool(taken) and taken[0] is not None and taken[0].judge is None
        return result, (idle[0].proc.pid if idle else None), from_spare

    yield run
    spares.discard_all()
    judges.discard_all()


def test_a_spare_candidate_finds_nothing_the_last_evaluation_left(kept_spares):
    """Round twelve's recorder, then its replayer on a spare started while the recorder was evaluated (the
    harness held that spare's staging file meanwhile), on the same kept judge: twice."""
    pids = set()
    kept_spares(honest())   # a spare waits from here on
    for _ in range(2):
        recorded, pid, _ = kept_spares(recorder(), stop_after=None)
        assert_accepted(recorded)
        replayed, again, from_spare = kept_spares(replayer())
        assert_rejected(replayed, ("correctness",), "the replayer found the recording")
        assert from_spare, "the replayer's candidate was not a spare's"
        pids |= {pid, again}
    assert len(pids) == 1 and None not in pids, pids   # one judge served them all


def test_a_spare_candidate_holds_its_own_blank_sealed_staging_file_only(kept_spares):
    """After a recorder, two candidates taken from spares (two wait: their staging files open in the
    harness beside the judge's) each hold one memory file, their own staging file: sealed against
    resizing and resealing, blank, and a new file each time (not the last evaluation's)."""
    kept_spares(recorder(), prewarm=2)
    views = []
    for _ in range(2):
        result, _, from_spare = kept_spares(reporter("cuda_extension.staging_view()"), prewarm=2)
        views.append(report_of(result))
        assert from_spare, "the candidate was not a spare's"
    seals = 0x1 | 0x2 | 0x4   # F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW
    parsed = [dict(field.split("=") for field in view.split()) for view in views]
    for view, fields in zip(views, parsed):
        assert fields["memfds"] == "1" and fields["nonzero"] == "0", view
        assert int(fields["seals"]) == seals, view
    assert parsed[0]["inode"] != parsed[1]["inode"], views


def test_the_staging_file_cannot_be_changed_under_the_judge(kept_spares):
    """A candidate that would have the kept judge's next draw into the staging file fail (its evaluation the
    harness's failure, the judge killed) finds the file's seals and size fixed; one that punches holes over
    the inputs the judge put is rejected for it (its own failure), and leaves the judge kept and fit."""
    first, pid, _ = kept_spares(honest())
    assert_verified(first)
    tried, _, _ = kept_spares(reporter("cuda_extension.reshape()"))
    report = report_of(tried)
    assert re.fullmatch(r"seal_write=EPERM seal_future_write=EPERM shrink=EPERM grow=EPERM fallocate_grow=EPERM "
                        r"size_after=same", report), report
    punched, after, from_spare = kept_spares(puncher())
    assert_own_failure(punched, ("input-mutation",), "holes punched over the judge's inputs")
    assert from_spare and after == pid, (from_spare, pid, after)   # its own failure: the judge was kept
    fine, again, _ = kept_spares(honest(), stop_after=None)
    assert_accepted(fine)
    assert again == pid


BLAME = [   # (a wrong solution with the trick, its honest twin)
    (renamed, "a main thread named with bytes that are not UTF-8"),
    (odd_mapping, "a memory file named with bytes that are not UTF-8, mapped"),
]


@pytest.mark.parametrize("build,what", BLAME, ids=["thread_name", "mapping_name"])
def test_what_the_harness_cannot_decode_is_the_candidates_failure(build, what, cache_dir):
    """A wrong solution that leaves the harness something it reads and cannot decode (a thread's name in
    /proc/PID/task/TID/stat, read to stop it; a mapping's name in /proc/PID/maps, read by the sampler after
    every call) is still rejected as wrong, not recorded as the harness's failure (phase "internal", which
    RL scoring drops instead of scoring -1); the honest twin is accepted."""
    wrong = evaluate(*build(), hack_config(cache_dir), stop_after="verify")
    assert_own_failure(wrong, ("correctness",), what)
    fine = evaluate(*build(HONEST), hack_config(cache_dir), stop_after="verify")
    assert_verified(fine)


CLOAKS = [
    ("magic", "a first page with the ELF magic and nothing readable after it"),
    ("empty", "a valid ELF header with no program or section headers"),
]


@pytest.mark.parametrize("how,what", CLOAKS, ids=[how for how, _ in CLOAKS])
def test_aten_code_run_from_a_file_of_the_candidates_own_is_sampled_against_it(how, what, cache_dir):
    """ATen does the work, from libtorch_cpu.so's code copied into a file of the box and mapped over the
    original: the file's samples (it holds no library the process loaded, as `what` says) count as code no
    library holds, as round ten's copy into anonymous memory does."""
    result = evaluate(*cloaked(how), hack_config(cache_dir), stop_after="verify")
    print(f"{how}: {describe(result)}; samples {result.cpu_samples}")
    assert_own_failure(result, PYTORCH_RULES, what)


def test_aten_code_run_from_an_elf_file_of_the_candidates_own_is_sampled_against_it(cache_dir):
    """The same file with a header that loads the code (one PT_LOAD, R+X, over it) and no symbol table, as a
    system library's unexported code looks: its samples count against the candidate all the same, as the
    file lies where it could write it (its box)."""
    result = evaluate(*cloaked("loaded"), hack_config(cache_dir), stop_after="verify")
    print(f"loaded: {describe(result)}; samples {result.cpu_samples}")
    assert_own_failure(result, PYTORCH_RULES, "an ELF file of its own that loads the code, without symbols")


def test_atens_loader_is_refused_at_link(cache_dir):
    """at::DynamicLibrary is dlopen and dlsym under another name: a library that imports it could reach any
    function the link check refuses by name (here Python, run from native code)."""
    result = evaluate(*loader(), hack_config(cache_dir, prewarm=False), stop_after="verify")
    assert_own_failure(result, ("native-symbol",), "PyRun_SimpleStringFlags reached through at::DynamicLibrary")
    assert "DynamicLibrary" in result.error.message, describe(result)


@pytest.mark.parametrize("alias", sorted(LIBC_ALIASES))
def test_the_c_librarys_other_names_for_refused_calls_are_refused(alias):
    assert check_symbol(alias), f"{alias} ({LIBC_ALIASES[alias]}) passes the link check"


@pytest.mark.skipif(shutil.which("cc") is None, reason="a C compiler builds the library")
def test_a_library_importing_the_c_librarys_other_names_is_refused(tmp_path):
    """The same names as a built library imports them (`nm -D`), each named in the refusal."""
    source = tmp_path / "aliases.c"
    source.write_text(LIBC_ALIASES_SOURCE)
    library = tmp_path / "libaliases.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True, capture_output=True)
    refused = {finding.symbol for finding in check_library(library)}
    assert refused >= set(LIBC_ALIASES), sorted(set(LIBC_ALIASES) - refused)
