"""Fast, cached builds of PyTorch extensions, so a kernel-only edit rebuilds only the kernel.

- Every translation unit is compiled on its own into a content-addressed object (`cache/obj/<hash>.o`,
  keyed by its source, the headers beside it, flags and toolchain), shared across processes.
- C++ files that include `torch/extension.h` use a precompiled header built once per toolchain.
- Changed units compile in parallel, each into a folder of its own in `cache/staging/` (the only one
  its sandbox writes), then moved into `cache/obj/`; the link goes to a private folder there too, and
  the library is published into `cache/lib/<hash>/NAME.so` only once the caller's `check` accepts it.
- Writes are atomic (temp file + rename), so concurrent workers share one cache.
- Every compile and link of a solution runs in the compiler's sandbox (build_sandbox.py: the
  toolchain, the system and the job's own files, nothing of the harness or of other builds; a link
  its objects only) and assembles through the assembler guard (as_guard.py: no file embedded or
  included at the assembler), each step limited in time, memory and output (step.py).

Compiler output is reduced to the first few errors with file:line for an LLM to read.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

from cuda_agent.env.builds import as_guard, build_sandbox, nvcc_steps, step
from cuda_agent.env.builds.compile_errors import summarize_compiler_output
from cuda_agent.env.builds.cuda_toolkit import cuda_arch_flags, find_cuda_home, with_library
from cuda_agent.env.builds.linkers import fast_linker
from cuda_agent.env.builds.build_sandbox import UNSANDBOXED, Box
from cuda_agent.env.rules import registry as rules

TRANSLATION_UNITS = (".cu", ".cpp", ".cc", ".cxx")
HEADERS = (".h", ".hpp", ".cuh", ".inl")
_TORCH_INCLUDE = re.compile(r'#\s*include\s*[<"](torch|ATen|c10)/')
# Torch defines these for every CUDA file of its own extensions; we do the same for files
# that include torch headers (load_inline parity) and leave pure CUDA files alone.
TORCH_NVCC_FLAGS = [
    "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
    "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
]


class BuildError(RuntimeError):
    """A compile or link step failed. `summary` is short and LLM-readable; `log` is complete; `rule`:
    the rule a refused build broke (rules/registry.py), None for a plain failure."""

    def __init__(self, summary: str, log: str = "", rule: rules.Rule | None = None):
        super().__init__(summary)
        self.summary = summary
        self.log = log
        self.rule = rule


def _sha(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


# Line tables (no variables, no types, the same code), so a crash's frames name file:line (run/crash.py),
# for the units that include no torch header: in those that do, the tables of torch's inline code are
# most of the object and slow every later link of it (and the precompiled header would need them too).
# nvcc's device code always carries its lines (`-lineinfo`, for compute-sanitizer and profilers).
LINE_TABLES = ("-g1",)


# How a solution's library is linked, in its key: a library linked under older rules is linked again, not
# reused (before "sources-unseen", a link read the solution's own files: `-L. -l:script` embedded a file).
LINK_RULES = "sources-unseen"

# Bytes of all the objects of one build (its units', compiled now or cached): each step's files are limited
# (step.FILE_LIMIT), but a build of many units would fill the harness's disk under that limit, and its library
# (their sum) is copied and read whole by the harness.
BUILD_BYTES_LIMIT = 1 << 30


@dataclass(frozen=True)
class Toolchain:
    backend: str
    cxx: str
    nvcc: str | None
    include_flags: tuple[str, ...]
    common_flags: tuple[str, ...]
    cuda_flags: tuple[str, ...]
    ldflags: tuple[str, ...]
    key: str
    linker: tuple[str, ...] = ()   # the flags of the linker chosen (fast_linker): key libraries, not objects
    line_tables: tuple[str, ...] = ()   # for units without torch headers (in their commands, so in their keys)
    shown: tuple[str, ...] = ()    # what the compiler's sandbox shows of the toolchain beside the system

    @property
    def has_cuda(self) -> bool:
        return self.nvcc is not None


@lru_cache(maxsize=None)
def toolchain(backend: str) -> Toolchain:
    import torch
    import torch.utils.cpp_extension as cpp

    cxx = os.environ.get("CXX", "c++")
    includes = [*cpp.include_paths("cpu"), sysconfig.get_paths()["include"]]
    lib_dir = cpp.library_paths("cpu")[0]
    ldflags = [f"-L{lib_dir}", "-lc10", "-ltorch_cpu", "-ltorch", "-ltorch_python"]
    nvcc, cuda_flags = None, []
    cuda_home = find_cuda_home()
    if backend == "cuda":
        if cuda_home is None or not (cuda_home / "bin" / "nvcc").exists():
            raise BuildError("nvcc not found: set CUDA_HOME to the CUDA toolkit (the cuda backend needs it)")
        nvcc = str(cuda_home / "bin" / "nvcc")
        includes.append(str(cuda_home / "include"))
        cuda_flags = ["-O3", "--expt-relaxed-constexpr", "-std=c++20", "-Xcompiler", "-fPIC",
                      *cuda_arch_flags(), "-lineinfo"]
        lib64 = cuda_home / ("lib64" if (cuda_home / "lib64").exists() else "lib")
        ldflags += ["-lc10_cuda", "-ltorch_cuda", f"-L{lib64}", "-lcudart"]
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    common = ["-O3", "-std=c++20", "-fPIC", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
              "-DTORCH_API_INCLUDE_EXTENSION_H"]
    include_flags = [flag for p in includes for flag in ("-isystem", p)]
    linker = fast_linker(cxx)
    versions = [torch.__version__, sys.version, _tool_version(cxx)]
    if nvcc:
        versions.append(_tool_version(nvcc))
    key = _sha(backend, *versions, *include_flags, *common, *cuda_flags, *ldflags)
    linkers = [f"ld.{flag.split('=', 1)[1]}" for flag in linker if flag.startswith("-fuse-ld=")]
    shown = [*includes, lib_dir, *([str(cuda_home)] if nvcc else []),
             *(flag[2:] for flag in linker if flag.startswith("-L")),
             *build_sandbox.tool_folders(cxx, *([nvcc, "gcc", "g++"] if nvcc else []), *linkers)]   # (nvcc's gcc)
    return Toolchain(backend, cxx, nvcc, tuple(include_flags), tuple(common), tuple(cuda_flags),
                     tuple(ldflags), key, tuple(linker), LINE_TABLES, tuple(shown))


def _tool_version(tool: str) -> str:
    try:
        return subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return tool


# ---------------------------------------------------------------------------------------------
# building


@contextmanager
def _file_lock(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run(cmd: list[str], cwd: Path, what: str, timeout: float | None = None, box: Box = UNSANDBOXED,
         budget: float | None = None) -> None:
    """Run one step in `box` with `timeout` seconds left of its build's `budget` (step.py: its output and
    memory limited too); a failure is a BuildError."""
    try:
        status, output = step.run(box.command(cmd, cwd), cwd, box.env, timeout)
    except (subprocess.TimeoutExpired, step.Flooded) as exc:
        raise _past_limit(cmd, what, exc, budget if budget is not None else timeout) from None
    except OSError as exc:
        if exc.errno != errno.E2BIG:
            raise
        raise BuildError(f"{what} failed (rule {rules.BUILD_INPUT.name}): its command is longer than the system "
                         "takes (fewer or shorter flags, include paths or sources)", rule=rules.BUILD_INPUT) from None
    if status != 0:
        _failed(cmd, what, output, box.memory)


def _past_limit(cmd: list[str], what: str, exc: Exception, budget: float | None) -> BuildError:
    """The BuildError of a step stopped at a limit (rule build-limit): its build's time, or its output."""
    output = exc.output or ""
    output = output.decode(errors="replace") if isinstance(output, bytes) else output
    if isinstance(exc, step.Flooded):
        why = (f"it printed more than {step.OUTPUT_LIMIT >> 20} MiB (an #include of a binary file? its first "
               f"errors:\n{summarize_compiler_output(output)})")
    else:
        why = f"the build took longer than {budget:g} s, the most an evaluation's builds may take"
    return BuildError(f"{what} was stopped (rule {rules.BUILD_LIMIT.name}): {why}", f"$ {' '.join(cmd)}\n{output}",
                      rules.BUILD_LIMIT)


