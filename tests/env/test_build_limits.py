"""What a solution's build may ask of the harness (builds/step.py, builds/compiler.py, rules build-input and
build-limit): sources whose names a compiler reads as options or argument files, and inputs the harness could not
even write, refused before any compiler runs; each step's output, memory and the whole build's time limited; the
link shown the objects only, so no source of the solution's is read as a linker script."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from cuda_agent.env.builds import build_sandbox, compiler, step
from cuda_agent.env.builds.compiler import BuildError, build_extension
from cuda_agent.env.config import EvalConfig
from cuda_agent.env.rules.build_flags import source_name_problem
from cuda_agent.env.rules.registry import BUILD_INPUT, BUILD_LIMIT

needs_sandbox = pytest.mark.skipif(not build_sandbox.sandboxed(None), reason="bubblewrap does not work here")
SPECS = "*invoke_as:\n%{!S:-o %|.s |\n /usr/bin/as %(asm_options) %m.s %A }\n\n"


@pytest.mark.parametrize("name", ["@b.cpp", "-specs=x.cpp", "sub/@b.cpp", "a;sleep 9;.cu", "$(id).cu", "x y.cpp",
                                  "sub/../k.cpp", "./k.cpp", "#include", "k\x00.h", ""])
def test_a_name_a_compiler_or_shell_reads_as_more_than_a_file_is_refused(name):
    assert source_name_problem(name)


@pytest.mark.parametrize("name", ["k.cpp", "kernels/my-kernel.cu", "kernels/sub/a+b_2.cuh", "model.v2.hpp"])
def test_plain_names_pass(name):
    assert source_name_problem(name) is None


def test_a_source_named_as_an_argument_file_is_refused_before_any_compile(tmp_path):
    """`@b.cpp` on gcc's command line is the words of b.cpp: here a specs file of the solution's that runs the
    real assembler, not the guard, on a unit that embeds a file (what got a library through, before)."""
    files = {"@b.cpp": "int unused;\n", "b.cpp": "// -DEMBED -specs=r.specs b.cpp\nint b = 1;\n", "r.specs": SPECS}
    with pytest.raises(BuildError) as refused:
        build_extension("cuda_extension", files, "cpu", tmp_path / "cache")
    assert refused.value.rule is BUILD_INPUT and "'@b.cpp'" in refused.value.summary
    assert not (tmp_path / "cache" / "obj").exists() or not list((tmp_path / "cache" / "obj").iterdir())


@pytest.mark.parametrize("files, flags", [
    ({"k.cpp": "// \udc80\nint x;\n"}, {}),
    ({"k.cpp": "int x;\n"}, {"extra_cflags": ["-DX=a\x00b"]}),
    ({"k.cpp": "int x;\n"}, {"extra_ldflags": ["-lm\n"]}),
    ({"k.cpp": "int x;\n"}, {"extra_include_paths": ["inc\x00"]}),
    ({"k.cpp": "int x;\n"}, {"extra_cflags": ["-DX=\ud800"]}),
    ({"k.cpp": "int x;\n"}, {"extra_include_paths": ["\ud800"]}),
    ({"k.cpp": "int x;\n"}, {"extra_cflags": ["-DX=" + "a" * 200_000]}),
    ({"k.cpp": "int x;\n"}, {"extra_include_paths": ["a" * 200_000]}),
    ({"k.cpp": "int x;\n"}, {"extra_cflags": ["-O3"] * 300_000}),
    ({"k.cpp": "int x;\n", **{f"h{i}.h": "" for i in range(600)}}, {}),
    ({"k.cpp": "int x;\n", "big.h": "//" + "x" * (33 << 20)}, {}),
], ids=["surrogate", "nul-in-define", "newline-in-ldflag", "nul-in-include-path", "surrogate-in-flag",
        "surrogate-in-include-path", "flag-past-the-argument-limit", "include-path-past-the-argument-limit",
        "flags-past-the-command-limit", "too-many-files", "too-much-text"])
def test_inputs_the_harness_could_not_pass_on_are_the_builds_failure(files, flags, tmp_path):
    with pytest.raises(BuildError) as refused:
        build_extension("cuda_extension", files, "cpu", tmp_path / "cache", **flags)
    assert refused.value.rule is BUILD_INPUT


def test_sources_that_cannot_be_written_are_the_builds_failure(tmp_path):
    files = {"a.cpp": "int a;\n", "a.cpp/b.h": "#define B 1\n"}   # a file and a folder of one name
    with pytest.raises(BuildError) as refused:
        build_extension("cuda_extension", files, "cpu", tmp_path / "cache")
    assert refused.value.rule is BUILD_INPUT and "could not be written" in refused.value.summary


@needs_sandbox
def test_the_link_reads_no_source_as_a_linker_script(tmp_path):
    """`-L. -l:r.ld` on the allowlist named the solution's text file, which the linker read as a script embedding
    a file (TARGET(binary) INPUT(...)): the link runs in its output folder and is shown the objects alone."""
    embedded = Path("/usr/include/stdio.h")
    files = {"k.cpp": "int k() { return 1; }\n", "r.ld": f"TARGET(binary)\nINPUT({embedded})\n"}
    with pytest.raises(BuildError) as failed:
        build_extension("cuda_extension", files, "cpu", tmp_path / "cache", extra_ldflags=["-L.", "-l:r.ld"])
    assert failed.value.summary.startswith("linking failed") and "r.ld" in failed.value.summary


@needs_sandbox
def test_no_device_that_reads_without_end_is_in_the_compilers_reach(tmp_path):
    source = "".join(f'#if __has_include("/dev/{d}")\n#error /dev/{d}\n#endif\n'
                     for d in ("zero", "urandom", "random", "full", "tty", "stdin", "shm"))
    build_extension("cuda_extension", {"k.cpp": source + "int x = 1;\n"}, "cpu", tmp_path / "cache")


@needs_sandbox
def test_a_compile_printing_past_the_limit_is_stopped(tmp_path):
    """An #include of a binary library prints an error for nearly every byte (about 500 MB for 1 MB of it)."""
    import torch

    library = Path(torch.__file__).parent / "lib" / "libc10.so"
    with pytest.raises(BuildError) as stopped:
        build_extension("cuda_extension", {"k.cpp": f'#include "{library}"\n'}, "cpu", tmp_path / "cache")
    assert stopped.value.rule is BUILD_LIMIT and "MiB" in stopped.value.summary
    assert len(stopped.value.log) < step.OUTPUT_LIMIT + 4096


