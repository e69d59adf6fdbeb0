"""The cached builder: reuse across calls, kernel-only rebuilds, readable errors."""

import textwrap

import pytest

from cuda_agent.env.builds.compiler import BuildError, build_extension, load_module, summarize_compiler_output
from tests.env.helpers import HONEST_BODY, cpu_workspace, kernel


def _kernel_files(body: str = HONEST_BODY) -> dict[str, str]:
    # the workspace's own paths: the binding's object (the slow build) is the one evaluations use too
    return cpu_workspace(kernel(body)).kernel_files


def test_build_load_and_cache_reuse(cache_dir):
    first = build_extension("cuda_extension", _kernel_files(), "cpu", cache_dir / "build")
    again = build_extension("cuda_extension", _kernel_files(), "cpu", cache_dir / "build")
    assert again.compiled == [] and sorted(again.cached) == ["kernels/bias_relu.cpp", "kernels/bias_relu_binding.cpp"]
    assert again.path == first.path and first.path.exists()


def test_kernel_only_edit_recompiles_only_the_kernel(cache_dir):
    import uuid

    build_extension("cuda_extension", _kernel_files(), "cpu", cache_dir / "build")
    tweak = f"\n// tweak {uuid.uuid4().hex}\n"   # never built before, whatever the cache holds
    edited = build_extension("cuda_extension", _kernel_files(HONEST_BODY + tweak), "cpu", cache_dir / "build")
    assert edited.compiled == ["kernels/bias_relu.cpp"] and edited.cached == ["kernels/bias_relu_binding.cpp"]


