"""What a crash of the solution's process tells the policy: which input set was being computed, the
native frames of the solution's own libraries (symbolised) and the Python frames of its own files.

The candidate worker loads a small library of ours (workers/native/crash.cpp, built here) before
any of the solution's code: on a fatal signal it writes the faulting thread's native frames to the
worker's log, then Python's faulthandler writes the Python frames. `crash_digest` reads both from
the log: frames in the solution's files first (native ones named with `addr2line` where binutils is
installed: function, and the file and line from the line tables the builds carry, compiler.LINE_TABLES),
the harness's and PyTorch's frames left out. The log itself
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
CRASH_LIBRARY = "cuda_agent_crash"   # this report's: the signal's trampoline, then the faulting frame, follow it
BINDING = "pybind11"   # frames of the extension's Python binding, between the solution's code and Python
# a source file of a build, in its content-addressed folder (compiler.build_extension: cache/src/<digest>/)
_BUILD_SOURCE = re.compile(r"/src/[0-9a-f]{24}/(?P<path>.+)$")
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
    frames = [m.groupdict() for m in map(_NATIVE.match, block.strip().splitlines()) if m]
    # every frame's address is where its call returns to (the line after the call, at times), except
    # the faulting frame's: the one after the handler's own frames and the signal's trampoline
    handler = [i for i, frame in enumerate(frames) if Path(frame["object"]).name.startswith(CRASH_LIBRARY)]
    for i, frame in enumerate(frames):
        frame["returns"] = not handler or i != handler[-1] + 2
    return frames


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
    if offset:   # symbol+offset, or an offset into the object itself: addr2line reads its symbols and lines
        found = _addr2line(frame["object"], f"{symbol}+{offset}" if symbol else offset, frame.get("returns", False))
        if found:
            return f"{found} ({where})"
    return f"{symbol or '??'} ({where})"


def _addr2line(obj: str, location: str, returns: bool = False) -> str | None:
    """'function at file:line' (or the function alone without line tables) for `location` in `obj`;
    code inlined there is named with the function it was inlined in. `returns`: the location is a
    return address, so the call itself is the byte before it."""
    tool = shutil.which("addr2line")
    if tool is None or not Path(obj).is_file():
        return None
    if "+" in location:   # symbol+offset: addr2line takes symbol names only through -j; resolve via nm
        symbol, offset = location.split("+")
        base = _symbol_address(obj, symbol)
        if base is None:
            return None
        address = base + int(offset, 16)
    else:
        address = int(location, 16)
    try:
        answer = subprocess.run([tool, "-i", "-f", "-C", "-e", obj, hex(address - 1 if returns and address else address)],
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    parts = answer.stdout.strip().splitlines()
    if answer.returncode != 0 or not parts or parts[0] == "??":
        return None
    pairs = [(parts[i], parts[i + 1] if i + 1 < len(parts) else "??:0") for i in range(0, len(parts), 2)]
    inner = _at(*pairs[0])
    return inner if len(pairs) == 1 else f"{inner}, inlined in {_at(*pairs[-1])}"


def _at(function: str, place: str) -> str:
    """`function at file:line`, the file as the solution names it (its build's folder left out)."""
    if place.startswith(("?", ":")):
        return function
    place = place.split(" ")[0]   # "(discriminator N)" left out
    found = _BUILD_SOURCE.search(place)
    return f"{function} at {found['path'] if found else Path(place).name}"


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