def _failed(cmd: list[str], what: str, output: str, memory: int | None = None):
    """The BuildError of a step that printed `output`: the assembler guard's refusal, a step that ran out of
    its `memory`, or the errors."""
    log = f"$ {' '.join(cmd)}\n{output}"
    refused = as_guard.refusal(output)
    if refused is not None:
        raise BuildError(f"{what} was refused (rule {rules.ASM_DIRECTIVE.name}): {refused}; {as_guard.RULE_TEXT}",
                         log, rules.ASM_DIRECTIVE)
    if step.wrote_too_large_a_file(output):
        raise BuildError(f"{what} was stopped (rule {rules.BUILD_LIMIT.name}): it wrote a file larger than "
                         f"{step.FILE_LIMIT >> 20} MiB, the most one step of a build may write (a large zero-initialised "
                         "or constant array? build it at run time)", log, rules.BUILD_LIMIT)
    if memory and step.ran_out_of_memory(output):
        raise BuildError(f"{what} ran out of memory (rule {rules.BUILD_LIMIT.name}): a step of a build may use "
                         f"{memory / (1 << 30):.3g} GiB:\n" + summarize_compiler_output(output), log, rules.BUILD_LIMIT)
    raise BuildError(f"{what} failed:\n" + summarize_compiler_output(output), log)


