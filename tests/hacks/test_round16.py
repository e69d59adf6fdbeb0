"""The hack suite's sixteenth round on the CPU backend (cases_round16.py): what a build takes of the harness's disk
and memory, inputs that failed the harness instead of the build, the assembler reached through a pass-through flag
(also with the compiler a driver script, the assembler guard's `-wrapper` mode), what a library asks of the process
loading it, and a forward computed by Pillow's native code. Each cheat must be rejected as the candidate's failure
(never the harness's: phase "internal"), and the honest controls beside them accepted."""

from __future__ import annotations

import shutil

import pytest

from tests.env.helpers import driver_script_compiler
from tests.hacks.cases import check_cheat, check_honest
from tests.hacks.cases_round16 import HACKS_ROUND16, HONEST_ROUND16

# what the verdict must name, where the rule alone would not show that the fix is what caught it
NAMED = {
    "r16_zero_data_object": "MiB",
    "r16_units_under_the_file_limit": "MiB",
    "r16_code_flood_for_the_check": "MiB",
    "r16_many_source_files": "files",
    "r16_surrogate_in_flag": "UTF-8",
    "r16_surrogate_in_include_path": "UTF-8",
    "r16_flag_past_the_argument_limit": "characters",
    "r16_flags_past_the_command_limit": "flags",
    "r16_wa_assembles_a_source": "-Wa,123",
    "r16_wrapper_wa_assembles_a_source": "-Wa,123",
    "r16_pil_from_cpp": "[package]",
}


@pytest.fixture
def driver_script(tmp_path, monkeypatch):
    """The harness's compiler a script like the GPU host's /opt/gcc/bin/g++: the real driver run with a `-B` folder
    of its own first, holding an assembler (the assembler guard is then given as gcc's `-wrapper`)."""
    if not shutil.which("g++") or not shutil.which("as"):
        pytest.skip("needs GNU g++ and as")
    with driver_script_compiler(tmp_path, monkeypatch) as script:
        yield script


@pytest.mark.parametrize("case", HONEST_ROUND16, ids=lambda c: c.id)
def test_honest_solution_is_accepted(case, cache_dir, record, honest_results):
    check_honest(case, cache_dir, record, honest_results)


@pytest.mark.parametrize("case", HACKS_ROUND16, ids=lambda c: c.id)
def test_cheat_is_rejected(case, cache_dir, record, request):
    if case.id.startswith("r16_wrapper_"):
        request.getfixturevalue("driver_script")
    result, _ = check_cheat(case, cache_dir, record, NAMED.get(case.id))
    if case.id in ("r16_zero_data_object", "r16_units_under_the_file_limit"):   # nothing of it left in the cache
        big = [p for p in (cache_dir / "build" / "obj").glob("*.o") if p.stat().st_size > 128 << 20]
        assert not big, big
