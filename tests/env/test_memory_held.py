"""The CPU backend's view of the candidate's memory (measure/outside.Memory) is opened before any of the
solution's code runs and held; losing it later rejects the candidate (protocol-forgery), never sends its
calls back to decisions made inside its own process."""

import ctypes
import errno
import os
import subprocess
import sys

import pytest

from cuda_agent.env import evaluate
from cuda_agent.env.measure import outside
from cuda_agent.env.measure.outside import HiddenMemory, Memory, UnreadableOutput
from tests.env.helpers import cpu_config, cpu_workspace, example_task

_UNDUMPABLE_CHILD = """
import ctypes, sys
value = ctypes.c_double(2.5)
print(ctypes.addressof(value), flush=True)
sys.stdin.readline()                                    # the harness opens its memory now
libc = ctypes.CDLL(None)
libc.prctl(4, 0, 0, 0, 0)                               # PR_SET_DUMPABLE, 0
print("dumpable", libc.prctl(3, 0, 0, 0, 0), flush=True)   # PR_GET_DUMPABLE
sys.stdin.readline()
"""


def test_memory_opened_before_the_process_hides_it_still_reads():
    """The kernel checks access when /proc/PID/mem is opened: a descriptor held from before the process
    made itself undumpable reads it all the same."""
    child = subprocess.Popen([sys.executable, "-c", _UNDUMPABLE_CHILD], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        address = int(child.stdout.readline())
        memory = Memory(child.pid)
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "dumpable 0"
        memory.check()
        assert ctypes.c_double.from_buffer_copy(memory.read(address, 8)).value == 2.5
        with pytest.raises(UnreadableOutput):   # an address outside its mappings stays the output's fault
            memory.read(8, 8)
        memory.close()
    finally:
        child.kill()
        child.wait()


def test_a_read_failing_otherwise_is_the_process_hiding_its_memory(monkeypatch):
    memory = Memory(os.getpid())
    try:
        def denied(fd, n, offset):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))

        monkeypatch.setattr(outside.os, "pread", denied)
        with pytest.raises(HiddenMemory):
            memory.check()
        with pytest.raises(HiddenMemory):
            memory.read(memory.known, 4)
    finally:
        monkeypatch.undo()
        memory.close()


def _lost_after(calls: int, monkeypatch) -> None:
    """Every read of the candidate's memory fails once `calls` checks and reads went through."""
    real_read, seen = Memory.read, [0]

    def read(self, address, nbytes):
        seen[0] += 1
        if seen[0] > calls:
            raise HiddenMemory("reading its memory failed: Permission denied")
        return real_read(self, address, nbytes)

    monkeypatch.setattr(Memory, "read", read)


@pytest.mark.parametrize("calls", [0, 3], ids=["at-init", "during-calls"])
def test_losing_the_memory_after_load_rejects_instead_of_falling_back(cache_dir, monkeypatch, calls):
    """`calls` 0: the held memory no longer reads once the model is made (the check at init); 3: it
    stops reading during the verification calls. Either way a rejection, and no call was decided in
    the candidate's process (no warning that says so)."""
    _lost_after(calls, monkeypatch)
    result = evaluate(example_task(), cpu_workspace(), cpu_config(cache_dir, baselines=False))
    assert not result.correct and result.error is not None, result
    assert result.error.rule == "protocol-forgery", result.error
    assert "lost its view of the solution's memory" in result.error.message
    assert not any("inside the solution's process" in w for w in result.warnings)
