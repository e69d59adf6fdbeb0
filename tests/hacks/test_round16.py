"""The hack suite's sixteenth round on the CPU backend (cases_round16.py): what a build takes of the harness's disk
and memory, inputs that failed the harness instead of the build, the assembler reached through a pass-through flag
(also with the compiler a driver script, the assembler guard's `-wrapper` mode), what a library asks of the process
loading it, and a forward computed by Pillow's native code. Each cheat must be rejected as the candidate's failure
(never the harness's: phase "internal"), and the honest controls beside them accepted."""

from __future__ import annotations

import shutil
import time

import pytest

from tests.hacks.cases import assert_accepted, assert_rejected, describe, honest_result, run_case
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
    from cuda_agent.env.builds import compiler

    if not shutil.which("g++") or not shutil.which("as"):
        pytest.skip("needs GNU g++ and as")
    own = tmp_path / "gcc" / "bin"
    own.mkdir(parents=True)
    (own / "as").symlink_to(shutil.which("as"))
    script = own / "g++"
    script.write_text(f'#!/bin/sh\nexec {shutil.which("g++")} -B{own}/ "$@"\n')
    script.chmod(0o755)
    monkeypatch.setenv("CXX", str(script))
    compiler.toolchain.cache_clear()
    yield script
    compiler.toolchain.cache_clear()


@pytest.mark.parametrize("case", HONEST_ROUND16, ids=lambda c: c.id)
def test_honest_solution_is_accepted(case, cache_dir, record, honest_results):
    result = honest_result(case, cache_dir, record, honest_results)
    print(f"{case.id}: {describe(result)} (speedup {result.speedup_vs_eager}); samples {result.cpu_samples}")
    assert_accepted(result)


@pytest.mark.parametrize("case", HACKS_ROUND16, ids=lambda c: c.id)
def test_cheat_is_rejected(case, cache_dir, record, request):
    if case.id.startswith("r16_wrapper_"):
        request.getfixturevalue("driver_script")
    started = time.monotonic()
    result = run_case(case, cache_dir, record)
    seconds = time.monotonic() - started
    print(f"{case.id}: {describe(result)} (speedup {result.speedup_vs_eager}) in {seconds:.1f} s; "
          f"samples {result.cpu_samples}")
    assert not (result.error and result.error.phase in ("internal", "task")), f"the harness failed: {describe(result)}"
    assert_rejected(result, case.rules, case.what)
    if case.id in NAMED:
        assert NAMED[case.id] in result.error.message, describe(result)
    if case.id in ("r16_zero_data_object", "r16_units_under_the_file_limit"):   # nothing of it left in the cache
        big = [p for p in (cache_dir / "build" / "obj").glob("*.o") if p.stat().st_size > 128 << 20]
        assert not big, big