BOMB = ("template <int N, unsigned long P> struct T {\n"
        "    static constexpr unsigned long v = T<N - 1, 2 * P>::v + T<N - 1, 2 * P + 1>::v;\n};\n"
        "template <unsigned long P> struct T<0, P> { static constexpr unsigned long v = P; };\n"
        "extern const unsigned long bomb = T<40, 1>::v;\n")


def test_a_compile_past_its_memory_is_stopped_there(tmp_path):
    """2^40 class templates: about 160 MB a second of the compiler's memory, without end but for the limit."""
    with pytest.raises(BuildError) as stopped:
        build_extension("cuda_extension", {"k.cpp": BOMB}, "cpu", tmp_path / "cache", memory_gb=0.25)
    assert stopped.value.rule is BUILD_LIMIT and "ran out of memory" in stopped.value.summary


def test_the_timeout_bounds_the_whole_build_not_each_step(tmp_path, monkeypatch):
    """Units each well within the timeout, together past it: the build stops at its timeout. (Each compile is
    a stand-in that takes 0.6 s and writes its object.)"""
    def slow_compile(command, cwd, env, timeout):
        if timeout is not None and timeout < 0.6:
            raise subprocess.TimeoutExpired(command, timeout)
        time.sleep(0.6)
        Path(command[command.index("-o") + 1]).write_bytes(b"")
        return 0, ""

    monkeypatch.setattr(compiler.step, "run", slow_compile)
    files = {f"u{i}.cpp": f"int u{i};\n" for i in range(4)}
    with pytest.raises(BuildError) as stopped:
        build_extension("cuda_extension", files, "cpu", tmp_path / "cache", timeout=1.5, max_jobs=1, sandbox=False)
    assert stopped.value.rule is BUILD_LIMIT and "longer than 1.5 s" in stopped.value.summary


