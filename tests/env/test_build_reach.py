"""What a solution's sources reach while the harness builds them: the compiler runs in a sandbox that
shows the toolchain, the system and the job's own files (builds/build_sandbox.py), so an `#include` of a
host file finds nothing; and what reaches the assembler is read first (builds/as_guard.py), so no file the
sandbox still shows (a library's machine code) is embedded with `.incbin` or `.include`, however spelled."""

from __future__ import annotations

import shutil

import pytest

from cuda_agent.env.builds import build_sandbox, compiler
from cuda_agent.env.builds.compiler import BuildError, build_extension
from cuda_agent.env.rules.registry import ASM_DIRECTIVE
from tests.env.helpers import HONEST_BODY, cpu_config, cpu_workspace, driver_script_compiler, example_task, kernel

needs_sandbox = pytest.mark.skipif(not build_sandbox.sandboxed(None), reason="bubblewrap does not work here")
SECRET = "HARNESS-SECRET-7f3a"


@needs_sandbox
def test_a_source_cannot_read_files_outside_its_own_folder(tmp_path):
    secret = tmp_path / "harness_secret.txt"
    secret.write_text(f"{SECRET}\n")
    with pytest.raises(BuildError) as failed:
        build_extension("cuda_extension", {"k.cpp": f'#include "{secret}"\n'}, "cpu", tmp_path / "cache")
    assert SECRET not in str(failed.value) and SECRET not in failed.value.log


@needs_sandbox
def test_another_solutions_sources_in_the_build_cache_are_out_of_reach(tmp_path):
    cache = tmp_path / "cache"
    build_extension("other", {"other.cpp": f'const char* other_secret = "{SECRET}";\n'}, "cpu", cache)
    (other,) = (cache / "src").glob("*/other.cpp")
    with pytest.raises(BuildError) as failed:
        build_extension("cuda_extension", {"k.cpp": f'#include "{other}"\nint x = 1;\n'}, "cpu", cache)
    assert "No such file" in failed.value.summary and SECRET not in failed.value.log


@needs_sandbox
def test_the_compiler_sees_no_process_of_the_harness(tmp_path):
    """No /proc: the compiler's own environment (the harness's, where it ran unsandboxed) and its
    mounts (the harness's paths) are not in reach of an #include."""
    source = '#if __has_include("/proc/self/environ")\n#error /proc in reach\n#endif\nint x = 1;\n'
    build_extension("cuda_extension", {"k.cpp": source}, "cpu", tmp_path / "cache")


def test_the_jobs_own_headers_and_include_folders_are_still_in_reach(tmp_path):
    files = {"k.cpp": '#include "sub/own.h"\n#include "extra.h"\nint x = OWN + EXTRA;\n',
             "sub/own.h": "#define OWN 3\n", "inc/extra.h": "#define EXTRA 4\n"}
    report = build_extension("cuda_extension", files, "cpu", tmp_path / "cache", extra_include_paths=["inc"])
    assert report.path.exists()


# how a source could spell `.incbin` of a file beside the library's (one the sandbox shows)
EMBEDDINGS = {
    "asm string": 'asm(".incbin \\"/etc/hostname\\"");\n',
    "literal concatenation": '#define DIRECTIVE ".inc" "bin"\nasm(DIRECTIVE " \\"/etc/hostname\\"");\n',
    "macro-built": ('#define CAT(a, b) a##b\n#define STR_(x) #x\n#define STR(x) STR_(x)\n'
                    'asm("." STR(CAT(inc, bin)) " \\"/etc/hostname\\"");\n'),
    "assembler macro": 'asm(".macro embed d\\n.\\\\d \\"/etc/hostname\\"\\n.endm\\nembed incbin\\n");\n',
    "comment inside the name": 'asm(".inc/**/bin \\"/etc/hostname\\"");\n',
    "upper case": 'asm(".INCBIN \\"/etc/hostname\\"");\n',
    "include": 'asm(".include \\"/etc/hostname\\"");\n',
}


