"""One step of a solution's build (the compiler, a step of nvcc's, the linker) run under the limits every step has:
its time (what is left of its build's), its output (OUTPUT_LIMIT: the errors of an `#include` of a binary library
run to gigabytes, which would otherwise all be kept in the harness's memory) and its memory (`memory_limited`: the
compiler's data, so that a compile instantiating templates without end fails instead of exhausting the machine) and
the size of each file it writes (FILE_LIMIT: an object, a library or an assembly file; a zero-initialised array of a
gigabyte is a gigabyte of object, written in a second with no memory to speak of). Its standard input is empty, never the harness's, and the step runs in a process group of its own, which is
killed whole when a limit is passed (the compiler's children with it)."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time

OUTPUT_LIMIT = 16 << 20   # bytes of a step's output: far more than the first errors a reader needs
OUT_OF_MEMORY = ("memory exhausted", "out of memory allocating")   # what gcc and the linkers print at the limit
FILE_LIMIT = 256 << 20    # bytes of one file a step writes (an honest unit's object with torch's debug information: 18 MB)
FILE_TOO_LARGE = "File size limit exceeded"   # how gcc and collect2 name the signal (SIGXFSZ) that stopped a program


class Flooded(Exception):
    """The step printed more than OUTPUT_LIMIT and was stopped; `output` is what it printed up to there."""

    def __init__(self, output: str):
        super().__init__(f"more than {OUTPUT_LIMIT >> 20} MiB of output")
        self.output = output


def memory_limited(command: list[str], limit: int | None, file_limit: int | None = None) -> list[str]:
    """`command` run with at most `limit` bytes of data memory (its heap and private mappings: RLIMIT_DATA) and files
    of at most `file_limit` bytes (RLIMIT_FSIZE), both inherited by its children, through the system's shell;
    unchanged without limits."""
    if not limit and not file_limit:
        return list(command)
    # POSIX sh: -d in KiB, -f in blocks of 512 bytes
    limits = [*([f"ulimit -d {max(1, limit >> 10)}"] if limit else []),
              *([f"ulimit -f {max(1, file_limit >> 9)}"] if file_limit else [])]
    return ["/bin/sh", "-c", " && ".join([*limits, 'exec "$@"']), "sh", *command]


def wrote_too_large_a_file(output: str) -> bool:
    """Whether a failed step's output says that a program of it was stopped for a file past FILE_LIMIT."""
    return FILE_TOO_LARGE in output


def ran_out_of_memory(output: str) -> bool:
    """Whether a failed step's output says that it ran out of memory (what a compiler prints at its limit)."""
    return any(words in output for words in OUT_OF_MEMORY)


def run(command: list[str], cwd, env: dict[str, str] | None, timeout: float | None) -> tuple[int, str]:
    """(exit status, output) of `command`, its standard error with its output. Raises
    subprocess.TimeoutExpired past `timeout` seconds and Flooded past OUTPUT_LIMIT bytes of output, the
    step's process group killed first."""
    deadline = None if timeout is None else time.monotonic() + timeout
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    chunks: list[bytes] = []
    size = 0
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(command, timeout, _text(chunks))
                if not selector.select(left):
                    continue
                data = os.read(proc.stdout.fileno(), 1 << 16)
                if not data:
                    break
                size += len(data)
                if size > OUTPUT_LIMIT:
                    raise Flooded(_text(chunks))
                chunks.append(data)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            status = proc.wait(left)
        except subprocess.TimeoutExpired:   # its output closed, the process still running
            raise subprocess.TimeoutExpired(command, timeout, _text(chunks)) from None
    except BaseException:
        _stop(proc)
        raise
    finally:
        proc.stdout.close()
    return status, _text(chunks)


def _text(chunks: list[bytes]) -> str:
    return b"".join(chunks).decode("utf-8", errors="replace")


def _stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)   # its own group (start_new_session): its children too
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()
