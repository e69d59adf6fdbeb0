"""JSON-lines messages between the harness and its worker processes (their models: messages.py).

The parent writes commands to the child's stdin; the child answers on a dedicated pipe (its fd
number in CUDA_AGENT_PROTOCOL_FD), so nothing a candidate prints can forge a harness message.
Every command carries a fresh nonce that the answer must echo, so a line written to that pipe by
candidate code (found through /proc/self/fd, say) is recognised as forged, and so is an answer that
is not the one the command expects (`messages.read_answer`).
"""

from __future__ import annotations

import contextlib

import json
import os
import secrets
import select
import signal
import subprocess
import time

from cuda_agent.env.workers.messages import Command, Message, Ready, read_answer

PROTOCOL_FD_ENV = "CUDA_AGENT_PROTOCOL_FD"
STAGING_FD_ENV = "CUDA_AGENT_STAGING_FD"   # a pair of workers' shared staging file (transfer.Staging)
HANDOVER_FD_ENV = "CUDA_AGENT_HANDOVER_FD"   # a persistent judge's socket for each job's staging file (handover.py)
STAGING_SLOT_BYTES = 1 << 30   # per slot of it: larger outputs go through files, or on CUDA the device slot


MAX_LINE_BYTES = 64 << 20   # an honest answer is far smaller (samples travel packed, outputs by location)


class ChildChannel:
    """The worker's end."""

    def __init__(self):
        fd = int(os.environ[PROTOCOL_FD_ENV])
        self._out = os.fdopen(fd, "w", buffering=1)
        self._in = os.fdopen(os.dup(0), "r")
        # The candidate must not read our commands or write fake answers on the real descriptors.
        os.environ.pop(PROTOCOL_FD_ENV, None)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        self._nonce = None

    def send(self, message: Message) -> None:
        self._out.write(json.dumps({**message.wire(), "nonce": self._nonce}) + "\n")
        self._out.flush()

    @contextlib.contextmanager
    def aside(self):
        """Commands answered while an earlier one's answer is still to come (the candidate's calibrating
        calls before it answers its job): that answer echoes its own command's nonce afterwards."""
        kept = self._nonce
        try:
            yield
        finally:
            self._nonce = kept

    def receive(self) -> dict:
        """The next command, as sent (the worker reads it with `messages.read_command`)."""
        line = self._in.readline()
        if not line:
            raise EOFError("harness closed the channel")
        message = json.loads(line)
        self._nonce = message.pop("nonce", None)
        return message


class ChildDied(RuntimeError):
    pass


class ChildTimeout(RuntimeError):
    pass


class ForgedMessage(RuntimeError):
    """An answer that does not echo the nonce of the command it claims to answer, or that is not
    the answer that command expects."""


class ParentChannel:
    """The harness's end: send commands, wait for answers with a deadline."""

    def __init__(self, proc: subprocess.Popen, read_fd: int):
        self.proc = proc
        self._fd = read_fd
        self._buffer = bytearray()   # grows in place: a long line is not copied once per chunk
        self._nonce = None  # the worker's first line (ready) precedes any command
        self._expect: type[Message] = Ready

    def send(self, message: Command) -> None:
        self._nonce = secrets.token_hex(16)
        if message.answer is not None:   # a build's reply leaves the command's own answer expected
            self._expect = message.answer
        try:
            self.proc.stdin.write((json.dumps({**message.wire(), "nonce": self._nonce}) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise ChildDied("worker exited") from None

    @contextlib.contextmanager
    def aside(self):
        """Commands sent and answered while an earlier command's answer is still to come (ChildChannel's
        `aside`): that answer is the one expected afterwards."""
        kept = self._nonce, self._expect
        try:
            yield
        finally:
            self._nonce, self._expect = kept

    def receive(self, timeout: float) -> dict:
        """The answer to the last command, validated (its fields as a dict)."""
        deadline = time.monotonic() + timeout
        ended = b"\n" in self._buffer   # an earlier read may have brought the next line already
        while not ended:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ChildTimeout(f"no answer within {timeout:g} s")
            ready, _, _ = select.select([self._fd], [], [], min(remaining, 0.5))
            if ready:
                chunk = os.read(self._fd, 1 << 16)
                if not chunk:
                    self.proc.wait()
                    raise ChildDied(_describe_exit(self.proc.returncode))
                self._buffer += chunk
                ended = b"\n" in chunk   # only the new bytes can end the line: the buffer is not rescanned
                if not ended and len(self._buffer) > MAX_LINE_BYTES:
                    raise ForgedMessage(f"a line of over {MAX_LINE_BYTES >> 20} MiB on the harness channel")
            elif self.proc.poll() is not None:
                # drain anything written just before exit
                ready, _, _ = select.select([self._fd], [], [], 0.1)
                if not ready:
                    raise ChildDied(_describe_exit(self.proc.returncode))
        line, rest = self._buffer.split(b"\n", 1)
        self._buffer = bytearray(rest)
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):   # not JSON, nested past the parser's depth, digits past its limit
            raise ForgedMessage("a malformed line on the harness channel") from None
        if not isinstance(message, dict) or message.pop("nonce", None) != self._nonce:
            raise ForgedMessage("a message on the harness channel that answers no command of ours")
        self._nonce = None  # one answer per command
        try:
            return read_answer(message, self._expect)
        except ValueError as exc:   # pydantic's ValidationError is one
            raise ForgedMessage(f"a malformed answer on the harness channel ({_first_error(exc)})") from None

    @property
    def awaiting(self) -> bool:
        """Whether the last command's answer is still to come."""
        return self._nonce is not None

    def close(self) -> None:
        try:
            os.close(self._fd)
        except OSError:
            pass


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        return f"{'.'.join(map(str, first['loc'])) or 'message'}: {first['msg']}"
    return str(exc)[:200]


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "worker stopped answering"
    # A signal shows as a negative code, or as 128 + signal through the sandbox's init process.
    number = -code if code < 0 else code - 128 if 128 < code < 128 + 65 else None
    if number is not None:
        return f"worker killed by {signal_name(number)}"
    return f"worker exited with code {code}"


def signal_name(number: int) -> str:
    """A signal by its name (SIGKILL), or by its number where it has none."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