@pytest.mark.parametrize("spelling", sorted(EMBEDDINGS))
def test_a_file_embedded_at_the_assembler_is_refused(spelling, tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(BuildError) as refused:
        build_extension("cuda_extension", {"k.cpp": EMBEDDINGS[spelling] + "int x = 1;\n"}, "cpu", cache)
    assert refused.value.rule is ASM_DIRECTIVE
    assert refused.value.summary.startswith("compiling k.cpp was refused (rule asm-directive)")
    assert ("`.include`" if spelling == "include" else "`.macro`" if spelling == "assembler macro" else "`.incbin`") \
        in refused.value.summary.split(";")[0]
    assert not list((cache / "obj").glob("*.o")) and not (cache / "lib").exists()


def test_unsandboxed_the_assembler_guard_still_refuses(tmp_path):
    cache = tmp_path / "cache"
    with pytest.raises(BuildError) as refused:
        build_extension("cuda_extension", {"k.cpp": EMBEDDINGS["literal concatenation"]}, "cpu", cache, sandbox=False)
    assert refused.value.rule is ASM_DIRECTIVE
    assert build_extension("cuda_extension", {"k.cpp": "int x = 1;\n"}, "cpu", cache, sandbox=False).path.exists()


needs_nvcc = pytest.mark.skipif(compiler.find_cuda_home() is None or not shutil.which("gcc"),
                                reason="nvcc (the CUDA toolkit) compiles .cu files")
HONEST_CU = "__global__ void add_one(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] += 1.f; }\n"


@needs_nvcc
@pytest.mark.parametrize("steps", ["1", "0"])
def test_nvccs_host_compiler_assembles_through_the_guard(steps, tmp_path, monkeypatch):
    """nvcc's host side (cudafe++'s output, compiled by gcc) reaches the assembler through the guard,
    both with nvcc's steps run side by side (nvcc_steps) and as nvcc runs them; an honest unit compiles
    (its link needs torch's CUDA libraries, absent from a CPU build of torch)."""
    monkeypatch.setenv("CUDA_AGENT_NVCC_STEPS", steps)
    monkeypatch.setenv("CUDA_AGENT_CUDA_ARCH", "90a")
    cache = tmp_path / "cache"
    with pytest.raises(BuildError) as refused:
        build_extension("cuda_extension", {"k.cu": HONEST_CU + EMBEDDINGS["asm string"]}, "cuda", cache)
    assert refused.value.rule is ASM_DIRECTIVE and "compiling k.cu was refused" in refused.value.summary
    try:
        build_extension("cuda_extension", {"k.cu": HONEST_CU}, "cuda", cache)
    except BuildError as exc:
        assert exc.summary.startswith("linking failed"), exc.summary


@pytest.mark.parametrize("where", ["workspace", "load_inline"])
def test_an_evaluation_refused_at_the_assembler_names_the_rule(where, cache_dir):
    from cuda_agent.env import evaluate

    embed = 'asm(".incbin \\"/etc/hostname\\"");\n'
    if where == "workspace":
        solution = cpu_workspace(embed + kernel(HONEST_BODY))
    else:
        model_new = (cpu_workspace().files["model_new.py"].rstrip() + "\n\n"
                     "from torch.utils.cpp_extension import load_inline\n"
                     f"load_inline('embedded', cpp_sources={embed!r} + 'int f() {{ return 1; }}', functions=['f'])\n")
        solution = cpu_workspace(model_new=model_new)
    result = evaluate(example_task(), solution, cpu_config(cache_dir, baselines=False), stop_after="compile")
    assert result.error is not None and result.error.phase == "compile", result.error
    assert result.error.rule == ASM_DIRECTIVE.name and "`.incbin`" in result.error.message


@pytest.fixture
def driver_script(tmp_path, monkeypatch):
    with driver_script_compiler(tmp_path, monkeypatch) as script:
        yield script


@pytest.mark.skipif(not shutil.which("g++") or not shutil.which("as"), reason="needs GNU g++ and as")
def test_a_driver_script_whose_own_assembler_comes_first_still_assembles_through_the_guard(driver_script, tmp_path):
    from cuda_agent.env.builds import as_guard

    cache = tmp_path / "cache"
    flags, _ = as_guard.guard_flags(cache / "build", str(driver_script))
    assert flags[0] == "-wrapper" and flags[1].endswith("/as-wrapper")   # -B alone would not run it
    with pytest.raises(BuildError) as refused:
        build_extension("cuda_extension", {"k.cpp": EMBEDDINGS["upper case"] + "int x = 1;\n"}, "cpu", cache)
    assert refused.value.rule is ASM_DIRECTIVE and "`.incbin`" in refused.value.summary
    assert build_extension("cuda_extension", {"k.cpp": "int x = 1;\n"}, "cpu", cache).path.exists()