def _run_nvcc(cmd: list[str], cwd: Path, what: str, timeout: float | None = None, box: Box = UNSANDBOXED,
              scratch: Path | None = None, budget: float | None = None, headers: Path | None = None) -> None:
    """An nvcc compile with its host and device sides at once (nvcc_steps), where its steps have the
    usual shape; else (or with CUDA_AGENT_NVCC_STEPS=0) nvcc as it is. Its kept files go to a folder
    made in `scratch` (one the box writes), else in the system's temporary folder. `headers`: the cache's
    folder of precompiled host headers (host_headers.py; the box shows it), None (or
    CUDA_AGENT_HOST_PCH=0) for none."""
    if os.environ.get("CUDA_AGENT_HOST_PCH", "1") == "0":
        headers = None
    if os.environ.get("CUDA_AGENT_NVCC_STEPS", "1") != "0":
        keep = Path(tempfile.mkdtemp(prefix="cuda-agent-nvcc-", dir=scratch))
        try:
            steps = nvcc_steps.plan(cmd, cwd, keep, timeout, env=box.env)
            if steps is not None:
                nvcc_steps.run(steps, cwd, timeout, wrap=box.command if box.prefix else None,
                               headers=headers, scratch=scratch)
                return
        except nvcc_steps.IdMismatch:
            pass   # nvcc itself, below
        except nvcc_steps.StepFailed as exc:
            _failed(cmd, what, exc.output, box.memory)
        except (subprocess.TimeoutExpired, step.Flooded) as exc:
            raise _past_limit(cmd, what, exc, budget if budget is not None else timeout) from None
        finally:
            shutil.rmtree(keep, ignore_errors=True)
    _run(cmd, cwd, what, timeout, box, budget)


def _pch(tc: Toolchain, cache_dir: Path, sandbox: bool = False) -> Path:
    """A precompiled `torch/extension.h` (the header that dominates C++ build time), compiled in the
    compiler's sandbox where `sandbox`."""
    folder = cache_dir / "pch" / tc.key
    header = folder / "torch_extension_pch.h"
    if (folder / "torch_extension_pch.h.gch").exists():
        return header
    with _file_lock(cache_dir / "locks" / f"pch-{tc.key}"):
        if (folder / "torch_extension_pch.h.gch").exists():
            return header
        tmp = Path(tempfile.mkdtemp(dir=cache_dir, prefix="pch-tmp-"))
        # Bindings on CUDA nearly always also need the current stream.
        extra = "#include <c10/cuda/CUDAStream.h>\n" if tc.has_cuda else ""
        (tmp / "torch_extension_pch.h").write_text("#pragma once\n#include <torch/extension.h>\n" + extra)
        _run([tc.cxx, "-x", "c++-header", *tc.common_flags, *tc.include_flags,
              "torch_extension_pch.h", "-o", "torch_extension_pch.h.gch"], tmp, "precompiling torch/extension.h",
             box=build_sandbox.box(tc.shown, [tmp], sandbox))
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            tmp.rename(folder)
        except OSError:  # another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
    return header