def test_a_step_gets_no_standard_input_and_its_output_is_capped():
    status, output = step.run(["cat"], "/", None, 10)
    assert (status, output) == (0, "")
    with pytest.raises(step.Flooded) as flooded:
        step.run(["yes", "an error line"], "/", None, 30)
    assert len(flooded.value.output) <= step.OUTPUT_LIMIT


def test_a_step_past_its_time_is_killed_with_its_children(tmp_path):
    marker = tmp_path / "child-ran"
    with pytest.raises(subprocess.TimeoutExpired):
        step.run(["/bin/sh", "-c", f"(sleep 1.5; touch {marker}) & sleep 30"], "/", None, 0.5)
    time.sleep(2.0)
    assert not marker.exists(), "the step's child outlived it"


def test_memory_limited_sets_the_data_limit():
    status, output = step.run(step.memory_limited(["/bin/sh", "-c", "ulimit -d"], 3 << 30), "/", None, 10)
    assert status == 0 and output.strip() == str(3 << 20)


def test_build_memory_gb_is_checked_and_defaults_to_a_quarter_of_the_machine():
    with pytest.raises(ValueError):
        EvalConfig(build_memory_gb=0)
    machine = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert build_sandbox.step_memory(None) == max(4 << 30, machine // 4)
    assert build_sandbox.step_memory(1.5) == 3 << 29


@pytest.mark.parametrize("flag", ["-Wa,123", "-Wp,-v", "-Wl,-v", "-Xcompiler=-Wa,-v", "-O3,-Wa"])
def test_pass_through_flags_are_refused_whole_or_split_at_their_commas(flag, tmp_path):
    """`-Wa,123` was read as the parts `-Wa` (a warning, it seemed) and `123` (nvcc's number): the assembler then read
    a file of the solution's named 123."""
    with pytest.raises(BuildError) as refused:
        build_extension("cuda_extension", {"k.cpp": "int x;\n", "123": ".long 1\n"}, "cpu", tmp_path / "cache",
                        extra_cflags=[flag])
    assert refused.value.rule is BUILD_INPUT and flag in refused.value.summary


def test_warnings_beginning_with_a_l_or_p_still_pass():
    from cuda_agent.env.rules.build_flags import check_flags

    assert check_flags(["-Wall", "-Wpedantic", "-Wlogical-op", "-Wno-unused", "-Xcompiler=-Wall,-O3"], "cflags")


def test_a_step_writing_a_file_past_the_limit_is_stopped(tmp_path, monkeypatch):
    """A zero-initialised array is an object of its size, written in a second with no memory to speak of."""
    monkeypatch.setattr(step, "FILE_LIMIT", 4 << 20)
    with pytest.raises(BuildError) as stopped:
        build_extension("cuda_extension", {"k.cpp": "char big[8 << 20] = {1};\n"}, "cpu", tmp_path / "cache")
    assert stopped.value.rule is BUILD_LIMIT and "larger than 4 MiB" in stopped.value.summary
    assert not list((tmp_path / "cache" / "obj").glob("*.o"))
    assert build_extension("cuda_extension", {"k.cpp": "char big[2 << 20] = {1};\n"}, "cpu", tmp_path / "cache").path


def test_a_build_whose_objects_add_up_past_the_limit_is_stopped_and_leaves_none(tmp_path, monkeypatch):
    monkeypatch.setattr(compiler, "BUILD_BYTES_LIMIT", 5 << 20)
    files = {f"u{u}.cpp": f"char data{u}[2 << 20] = {{1}};\n" for u in range(4)}   # each under every limit alone
    with pytest.raises(BuildError) as stopped:
        build_extension("cuda_extension", files, "cpu", tmp_path / "cache", max_jobs=1)
    assert stopped.value.rule is BUILD_LIMIT and "more than 5 MiB" in stopped.value.summary
    assert not list((tmp_path / "cache" / "obj").glob("*.o"))


def test_memory_limited_sets_the_file_size_limit():
    status, output = step.run(step.memory_limited(["/bin/sh", "-c", "ulimit -f"], None, 3 << 20), "/", None, 10)
    assert status == 0 and int(output.strip()) * 512 == 3 << 20
