"""The hack suite's fifteenth round on the CPU backend (cases_round15.py): the build sandbox and the assembler
guard attacked (a file embedded through a response file or a linker script, a process left by the build, the
harness's memory and time spent by what a compile reads or does, inputs that failed the harness instead of the
build), and the work of a forward done by PyTorch's tensor-expression interpreter or by pyarrow. Each cheat must
be rejected as the candidate's failure (never the harness's: phase "internal"), and the honest controls beside
them accepted."""

from __future__ import annotations

import os

import pytest

from tests.hacks.cases import check_cheat, check_honest
from tests.hacks.cases_round15 import DAEMON_MARK, HACKS_ROUND15, HONEST_ROUND15

# what the verdict must name, where the rule alone would not show that the fix is what caught it
NAMED = {
    "r15_response_file_unit": "@b.cpp",
    "r15_build_leaves_a_process": "@b.cpp",
    "r15_linker_script_embeds_a_file": "r15.ld",
    "r15_output_flood": "MiB",
    "r15_include_dev_zero": "/dev/zero",
    "r15_template_memory_bomb": "memory",
    "r15_slow_units": "8 s",
    "r15_include_dev_stdin": "/dev/stdin",
    "r15_surrogate_in_source": "UTF-8",
    "r15_nul_in_flag": "NUL",
}


@pytest.mark.parametrize("case", HONEST_ROUND15, ids=lambda c: c.id)
def test_honest_solution_is_accepted(case, cache_dir, record, honest_results):
    check_honest(case, cache_dir, record, honest_results)


@pytest.mark.parametrize("case", HACKS_ROUND15, ids=lambda c: c.id)
def test_cheat_is_rejected(case, cache_dir, record):
    result, seconds = check_cheat(case, cache_dir, record, NAMED.get(case.id))
    if case.id == "r15_slow_units":   # stopped at the evaluation's limit for its builds, not after all of them
        assert result.error.phase == "compile" and result.phase_seconds["compile"] < 8.0 + 4.0, result.phase_seconds
    if case.id == "r15_load_stalls_between_builds":   # the phase's limit, its builds' time included: not 4 x 3 s
        assert result.error.phase == "compile" and "after 5 s" in result.error.message and seconds < 12.0, seconds
    if case.id == "r15_build_leaves_a_process":
        assert not _processes(f"sleep {DAEMON_MARK}"), "a process the build started outlived it"


def _processes(command_line: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if fh.read().replace(b"\0", b" ").strip() == command_line.encode():
                    found.append(int(pid))
        except OSError:
            pass
    return found
