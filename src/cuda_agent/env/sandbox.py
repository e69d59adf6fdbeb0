"""The candidate's sandbox: bubblewrap with no network, a read-only file system and a private /tmp.

Writable inside: the evaluation's own job folder. Not writable: everything else, including the
build cache (the harness compiles for the candidate, which only loads), the baseline-timing cache,
the harness's code and a workspace's protected scripts. GPU device files are bound on CUDA hosts.

`EvalConfig.sandbox`: "auto" (default) and "bwrap" require bubblewrap and fail clearly without it;
"none" runs unsandboxed, which the user must ask for.
"""

from __future__ import annotations

import glob
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) or, to run candidates "
                "unsandboxed, pass --no-sandbox (EvalConfig(sandbox='none'))")


class SandboxUnavailable(RuntimeError):
    pass


@lru_cache(maxsize=None)
def _bwrap_status() -> tuple[str | None, str]:
    """(path to a working bwrap, or None; why not)."""
    path = shutil.which("bwrap")
    if not path:
        return None, "bubblewrap (bwrap) is not installed"
    try:
        probe = subprocess.run([path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net",
                                "--die-with-parent", "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"bwrap could not run: {exc}"
    if probe.returncode != 0:
        return None, f"bwrap does not work here: {probe.stderr.strip()[:300]}"
    return path, ""


def sandbox_available() -> tuple[bool, str]:
    path, why = _bwrap_status()
    return path is not None, why


def sandbox_prefix(config, job_dir: Path) -> list[str] | None:
    """The command prefix that runs a worker inside the sandbox, or None when sandboxing is off."""
    if config.sandbox == "none":
        return None
    path, why = _bwrap_status()
    if path is None:
        raise SandboxUnavailable(f"cannot sandbox the candidate: {why}; {INSTALL_HINT}")
    build_cache = Path(config.cache_dir) / "build"
    build_cache.mkdir(parents=True, exist_ok=True)
    args = [path, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
            "--unshare-net", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]
    for device in sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri/*")):
        args += ["--dev-bind", device, device]
    # The private /tmp hides whatever lived there: bring back (read-only) the interpreter, its
    # packages and our own source when they are installed under /tmp (CI clones, pytest folders).
    for path in sorted(_python_paths()):
        if path == "/tmp" or path.startswith("/tmp/"):
            args += ["--ro-bind", path, path]
    # The build cache is shared by every evaluation: the candidate loads from it but never writes
    # it (the harness builds on its behalf), so it cannot plant a module another evaluation loads.
    args += ["--ro-bind", str(build_cache), str(build_cache), "--bind", str(job_dir), str(job_dir)]
    return args


def _python_paths() -> set[str]:
    import os
    import sys

    source_root = str(Path(__file__).resolve().parents[2])
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, source_root, *sys.path}
    return {os.path.realpath(p) for p in candidates if p and os.path.exists(p)}
