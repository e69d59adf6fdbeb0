"""The assembler guard: what every compile of a solution's sources assembles is read before the
assembler runs, and a file embedded or included at the assembler (`.incbin`, `.include`), or the
assembler macros that could spell one, is refused.

The compiler sandbox (build_sandbox.py) hides the harness's files from the compiler, but not the
system's libraries and torch's, which the build needs: `.incbin` of one would put a library's machine
code into the solution's own library, run as the solution's code. A check of the C++ text is defeated
by string concatenation and macros, so the check reads what reaches the assembler: the guard
(native/as_guard.c, built here once per compiler) is installed as `as` in a folder of its own, and
every compile names that folder with `-B` (nvcc: `-Xcompiler -B`), which the compiler searches for
its assembler before its own. The guard reads the assembly it is given, refuses, and otherwise runs
the real assembler with the same arguments. Whether the compiler runs it is checked when the guard is
built (a compiler with an assembler of its own, clang, is told to use the external one). A compiler
that is a script putting `-B` folders of its own first (one with an assembler in them) finds that
assembler before the guard's: there every compile runs its programs through the guard instead
(gcc's `-wrapper`), which reads the assembly where the program is the assembler.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

SOURCE = Path(__file__).parent / "native" / "as_guard.c"
MARK = "cuda-agent assembler guard: "   # how the guard's refusals begin (as_guard.c)
RULE_TEXT = ("a build may not embed or include files at the assembler (`.incbin`, `.include`) nor use the "
             "assembler's macros and repeat blocks (`.macro`, `.irp`, `.irpc`, `.rept`, `.altmacro`, "
             "`.purgem`, `.mri`), however spelled: put data into the source itself (an array initializer)")


class GuardUnavailable(RuntimeError):
    """The guard could not be built, or the compiler does not run it."""


def refusal(output: str) -> str | None:
    """The guard's refusal in a compiler's output (what it refused), or None."""
    for line in output.splitlines():
        at = line.find(MARK)
        if at >= 0:
            return line[at + len(MARK):].strip()
    return None


def guard_flags(cache_dir: Path, cxx: str) -> tuple[tuple[str, ...], Path]:
    """The flags that make `cxx` assemble through the guard, and the guard's folder (built into
    `cache_dir/tools/` once per compiler and source, shared by processes, and looked for at every
    call: a compiler told to look in a folder that is gone would use its own assembler)."""
    real, digest = _identity(cxx)
    folder = Path(cache_dir) / "tools" / f"as-guard-{digest}"
    flags_file = folder / "flags.json"
    if not flags_file.exists():
        lock = Path(cache_dir) / "locks" / f"as-guard-{digest}"
        lock.parent.mkdir(parents=True, exist_ok=True)
        with open(lock, "w") as held:
            fcntl.flock(held, fcntl.LOCK_EX)
            if not flags_file.exists():
                _build(folder, cxx, real)
    return tuple(json.loads(flags_file.read_text())), folder


def assembler(cxx: str) -> str:
    """The real assembler of `cxx`, which the guard runs."""
    return _identity(cxx)[0]


@lru_cache(maxsize=None)
def _identity(cxx: str) -> tuple[str, str]:
    """The real assembler of `cxx`, and the digest that names the guard built for it."""
    real = _real_assembler(cxx)
    return real, hashlib.sha256(f"{SOURCE.read_text()}\0{real}\0{_version(cxx)}".encode()).hexdigest()[:24]


def _real_assembler(cxx: str) -> str:
    """The assembler `cxx` runs without the guard, as a path."""
    try:
        named = subprocess.run([cxx, "-print-prog-name=as"], capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        raise GuardUnavailable(f"cannot ask {cxx} for its assembler: {exc}") from None
    found = named if os.path.isabs(named) else shutil.which(named or "as")
    if not found or not os.access(found, os.X_OK):
        raise GuardUnavailable(f"{cxx}'s assembler ({named or 'as'}) was not found")
    return found


def _version(tool: str) -> str:
    try:
        return subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return tool


def _build(folder: Path, cxx: str, real: str) -> None:
    """Compile the guard into a fresh folder, check that `cxx` runs it (and with which flags), and
    publish the folder with those flags."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix="tmp-"))
    try:
        built = subprocess.run([cxx, "-x", "c", "-O2", f"-DREAL_AS={json.dumps(real)}", str(SOURCE), "-o",
                                str(tmp / "as")], capture_output=True, text=True, timeout=300)
        if built.returncode != 0:
            raise GuardUnavailable(f"building the assembler guard failed:\n{built.stderr[-2000:]}")
        os.link(tmp / "as", tmp / "as-wrapper")   # the same program, run by gcc's -wrapper (as_guard.c)
        # -B where the compiler searches it first; else gcc's -wrapper, for a driver script that puts
        # folders of its own (holding an assembler) before the ones it is given
        tried = [[f"-B{tmp}/"], [f"-B{tmp}/", "-fno-integrated-as"]]
        if "," not in str(tmp):   # -wrapper splits its argument at commas
            tried.append(["-wrapper", f"{tmp}/as-wrapper"])
        flags = next((flags for flags in tried if _runs_guard(cxx, flags, tmp)), None)
        if flags is None:
            raise GuardUnavailable(f"{cxx} does not assemble through the guard (-B, nor gcc's -wrapper): its assembly "
                                   "cannot be checked")
        (tmp / "flags.json").write_text(json.dumps([f.replace(str(tmp), str(folder)) for f in flags]))
        try:
            tmp.rename(folder)
        except OSError:   # published by another process meanwhile
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _runs_guard(cxx: str, flags: list[str], folder: Path) -> bool:
    """Whether `cxx` with `flags` refuses a unit that embeds a file, and builds one that does not."""
    probe = folder / "probe"
    probe.mkdir()
    try:
        (probe / "refused.c").write_text('__asm__(".incbin \\"/dev/null\\"");\n')
        (probe / "plain.c").write_text("int plain(void) { return 1; }\n")
        refused = subprocess.run([cxx, *flags, "-x", "c", "-c", "refused.c", "-o", "refused.o"], cwd=probe,
                                 capture_output=True, text=True, timeout=120)
        plain = subprocess.run([cxx, *flags, "-x", "c", "-c", "plain.c", "-o", "plain.o"], cwd=probe,
                               capture_output=True, text=True, timeout=120)
        return refused.returncode != 0 and refusal(refused.stderr) is not None and plain.returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        shutil.rmtree(probe, ignore_errors=True)
