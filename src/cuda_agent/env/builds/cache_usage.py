"""What the build and baseline cache holds, part by part, and emptying it for real.

Layout under the cache root (`~/.cache/cuda-agent` or `CUDA_AGENT_CACHE`):
`build/pch/<toolchain>/` one precompiled torch header per torch install and toolchain (the big
part: about 0.8 GB each), `build/host-pch/<toolchain>/` the headers' part of nvcc's host compiles,
precompiled (builds/host_headers.py: about 20 MB each, one per distinct set of a unit's headers), `build/obj/` compiled translation units, `build/lib/` linked modules,
`build/src/` their sources, `build/tools/` the assembler guard (builds/as_guard.py), `build/locks/`,
and `baselines/` the eager and torch.compile timings.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

PARTS = (("build/pch", "torch headers", "precompiled torch/extension.h, one per torch install and toolchain"),
         ("build/host-pch", "CUDA host headers", "precompiled headers of nvcc's host compiles, one per unit's headers"),
         ("build/obj", "objects", "compiled kernels and bindings"),
         ("build/lib", "modules", "linked extension modules"),
         ("build/src", "sources", "the sources they were built from"),
         ("baselines", "baselines", "eager and torch.compile timings, one file per task and settings"))
OURS = ("build", "baselines")     # what `clear` removes; nothing else under the root is touched


@dataclass(frozen=True)
class Part:
    label: str
    path: Path
    bytes: int
    entries: int
    what: str


def folder_bytes(folder: Path) -> int:
    total = 0
    for f in folder.rglob("*"):
        try:
            if f.is_file() and not f.is_symlink():
                total += f.stat().st_size
        except OSError:   # removed while we looked (another process's temporary file)
            continue
    return total


def usage(root: Path) -> list[Part]:
    parts = []
    for rel, label, what in PARTS:
        folder = root / rel
        entries = sum(1 for _ in folder.iterdir()) if folder.is_dir() else 0
        parts.append(Part(label, folder, folder_bytes(folder) if folder.is_dir() else 0, entries, what))
    return parts


def headers(root: Path) -> dict[str, int]:
    """Precompiled headers by toolchain key, with their sizes."""
    folder = root / "build" / "pch"
    if not folder.is_dir():
        return {}
    return {d.name: folder_bytes(d) for d in sorted(folder.iterdir()) if d.is_dir()}


def current_keys() -> dict[str, str]:
    """backend -> toolchain key of this Python's torch and compilers (backends it cannot build skipped)."""
    from cuda_agent.env.builds.compiler import BuildError, toolchain

    keys = {}
    for backend in ("cpu", "cuda"):
        try:
            keys[backend] = toolchain(backend).key
        except (BuildError, OSError):
            continue
    return keys


def clear(root: Path) -> int:
    """Delete every build and baseline under `root`; returns the bytes freed."""
    freed = 0
    for rel in OURS:
        folder = Path(root) / rel
        if folder.is_dir():
            freed += folder_bytes(folder)
            shutil.rmtree(folder, ignore_errors=True)
    return freed
