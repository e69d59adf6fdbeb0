"""Which linker a solution's library is linked with: the fastest installed that the compiler links a C++ library
with (ld.bfd, the default, spends most of a kernel edit's link reading libtorch's symbol tables)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

# Faster linkers first, each used only where the compiler links a C++ library with it (`fast_linker`).
LINKERS = ("mold", "lld", "gold")


def fast_linker(cxx: str, which: Callable[[str], str | None] = shutil.which,
                flags_for: Callable[[str, str], list[str] | None] | None = None) -> list[str]:
    """The flags that link with the fastest linker installed that `cxx` links a C++ library with
    (`-fuse-ld=NAME`, and where needed the folder of the default linker's libstdc++), or none (the
    default linker). CUDA_AGENT_LINKER names one (`bfd` or `default`: the compiler's own)."""
    flags_for = flags_for or linker_flags
    wanted = os.environ.get("CUDA_AGENT_LINKER", "").strip()
    if wanted in ("bfd", "default"):
        return []
    for linker in ([wanted] if wanted else LINKERS):
        if which(f"ld.{linker}") or which(linker):
            flags = flags_for(cxx, linker)
            if flags is not None:
                return flags
    return []


def linker_flags(cxx: str, linker: str) -> list[str] | None:
    use = [f"-fuse-ld={linker}"]
    if links(cxx, use):
        return use
    # A compiler whose own folder holds a dangling libstdc++.so link: ld.bfd reads past it (to the
    # libstdc++.a beside it, or a libstdc++.so further on), gold stops there. Given what ld.bfd took
    # (the static library, or the folder of the shared one, searched first), it links the same.
    trace = links(cxx, ["-Wl,--trace"], output=True) or ""
    taken = [line.strip() for line in trace.splitlines() if os.path.basename(line.strip()).startswith("libstdc++.")]
    if not taken:
        return None
    same = ["-static-libstdc++"] if taken[0].endswith(".a") else [f"-L{os.path.dirname(taken[0])}"]
    return [*use, *same] if links(cxx, [*use, *same]) else None


def links(cxx: str, flags: list[str], output: bool = False):
    """Whether `cxx` links a small C++ shared library with `flags` (with `output`: the linker's
    output, or None when it fails)."""
    folder = Path(tempfile.mkdtemp(prefix="cuda-agent-linker-"))
    try:
        (folder / "probe.cpp").write_text('#include <string>\nstd::string probe(int n) { return std::to_string(n); }\n')
        proc = subprocess.run([cxx, *flags, "-shared", "-fPIC", "probe.cpp", "-o", "probe.so"], cwd=folder,
                              capture_output=True, text=True, timeout=120)
        ok = proc.returncode == 0 and (folder / "probe.so").exists()
        return (proc.stdout + proc.stderr if ok else None) if output else ok
    except (OSError, subprocess.SubprocessError):
        return None if output else False
    finally:
        shutil.rmtree(folder, ignore_errors=True)
