"""What a crash of the solution's process tells the policy: which input set was being computed, the
native frames of the solution's own libraries (symbolised) and the Python frames of its own files.

The candidate worker loads a small library of ours (workers/native/crash.cpp, built here) before
any of the solution's code: on a fatal signal it writes the faulting thread's native frames to the
worker's log, then Python's faulthandler writes the Python frames. `crash_digest` reads both from
the log: frames in the solution's files first (native ones named with `addr2line` where binutils is
installed: function, file and line), the harness's and PyTorch's frames left out. The log itself
stays in `EvalResult.log`; `without_crash_dump` is that log without the dump, so nothing is shown twice.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

CRASH_SOURCE = Path(__file__).resolve().parents[1] / "workers" / "native" / "crash.cpp"
NATIVE_START = "cuda-agent native frames (most recent call first):"
NATIVE_END = "cuda-agent end of native frames"
PYTHON_START = "Fatal Python error:"
MAX_FRAMES = 8
HARNESS_LIBRARIES = "cuda_agent_"   # the harness's own handed libraries (guard, hold, this report)
BINDING = "pybind11"   # frames of the extension's Python binding, between the solution's code and Python
# backtrace_symbols_fd's line: "object(symbol+0xoffset) [0xaddress]" (symbol or offset may be missing)
_NATIVE = re.compile(r"^(?P<object>[^()\[\]]+)\((?P<symbol>[^+()]*)(?:\+(?P<offset>0x[0-9a-fA-F]+))?\)\s*\[(?P<address>0x[0-9a-fA-F]+)\]")
_PYTHON = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<function>\S+)')


def build_crash_report(cache_dir: Path) -> Path:
    """The crash report's library, built once per toolchain by the harness."""
    from cuda_agent.env.builds.compiler import build_native_library

    return build_native_library("cuda_agent_crash", CRASH_SOURCE.read_text(), Path(cache_dir))


def crash_digest(log: str, own: tuple[str, ...]) -> str:
    """The frames of a crash dump in `log` that belong to the solution: native frames in objects
    under any of the folders `own`, then Python frames in files under them (most recent first).
    Empty when the log holds no dump."""
    lines = []
    native = [frame for frame in _native_frames(log) if _under(frame["object"], own)
              and not Path(frame["object"]).name.startswith(HARNESS_LIBRARIES)]
    if native:
        lines.append("native frames of the solution (most recent call first):")
        described = [_describe_native(frame) for frame in native[:MAX_FRAMES] if BINDING not in frame["symbol"]]
        lines += [f"  {text}" for text in described if BINDING not in text]
    python = [m for m in map(_PYTHON.match, _python_block(log).splitlines()) if m and _under(m["file"], own)]
    if python:
        lines.append("Python frames of the solution (most recent call first):")
        lines += [f"  {Path(m['file']).name} line {m['line']}, in {m['function']}" for m in python[:MAX_FRAMES]]
    return "\n".join(lines)


def without_crash_dump(log: str) -> str:
    """`log` without the crash dump (native frames, faulthandler's report): the solution's own output."""
    start = log.find(NATIVE_START)
    if start < 0 and NATIVE_END in log:   # a tail of the log that begins inside the native frames
        start = 0
    cut = [at for at in (start, log.find(PYTHON_START)) if at >= 0]
    return log[:min(cut)].rstrip() if cut else log


def _native_frames(log: str) -> list[dict]:
    start = log.find(NATIVE_START)
    if start < 0:
        return []
    end = log.find(NATIVE_END, start)
    block = log[start + len(NATIVE_START):end if end >= 0 else len(log)]
    return [m.groupdict() for m in map(_NATIVE.match, block.strip().splitlines()) if m]


def _python_block(log: str) -> str:
    start = log.find(PYTHON_START)
    return log[start:] if start >= 0 else ""


def _under(path: str, folders: tuple[str, ...]) -> bool:
    return any(folder and path.startswith(folder.rstrip("/") + "/") for folder in folders)


def _describe_native(frame: dict) -> str:
    """`function at file:line (object+offset)`, from addr2line where it can say, else what the dump said."""
    name = Path(frame["object"]).name
    offset = frame["offset"]
    where = f"{name}+{offset}" if offset else f"{name} [{frame['address']}]"
    symbol = frame["symbol"]
    if not symbol and offset:   # an offset into the object itself: addr2line reads its symbols
        found = _addr2line(frame["object"], offset)
        if found:
            return f"{found} ({where})"
    if symbol and offset:
        found = _addr2line(frame["object"], f"{symbol}+{offset}")
        if found:
            return f"{found} ({where})"
    return f"{symbol or '??'} ({where})"


def _addr2line(obj: str, location: str) -> str | None:
    """'function at file:line' (or the function alone without debug lines) for `location` in `obj`."""
    tool = shutil.which("addr2line")
    if tool is None or not Path(obj).is_file():
        return None
    if "+" in location:   # symbol+offset: addr2line takes symbol names only through -j; resolve via nm
        symbol, offset = location.split("+")
        base = _symbol_address(obj, symbol)
        if base is None:
            return None
        location = hex(base + int(offset, 16))
    try:
        answer = subprocess.run([tool, "-f", "-C", "-e", obj, location], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    parts = answer.stdout.strip().splitlines()
    if answer.returncode != 0 or not parts or parts[0] == "??":
        return None
    place = parts[1] if len(parts) > 1 else "??:0"
    return parts[0] if place.startswith(("?", ":")) else f"{parts[0]} at {Path(place.split(' ')[0]).name}"


def _symbol_address(obj: str, symbol: str) -> int | None:
    tool = shutil.which("nm")
    if tool is None:
        return None
    try:
        listing = subprocess.run([tool, "-D", "--defined-only", obj], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    for line in listing.stdout.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[2] == symbol:
            return int(fields[0], 16)
    return None
