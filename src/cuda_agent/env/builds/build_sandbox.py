"""The compiler's sandbox: each step of a solution's build (the C++ compiler, nvcc and the steps it
runs, the linker) runs in bubblewrap with the candidate's namespaces, capabilities and user
(infra/sandbox.py `isolation`), and sees only what a build needs:

- read-only: the system (`/usr`, `/bin`, `/sbin`, `/lib*`, the dynamic linker's configuration and
  `/etc/alternatives`), the folders the toolchain names (torch's headers and libraries, Python's
  headers, the CUDA toolkit, a compiler, assembler or linker installed elsewhere, the folders of the
  compiler's own search-path variables, CPATH and the like), and what the step reads of the build
  cache: the precompiled header, the assembler guard (as_guard.py), the job's own sources, and for a
  link its own objects;
- writable: the step's own output folder; `/tmp` is private and empty (TMPDIR, where gcc and nvcc
  write their temporary files);
- of the devices, `/dev/null` alone: none that reads without end (`/dev/zero`, `/dev/urandom`) or waits
  (a terminal);
- nothing else: no home, no other solution's sources or objects, no file of the harness, no `/proc`,
  no network; the environment holds only what the tools read (PATH, the locale, the compiler's search
  paths, nvcc's own settings), not the rest of the harness's.

Sandboxed or not, a step's data memory and the size of each file it writes are limited (`memory`, `files`:
step.py `memory_limited`).

So a source's `#include "/any/file"` finds nothing outside those folders. Where bubblewrap does not
work, `sandbox=None` builds unsandboxed and `sandbox=True` fails (the candidate's own sandbox needs it
anyway).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from cuda_agent.env.builds.step import memory_limited

SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives")
SEARCH_PATHS = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH")   # the harness's, shown
KEPT_ENV = ("PATH", "LANG", "LANGUAGE", "SOURCE_DATE_EPOCH", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS",
            "NVCC_CCBIN", *SEARCH_PATHS)


class SandboxMissing(RuntimeError):
    """The build was to be sandboxed and bubblewrap does not work here."""


@dataclass(frozen=True)
class Box:
    """How one build step runs: `prefix` is bubblewrap with its binds (empty: unsandboxed), `env` the
    environment its tools get (None: the harness's own), `memory` the most data memory its processes
    may use, in bytes, `files` the largest file they may write (None: no limit)."""
    prefix: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    memory: int | None = None
    files: int | None = None

    def command(self, cmd: list[str], cwd: Path) -> list[str]:
        limited = memory_limited(cmd, self.memory, self.files)
        return [*self.prefix, "--chdir", str(cwd), *limited] if self.prefix else limited


UNSANDBOXED = Box()


def sandboxed(sandbox: bool | None) -> bool:
    """Whether builds run in the sandbox: never with `sandbox=False`; with None where bubblewrap works;
    with True always (SandboxMissing where it does not)."""
    if sandbox is False:
        return False
    why = _unavailable()
    if why and sandbox:
        from cuda_agent.env.infra.sandbox import INSTALL_HINT

        raise SandboxMissing(f"cannot sandbox the build: {why}; {INSTALL_HINT}")
    return not why


def step_memory(gigabytes: float | None = None) -> int:
    """The data memory of one build step, in bytes: `gigabytes` GiB, or by default a quarter of the machine's
    memory and at least 4 GiB (a compile of torch's extension header takes about 1.5 GiB)."""
    if gigabytes is not None:
        return int(gigabytes * (1 << 30))
    try:
        machine = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        machine = 0
    return max(4 << 30, machine // 4)


def box(shown: Iterable[str | Path], writable: Iterable[str | Path], sandbox: bool, memory: int | None = None,
        files: int | None = None) -> Box:
    """The step's box: `shown` read-only and `writable` read-write beside the system, its processes' data
    memory at most `memory` bytes and each file they write at most `files` bytes (unsandboxed, with only those
    limits, when `sandbox` is false)."""
    if not sandbox:
        return Box(memory=memory, files=files) if memory or files else UNSANDBOXED
    start, system = _system()
    binds: list[str] = []
    covered = list(SYSTEM_FOLDERS)
    searched = [p for var in SEARCH_PATHS for p in os.environ.get(var, "").split(os.pathsep) if os.path.isabs(p)]
    for path in sorted({os.path.abspath(p) for p in (*shown, *searched)}):
        for spelling in dict.fromkeys((path, os.path.realpath(path))):
            if not _inside_any(spelling, covered):
                binds += ["--ro-bind-try", spelling, spelling]
                covered.append(spelling)
    for path in sorted({os.path.abspath(p) for p in writable}):
        binds += ["--bind", path, path]
    return Box((*start, *system, *binds), _environment(), memory, files)


def tool_folders(*tools: str) -> list[str]:
    """The installation folders of `tools` (names or paths) that lie outside the system's: a tool's
    `bin` folder's parent (its libraries and headers beside), or its own folder where that parent is
    `/` or the home folder."""
    folders = []
    home = os.path.realpath(Path.home())
    for tool in tools:
        found = tool if os.path.isabs(tool) else shutil.which(tool)
        if not found:
            continue
        own = Path(os.path.realpath(found)).parent
        prefix = own.parent if own.name == "bin" and str(own.parent) not in ("/", home) else own
        if not _inside_any(str(prefix), SYSTEM_FOLDERS):
            folders.append(str(prefix))
    return folders


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in KEPT_ENV or k.startswith("LC_")}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(TMPDIR="/tmp", HOME="/tmp")
    return env


@lru_cache(maxsize=None)
def _system() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """bubblewrap's isolation flags, and the binds of the system every step sees."""
    from cuda_agent.env.infra.sandbox import isolation

    start, why = isolation()
    if start is None:
        raise SandboxMissing(why)
    binds = []
    for folder in SYSTEM_FOLDERS:
        if os.path.islink(folder):   # /lib -> usr/lib: the same link inside
            binds += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            binds += ["--ro-bind", folder, folder]
    for path in SYSTEM_FILES:
        binds += ["--ro-bind-try", path, path]
    binds += ["--dev-bind", "/dev/null", "/dev/null", "--tmpfs", "/tmp"]
    return tuple(start), tuple(binds)


@lru_cache(maxsize=None)
def _unavailable() -> str:
    """Why the compiler's sandbox does not work here ('' when it does)."""
    try:
        start, system = _system()
    except SandboxMissing as exc:
        return str(exc)
    try:
        probe = subprocess.run([*start, *system, "true"], capture_output=True, text=True, timeout=30,
                               env=_environment())
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap could not run: {exc}"
    return "" if probe.returncode == 0 else f"bwrap does not work here: {probe.stderr.strip()[:300]}"


def _inside_any(path: str, folders: Iterable[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)