def header_ready(backend: str, cache_dir: Path) -> bool:
    """Whether the precompiled torch header exists (else the next C++ build precompiles it first)."""
    return (Path(cache_dir) / "pch" / toolchain(backend).key / "torch_extension_pch.h.gch").exists()


def precompiled_header(backend: str, cache_dir: Path, sandbox: bool | None = None) -> Path:
    """The backend's precompiled torch header, built now when it is not there yet (`sandbox`: as
    build_extension's)."""
    try:
        return _pch(toolchain(backend), Path(cache_dir), build_sandbox.sandboxed(sandbox))
    except build_sandbox.SandboxMissing as exc:
        raise BuildError(str(exc)) from None


@dataclass
class BuildReport:
    path: Path                  # the built .so
    compiled: list[str]         # units compiled this time (others came from the cache)
    cached: list[str]
    objects: tuple[Path, ...] = ()   # the objects compiled from the solution's own sources
    seconds: dict[str, float] = field(default_factory=dict)   # wall time of "compile", "link", "check"


def build_extension(name: str, files: dict[str, str], backend: str, cache_dir: Path, *,
                    extra_cflags: list[str] | None = None, extra_cuda_cflags: list[str] | None = None,
                    extra_ldflags: list[str] | None = None, extra_include_paths: list[str] | None = None,
                    max_jobs: int | None = None, timeout: float | None = None,
                    check: Callable[[Path, tuple[Path, ...]], None] | None = None,
                    sandbox: bool | None = None, memory_gb: float | None = None) -> BuildReport:
    """Compile `files` (relative path -> source) into the Python extension module `name`.

    The inputs are checked before any compiler runs (rule build-input): extra flags against an allowlist
    (build_flags.py: builds run for the harness, so no flag may make a compiler run or write what the
    solution chooses), the sources' names (`source_name_problem`: none a compiler or a shell could read as
    anything but a file's name) and text (UTF-8). Each compile and the link run in the compiler's sandbox
    (build_sandbox.py; `sandbox`: None where bubblewrap works, True required, False never) and assemble
    through the assembler guard (as_guard.py), whose refusal is a BuildError with `rule` set. `timeout`
    bounds the whole build (each step gets what is left of it), `memory_gb` each step's data memory
    (build_sandbox.step_memory), and each step's output is limited (step.py); past a limit, the build is a
    BuildError of rule build-limit. The link sees the objects, never the sources: no source of the
    solution's is read as a linker script.
    `check(library, objects)` raises to refuse the library: it runs on the freshly linked library
    before it is published (a refused one is deleted) and on a cached one before it is returned (a
    cached one refused by today's rules is deleted too)."""
    from cuda_agent.env.rules.build_flags import (UnsafeFlag, check_flags, check_include_paths, source_name_problem,
                                                 sources_problem, text_problem)

    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise BuildError(f"extension name {name!r} is not a valid Python identifier")
    from cuda_agent.env.rules.allowlist import extension_name_problem

    problem = extension_name_problem(name)   # the candidate registers it in sys.modules under this name
    if problem:
        raise BuildError(problem)
    problem = sources_problem(files)   # before any is written: each is a file in the build cache
    if problem:
        raise BuildError(f"{problem} (rule {rules.BUILD_INPUT.name})", rule=rules.BUILD_INPUT)
    for rel, text in files.items():
        problem = source_name_problem(rel) or text_problem(rel, text)
        if problem:
            raise BuildError(f"{problem} (rule {rules.BUILD_INPUT.name})", rule=rules.BUILD_INPUT)
    try:
        check_flags(extra_cflags, "cflags")
        check_flags(extra_cuda_cflags, "cuda_cflags")
        check_flags(extra_ldflags, "ldflags")
        check_include_paths(extra_include_paths)
    except UnsafeFlag as exc:
        raise BuildError(f"{exc} (rule {rules.BUILD_INPUT.name})", rule=rules.BUILD_INPUT) from None
    units = sorted(p for p in files if p.endswith(TRANSLATION_UNITS))
    if not units:
        raise BuildError("nothing to compile: no .cu or .cpp files")
    tc = toolchain(backend)
    if any(u.endswith(".cu") for u in units) and not tc.has_cuda:
        raise BuildError(f"{next(u for u in units if u.endswith('.cu'))}: .cu files need the cuda backend "
                         "(on the cpu backend write C++ kernels in .cpp files)")
    cache_dir = Path(cache_dir)
    try:
        in_sandbox = build_sandbox.sandboxed(sandbox)
        guard, guard_dir = as_guard.guard_flags(cache_dir, tc.cxx)
    except (build_sandbox.SandboxMissing, as_guard.GuardUnavailable) as exc:
        raise BuildError(str(exc)) from None
    # the guard is named by its folder's digest, not its path: a cache moved elsewhere keeps its objects
    keyed_as = {flag: flag.replace(str(guard_dir), f"<as-guard {guard_dir.name}>") for flag in guard}
    text_all = "".join(files.values())
    extra_cflags = list(extra_cflags or [])
    extra_cuda_cflags = list(extra_cuda_cflags or [])
    extra_ldflags = list(extra_ldflags or [])
    extra_include = [f"-I{p}" for p in (extra_include_paths or [])]
    # what every step's sandbox shows beside the system
    shown = [*tc.shown, str(guard_dir), *build_sandbox.tool_folders(as_guard.assembler(tc.cxx))]
    memory = build_sandbox.step_memory(memory_gb)
    for header, library in (("cublas_v2.h", "cublas"), ("cudnn.h", "cudnn")):
        if library in text_all.lower():
            extra_include, extra_ldflags, folders = with_library(header, library, extra_include, extra_ldflags)
            shown += folders

    # Sources live in a content-addressed folder so compiler messages name the user's own paths.
    headers_digest = _sha(*(f"{p}\n{files[p]}" for p in sorted(files) if p.endswith(HEADERS)))
    src_dir = cache_dir / "src" / _sha(*(f"{p}\n{files[p]}" for p in sorted(files)))
    if not src_dir.exists():
        tmp = Path(tempfile.mkdtemp(dir=_mkdir(cache_dir / "src"), prefix="tmp-"))
        try:
            for rel, text in files.items():
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                (tmp / rel).write_text(text, encoding="utf-8")
        except OSError as exc:   # names that clash (a file and a folder of one name), too long, ...
            shutil.rmtree(tmp, ignore_errors=True)
            raise BuildError(f"the sources could not be written: {exc.strerror or exc} (rule "
                             f"{rules.BUILD_INPUT.name})", rule=rules.BUILD_INPUT) from None
        try:
            tmp.rename(src_dir)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)

    obj_dir = _mkdir(cache_dir / "obj")
    # nvcc's final host compiles read their headers precompiled from here (host_headers.py)
    host_pch = _mkdir(cache_dir / "host-pch" / tc.key) if tc.has_cuda else None
    name_flag = f"-DTORCH_EXTENSION_NAME={name}"

    def unit_command(unit: str, out: str) -> tuple[list[str], str]:
        text = files[unit]
        uses_torch = bool(_TORCH_INCLUDE.search(text))
        lines = () if uses_torch else tc.line_tables
        pch = []
        if unit.endswith(".cu"):
            flags = [*tc.cuda_flags, *(TORCH_NVCC_FLAGS if uses_torch else []), name_flag,
                     "-DTORCH_API_INCLUDE_EXTENSION_H", f"-D_GLIBCXX_USE_CXX11_ABI={int(_abi())}",
                     *(f for flag in (*lines, *guard) for f in ("-Xcompiler", flag)), *extra_cuda_cflags]
            cmd = [tc.nvcc, *flags, *tc.include_flags, *extra_include, "-c", unit, "-o", out]
        else:
            pch = ["-include", str(_pch(tc, cache_dir, in_sandbox))] if uses_torch else []
            flags = [*tc.common_flags, *lines, *guard, name_flag, *extra_cflags]
            cmd = [tc.cxx, *flags, *pch, *tc.include_flags, *extra_include, "-c", unit, "-o", out]
        # The precompiled header is named by its toolchain (what decides its contents), not by its path:
        # a cache folder copied or moved elsewhere keeps its objects.
        keyed = [f"<pch {tc.key}>" if pch and c == pch[1] else keyed_as.get(c, c) for c in cmd if c not in (unit, out)]
        key = _sha(tc.key, unit, text, headers_digest, *keyed)
        return cmd, key, pch[1:]

    jobs, compiled, cached = [], [], []
    for unit in units:
        cmd, key, pch = unit_command(unit, "OUT")
        obj = obj_dir / f"{key}.o"
        jobs.append((unit, cmd, obj, pch))
        (cached if obj.exists() else compiled).append(unit)

    deadline = None if timeout is None else time.monotonic() + timeout
    # the build's objects in bytes (BUILD_BYTES_LIMIT), the cached ones counted from the start; those compiled now
    written: list[Path] = []
    total = [sum(obj.stat().st_size for _, _, obj, _ in jobs if obj.exists())]
    total_lock = threading.Lock()

    def left(what: str) -> float | None:
        """The seconds left of the build's `timeout` (None: no limit); a BuildError once none are."""
        if deadline is None:
            return None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _past_limit([], what, subprocess.TimeoutExpired(what, timeout), timeout)
        return remaining

    def compile_one(job) -> None:
        unit, cmd, obj, pch = job
        if obj.exists():
            return
        seconds_left = left(f"compiling {unit}")
        # a folder of its own, the one its sandbox writes: two builds of the same unit at once (threads
        # of one process, or processes) each write their own object, and whichever lands last replaces
        # an identical one
        out_dir = Path(tempfile.mkdtemp(dir=_mkdir(cache_dir / "staging"), prefix="unit-"))
        try:
            tmp = out_dir / "unit.o"
            command = [str(tmp) if c == "OUT" else c for c in cmd]
            cu = unit.endswith(".cu")
            reads = [*shown, src_dir, *(str(Path(p).parent) for p in pch), *([str(host_pch)] if cu else [])]
            box = build_sandbox.box(reads, [out_dir], in_sandbox, memory, step.FILE_LIMIT)
            if cu:
                _run_nvcc(command, src_dir, f"compiling {unit}", seconds_left, box, scratch=out_dir, budget=timeout,
                          headers=host_pch)
            else:
                _run(command, src_dir, f"compiling {unit}", seconds_left, box, budget=timeout)
            with total_lock:
                total[0] += tmp.stat().st_size
                if total[0] > BUILD_BYTES_LIMIT:
                    raise BuildError(f"compiling {unit} was stopped (rule {rules.BUILD_LIMIT.name}): the build's objects "
                                     f"came to more than {BUILD_BYTES_LIMIT >> 20} MiB, the most one build may write (large "
                                     "zero-initialised or constant arrays? build them at run time)", rule=rules.BUILD_LIMIT)
                os.replace(tmp, obj)
                written.append(obj)
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)

    seconds = {}
    started = time.perf_counter()
    workers = max_jobs or min(len(jobs), os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        errors = []
        for job, fut in [(j, pool.submit(compile_one, j)) for j in jobs]:
            try:
                fut.result()
            except BuildError as exc:
                errors.append(exc)
    stopped = [e for e in errors if e.rule is rules.BUILD_LIMIT]
    if stopped:   # the build as a whole was stopped: one reason is enough; what it wrote is not kept
        if total[0] > BUILD_BYTES_LIMIT:
            for obj in written:
                obj.unlink(missing_ok=True)
        raise stopped[0]
    if errors:
        raise BuildError("\n\n".join(e.summary for e in errors), "\n".join(e.log for e in errors),
                         next((e.rule for e in errors if e.rule), None))
    seconds["compile"] = time.perf_counter() - started

    objs = [str(obj) for _, _, obj, _ in jobs]
    # the guard at the link too: a link-time optimisation would compile (and assemble) again
    link_flags = [*tc.ldflags, *extra_ldflags, *tc.linker, *guard]
    lib_dir = cache_dir / "lib" / _sha(tc.key, LINK_RULES, name, *(Path(o).name for o in objs),   # by content
                                       *(keyed_as.get(f, f) for f in link_flags))
    so = lib_dir / f"{name}.so"
    objects = tuple(Path(o) for o in objs)
    if so.exists():
        started = time.perf_counter()
        _checked(check, so, objects, lib_dir)
        seconds["check"] = time.perf_counter() - started
    else:
        # linked and checked away from lib/: a library the check refuses is never published
        tmp_dir = Path(tempfile.mkdtemp(dir=_mkdir(cache_dir / "staging"), prefix="tmp-"))
        started = time.perf_counter()
        try:
            # in the output's folder, shown the objects and not the sources: a file of the solution's named by
            # a link flag (`-L. -l:script`) would be read as a linker script (TARGET(binary) INPUT(file))
            _run([tc.cxx, "-shared", *objs, "-o", str(tmp_dir / f"{name}.so"), *link_flags], tmp_dir, "linking",
                 left("linking"), build_sandbox.box([*shown, *objs], [tmp_dir], in_sandbox, memory, step.FILE_LIMIT),
                 budget=timeout)
        except BaseException:
            shutil.rmtree(tmp_dir, ignore_errors=True)
            raise
        seconds["link"] = time.perf_counter() - started
        started = time.perf_counter()
        _checked(check, tmp_dir / f"{name}.so", objects, tmp_dir)
        seconds["check"] = time.perf_counter() - started
        try:
            tmp_dir.rename(_mkdir(lib_dir.parent) / lib_dir.name)
        except OSError:   # another process published the same library meanwhile
            shutil.rmtree(tmp_dir, ignore_errors=True)
    return BuildReport(so, compiled, cached, objects, seconds)


def _checked(check, library: Path, objects: tuple[Path, ...], folder: Path) -> None:
    """Runs `check` on `library`; when it refuses, `folder` (the library's own) is deleted first."""
    if check is None:
        return
    try:
        check(library, objects)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def build_native_library(name: str, source: str, cache_dir: Path, timeout: float | None = 600,
                         cuda: bool = False) -> Path:
    """Build one of the harness's own helpers (no Python bindings: loaded with ctypes) into
    `cache/lib/<hash>/NAME.so`. C++ ones are linked against libc10 and libtorch_cpu and built with
    -DNDEBUG, like libtorch (some ATen structures change layout without it); CUDA ones (`cuda`) are
    plain CUDA C built by nvcc for this machine's GPU, with the CUDA runtime linked in statically."""
    tc = toolchain("cuda" if cuda else "cpu")
    cache_dir = Path(cache_dir)
    lib_dir = cache_dir / "lib" / _sha(tc.key, name, source, "native")
    so = lib_dir / f"{name}.so"
    if so.exists():
        return so
    suffix = ".cu" if cuda else ".cpp"
    tmp = Path(tempfile.mkdtemp(dir=_mkdir(cache_dir / "lib"), prefix="tmp-"))
    (tmp / f"{name}{suffix}").write_text(source)
    if cuda:
        command = [tc.nvcc, "-shared", "-O3", "-Xcompiler", "-fPIC", *cuda_arch_flags(), f"{name}{suffix}",
                   "-o", f"{name}.so"]
    else:
        command = [tc.cxx, "-shared", "-DNDEBUG", *tc.common_flags, *tc.include_flags, f"{name}{suffix}",
                   "-o", f"{name}.so", *tc.ldflags[:3]]
    _run(command, tmp, f"building the harness helper {name}", timeout)
    (tmp / f"{name}{suffix}").unlink()
    try:
        tmp.rename(lib_dir)
    except OSError:  # another process built it meanwhile
        shutil.rmtree(tmp, ignore_errors=True)
    return so


def _abi() -> bool:
    import torch

    return torch._C._GLIBCXX_USE_CXX11_ABI


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def load_module(name: str, so_path: Path):
    """Import a built extension under `name` (registered in sys.modules)."""
    import torch  # noqa: F401  (loads libc10/libtorch, which the extension links against)

    spec = importlib.util.spec_from_file_location(name, so_path)
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except ImportError as exc:  # typically an undefined symbol: a declared but missing function
        message = str(exc).replace(str(so_path), f"{name}.so")
        symbol = re.search(r"undefined symbol: (\S+)", message)
        if symbol:   # demangled in this process: a sandboxed worker may not start one (c++filt)
            from cuda_agent.env.measure.symbolize import demangle

            demangled = demangle([symbol[1]])[symbol[1]]
            if demangled != symbol[1]:
                message += f" ({demangled})"
        raise BuildError(f"loading the built module failed: {message}") from None
    sys.modules[name] = module
    return module