def test_built_module_runs(cache_dir, tmp_path):
    import subprocess
    import sys

    report = build_extension("cuda_extension", _kernel_files(), "cpu", cache_dir / "build")
    # Load in a fresh interpreter: one process holds one module of a given name.
    code = textwrap.dedent(f"""
        import torch
        from cuda_agent.env.builds.compiler import load_module
        ext = load_module("cuda_extension", {str(report.path)!r})
        x = torch.tensor([[-1.0, 2.0]]); b = torch.tensor([0.5, -3.0])
        print(ext.bias_relu(x, b).tolist())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[[0.0, 0.0]]"


def test_compile_error_is_short_and_points_at_the_line(cache_dir):
    files = _kernel_files("float y = undefined_name * 2;\n" + HONEST_BODY)
    with pytest.raises(BuildError) as info:
        build_extension("cuda_extension", files, "cpu", cache_dir / "build")
    summary = info.value.summary
    assert "kernels/bias_relu.cpp:6" in summary and "undefined_name" in summary
    assert len(summary) < 2600 and len(info.value.log) >= len("undefined_name")


def test_missing_symbol_is_reported_when_loading(cache_dir):
    import subprocess
    import sys

    files = _kernel_files("extern void missing_symbol(); missing_symbol();\n" + HONEST_BODY)
    report = build_extension("cuda_extension", files, "cpu", cache_dir / "build")
    code = (f"from cuda_agent.env.builds.compiler import load_module, BuildError\n"
            f"try:\n    load_module('cuda_extension', {str(report.path)!r})\n"
            f"except BuildError as e:\n    print(e.summary)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "undefined symbol: missing_symbol" in out


def test_a_missing_symbol_is_named_where_no_process_may_start(cache_dir):
    """A sandboxed worker cannot start c++filt: the missing C++ function is still named, as a BuildError."""
    import subprocess
    import sys

    files = _kernel_files("hidden::missing_symbol(1);\n" + HONEST_BODY)
    files["kernels/bias_relu.cpp"] = "namespace hidden { void missing_symbol(int); }\n" + files["kernels/bias_relu.cpp"]
    report = build_extension("cuda_extension", files, "cpu", cache_dir / "build")
    code = (f"import subprocess\n"
            f"def refused(*args, **kwargs):\n    raise PermissionError('no new processes here')\n"
            f"subprocess.run = subprocess.Popen = refused\n"
            f"from cuda_agent.env.builds.compiler import load_module, BuildError\n"
            f"try:\n    load_module('cuda_extension', {str(report.path)!r})\n"
            f"except BuildError as e:\n    print(e.summary)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "undefined symbol: _ZN6hidden14missing_symbolEi (hidden::missing_symbol(int))" in out.stdout


def test_cuda_sources_need_the_cuda_backend(cache_dir):
    with pytest.raises(BuildError, match="need the cuda backend"):
        build_extension("ext", {"k.cu": "__global__ void k() {}"}, "cpu", cache_dir / "build")
    with pytest.raises(BuildError, match="not a valid Python identifier"):
        build_extension("bad-name", {"k.cpp": ""}, "cpu", cache_dir / "build")


def test_summarize_keeps_first_errors_only():
    noise = "\n".join(f"note: candidate template {i}" for i in range(300))
    text = ("kernels/a.cu(12): error: identifier \"foo\" is undefined\n  foo();\n  ^\n" + noise +
            "".join(f"\nkernels/a.cu({i}): error: bad thing {i}" for i in range(20, 40)))
    summary = summarize_compiler_output(text)
    assert summary.startswith('kernels/a.cu(12): error: identifier "foo"')
    assert "candidate template" not in summary and "fix the first ones first" in summary


@pytest.mark.parametrize("flags, kind", [
    (["-O3", "--use_fast_math", "-Xptxas", "-O3,-v", "-gencode", "arch=compute_90a,code=sm_90a", "-std=c++17",
      "-DTILE=64", "-lineinfo", "--maxrregcount=64", "-Xcompiler", "-fopenmp", "-march=native", "-Wall"], "cuda_cflags"),
    (["-Xcompiler=-O3,-fopenmp", "-arch=sm_90a", "--expt-relaxed-constexpr", "-U__CUDA_NO_HALF_OPERATORS__"], "cuda_cflags"),
    (["-lcublas", "-lcublasLt", "-L/usr/local/cuda/lib64"], "ldflags"),
])
def test_usual_kernel_flags_are_allowed(flags, kind):
    from cuda_agent.env.rules.build_flags import check_flags

    assert check_flags(flags, kind) == flags


@pytest.mark.parametrize("flags, kind", [
    (["-fplugin=/tmp/x.so"], "cflags"), (["-Xcompiler", "-fplugin=/x"], "cuda_cflags"),
    (["-Xcompiler=-O3,-B/tmp"], "cuda_cflags"), (["-B/tmp/evil"], "cflags"), (["@/tmp/response"], "cflags"),
    (["--compiler-bindir=/tmp"], "cuda_cflags"), (["-ccbin", "/tmp/x"], "cuda_cflags"),
    (["-wrapper", "gdb"], "cflags"), (["-specs=/tmp/x"], "cflags"), (["-include", "/etc/passwd"], "cflags"),
    (["-o", "/tmp/x.o"], "cflags"), (["-Wl,-rpath,/x"], "cflags"), (["-Wl,-rpath,/x"], "ldflags"),
    (["-Xlinker", "-plugin"], "ldflags"),
])
def test_flags_that_could_run_or_redirect_the_compiler_are_refused(flags, kind, cache_dir):
    from cuda_agent.env.rules.build_flags import UnsafeFlag, check_flags

    with pytest.raises(UnsafeFlag, match="not allowed"):
        check_flags(flags, kind)
    with pytest.raises(BuildError, match="not allowed"):  # and build_extension checks them itself
        build_extension("cuda_extension", _kernel_files(), "cpu", cache_dir / "build", **{f"extra_{kind}": flags})


def test_the_same_unit_built_twice_at_once_in_one_process(tmp_path, monkeypatch):
    """Found on the GPU machine: evaluations in one process built the link checker's probe at the same
    moment, both compiled into one temporary object file, and the second's rename found it gone."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from cuda_agent.env.builds import compiler

    files = {"probe.cpp": "int probe_value() { return 7; }\n"}   # no torch header: a build of a second
    both_compiling = threading.Barrier(2, timeout=60)
    real_run = compiler._run
    met = []

    def run_together(cmd, *args, **kwargs):   # each build starts compiling only once the other has too
        if any(c.endswith("unit.o") and "/staging/unit-" in c for c in cmd):   # a compile, into its own folder
            met.append(both_compiling.wait())
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(compiler, "_run", run_together)
    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(lambda _: build_extension("probe", files, "cpu", tmp_path / "build"), range(2)))
    assert reports[0].path == reports[1].path and reports[0].path.exists()
    assert len(met) == 2   # both compiles ran at once
    assert not list((tmp_path / "build" / "staging").glob("unit-*"))   # no temporary object left behind


def test_a_library_the_check_refuses_is_never_published(tmp_path):
    """The check runs on the freshly linked library in a private folder: a refused one is deleted and
    never appears in `lib/` (the build cache); an accepted one is published there. A cached library
    that today's check refuses is deleted as well."""
    import uuid

    build = tmp_path / "build"
    files = {"probe.cpp": f'extern "C" int probe_{uuid.uuid4().hex}() {{ return 7; }}\n'}
    checked = []

    class Refused(Exception):
        pass

    def refuse(library, objects):
        checked.append((library, library.exists(), objects))
        raise Refused

    with pytest.raises(Refused):
        build_extension("probe", files, "cpu", build, check=refuse)
    (library, existed, objects), = checked
    assert existed and library.parent.parent == build / "staging"      # checked where it was linked
    assert objects and all(o.exists() for o in objects)
    assert not library.exists() and not list((build / "staging").iterdir())
    assert not (build / "lib").exists() or not list((build / "lib").rglob("*.so"))

    published = build_extension("probe", files, "cpu", build, check=lambda library, objects: None)
    assert published.path.exists() and published.path.parent.parent == build / "lib"
    with pytest.raises(Refused):
        build_extension("probe", files, "cpu", build, check=refuse)
    assert not published.path.exists() and not published.path.parent.exists()
