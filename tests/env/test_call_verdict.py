"""The guard's verdict decided by the harness from outside the candidate (env/rules/call_verdict.py): the
native record's counters judged against the calls the harness made, a library's symbol found from
outside a process, threads listed by the kernel, and an unreadable record refused."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import sys
import textwrap
import time

import pytest

from cuda_agent.env.measure import outside
from cuda_agent.env.rules import registry as rules
from cuda_agent.env.rules.call_verdict import _RECORD, CallVerdicts, GuardRecord, Refused


def _record(**counts) -> GuardRecord:
    fields = dict(begins=1, ends=1, violations=0, custom_calls=0, extension_calls=1, outputs_checked=1,
                  outputs_foreign=0, ops_seen=3, rule="", op="")
    fields.update(counts)
    return GuardRecord(**fields)


def _verdicts() -> CallVerdicts:
    """Judging records alone: no process behind them."""
    verdicts = CallVerdicts(os.getpid(), None)
    verdicts.calls = 1
    return verdicts


def _refused(step) -> str:
    with pytest.raises(Refused) as caught:
        step()
    return caught.value.rule.name


def test_record_layout_parses_what_the_native_guard_writes():
    raw = _RECORD.pack(b"CAGREC1\0", 4, 4, 1, 2, 6, 3, 0, 99, b"torch-op", b"aten::mm")
    record = GuardRecord.parse(raw)
    assert (record.begins, record.ends, record.violations, record.kernel_calls, record.ops_seen) == (4, 4, 1, 8, 99)
    assert (record.rule, record.op) == ("torch-op", "aten::mm")
    with pytest.raises(ValueError):
        GuardRecord.parse(_RECORD.pack(b"NOTREC1\0", *[0] * 8, b"", b""))


def test_an_honest_call_passes_and_its_counts_are_kept():
    verdicts = _verdicts()
    verdicts._judge(_record(), null=False, outputs=1)
    verdicts.calls = 2
    verdicts._judge(_record(begins=2, ends=2, extension_calls=2, outputs_checked=2), null=False, outputs=1)
    assert verdicts.kernel_calls == [1, 1]


@pytest.mark.parametrize("record, null, outputs, rule", [
    (_record(begins=2, ends=2), False, 1, "protocol-forgery"),                 # guard driven again
    (_record(ends=0), False, 1, "protocol-forgery"),                           # a call never ended
    (_record(violations=1, rule="torch-op", op="aten::mm"), False, 1, "torch-op"),
    (_record(violations=1, rule="data-movement", op="aten::copy_"), False, 1, "data-movement"),
    (_record(violations=1, rule="sandbox", op="x"), False, 1, "protocol-forgery"),   # a rule the guard never notes
    (_record(violations=1, rule="torch-op", op="aten::mm"), True, 0, "torch-op"),   # an empty call too
    (_record(extension_calls=0), False, 1, "no-custom-kernel"),
    (_record(outputs_foreign=1), False, 1, "output-not-from-kernel"),
    (_record(outputs_checked=0), False, 1, "protocol-forgery"),               # the output check skipped
])
def test_a_record_that_breaks_a_rule_is_refused(record, null, outputs, rule):
    assert _refused(lambda: _verdicts()._judge(record, null, outputs)) == rule


def test_an_empty_call_needs_no_kernel_call_nor_output_check():
    _verdicts()._judge(_record(extension_calls=0, outputs_checked=0), null=True, outputs=0)


def test_kernel_calls_must_not_change_after_the_first_call():
    verdicts = _verdicts()
    for n, calls in enumerate((5, 2, 2), 1):   # the first call may do one-time work
        verdicts.calls = n
        verdicts._judge(_record(begins=n, ends=n, extension_calls=sum((5, 2, 2)[:n]), outputs_checked=n), False, 1)
    verdicts.calls = 4
    record = _record(begins=4, ends=4, extension_calls=10, outputs_checked=4)
    assert _refused(lambda: verdicts._judge(record, False, 1)) == "behaviour-changed"


def test_a_symbol_is_found_from_outside_as_the_process_sees_it():
    path = ctypes.util.find_library("c")
    libc = ctypes.CDLL(path)
    real = next(line.split()[-1] for line in open("/proc/self/maps") if "libc.so" in line or "libc-" in line)
    with open("/proc/self/maps") as fh:
        base = outside.library_base(fh.read(), real)
    address = base + outside.elf_symbol(real, "printf")
    assert address == ctypes.cast(libc.printf, ctypes.c_void_p).value
    with pytest.raises(LookupError):
        outside.elf_symbol(real, "no_such_symbol_here")


def test_an_unreadable_record_is_refused_never_accepted():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    verdicts = CallVerdicts(gone.pid, outside_library())
    verdicts.before_call()
    assert _refused(lambda: verdicts.after_call(null=False, outputs=1)) == rules.PROTOCOL_FORGERY.name
    alive = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.readline()"], stdin=subprocess.PIPE)
    try:   # readable, but the library is not mapped in it: refused as well
        verdicts = CallVerdicts(alive.pid, outside_library())
        verdicts.before_call()
        assert _refused(lambda: verdicts.after_call(null=False, outputs=1)) == rules.PROTOCOL_FORGERY.name
        verdicts.close()
    finally:
        alive.kill()
        alive.wait()


def outside_library() -> str:
    """A library the test process has mapped and its children have not (numpy's extension module)."""
    import numpy.core._multiarray_umath as umath

    return umath.__file__


# A child that, on each line of input: 1 starts a sleeping thread, 2 one that sleeps 0.3 s and then spins for
# 0.2 s of CPU time, anything else exits.
CHILD = textwrap.dedent("""
    import sys, threading, time
    def spin():
        time.sleep(0.3)
        end = time.thread_time() + 0.2
        while time.thread_time() < end:
            pass
    for line in sys.stdin:
        if line.strip() == "1":
            threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        elif line.strip() == "2":
            threading.Thread(target=spin, daemon=True).start()
        else:
            break
        print("done", flush=True)
""")


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    yield proc
    proc.kill()
    proc.wait()


def _ask(proc, line: str) -> None:
    proc.stdin.write(line + "\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "done"


def test_a_thread_left_alive_by_a_call_is_seen_from_outside(child):
    verdicts = CallVerdicts(child.pid, None)
    assert outside.thread_ids(child.pid) == verdicts.harness_threads
    verdicts.before_call()
    verdicts.after_call(null=False, outputs=1)   # nothing new: passes
    verdicts.before_call()
    _ask(child, "1")   # the "call" leaves a thread asleep: no CPU time, still refused
    assert _refused(lambda: verdicts.after_call(null=False, outputs=1)) == "background-thread"


def test_a_thread_working_between_calls_is_seen_from_outside(child):
    verdicts = CallVerdicts(child.pid, None)
    _ask(child, "2")   # started while the model was made (a thread of the solution's, asleep for now)
    verdicts.mark()
    verdicts.before_call()
    verdicts.after_call(null=False, outputs=1)   # asleep through the "call": nothing to see
    time.sleep(0.4)   # then it spins, between calls
    assert _refused(verdicts.before_call) == "background-thread"


@pytest.mark.parametrize("exits", [False, True], ids=["parks", "exits"])
def test_a_thread_working_after_the_answer_during_the_harness_checks_is_seen(child, exits):
    """The call's clock stops at its answer; the harness then resumes the candidate for its own checks
    (`finish`). A thread of the solution's that works in that window (here from 0.3 s after the answer,
    0.2 s of CPU time) is work between calls, whether it then parks or exits before the last answer."""
    verdicts = CallVerdicts(child.pid, None)
    _ask(child, "2")   # started while the model was made
    verdicts.mark()
    verdicts.before_call()
    verdicts.answered()   # the call answered at once; its checks take a while
    time.sleep(0.6)
    if exits:
        while len(outside.thread_ids(child.pid)) > 1:
            time.sleep(0.05)
    with pytest.raises(Refused, match="while the harness checked the call") as caught:
        verdicts.after_call(null=False, outputs=1)
    assert caught.value.rule == rules.BACKGROUND_THREAD


@pytest.mark.parametrize("exits", [False, True], ids=["alive", "ended"])
def test_the_harness_threads_time_to_the_answer_leaves_the_solutions_out(child, exits):
    """An empty call's measure of the harness's own steps is its own threads' CPU time up to the answer: a thread of
    the solution's that spins within the call (up to 0.2 s of CPU time), alive at the answer or ended before it,
    is in the process's clock and not in that measure."""
    verdicts = CallVerdicts(child.pid, None)
    _ask(child, "2")   # started while the model was made, asleep for 0.3 s
    verdicts.mark()
    verdicts.before_call()
    clock = outside.cpu_seconds(child.pid)
    time.sleep(0.45)   # it spins
    if exits:
        while len(outside.thread_ids(child.pid)) > 1:
            time.sleep(0.05)
    verdicts.answered()
    assert outside.cpu_seconds(child.pid) - clock > 0.03
    assert verdicts.harness_seconds() < 0.02   # the child's own thread waits on its input


def test_the_harness_checks_after_an_answer_alone_pass(child):
    """Nothing of the solution's working after the answer: the window passes, call after call."""
    verdicts = CallVerdicts(child.pid, None)
    _ask(child, "1")   # a thread asleep all along, started while the model was made
    verdicts.mark()
    for _ in range(3):
        verdicts.before_call()
        verdicts.answered()
        time.sleep(0.05)
        verdicts.after_call(null=False, outputs=1)


def test_a_thread_that_worked_and_exited_between_calls_is_seen_from_outside(child):
    verdicts = CallVerdicts(child.pid, None)
    _ask(child, "2")
    verdicts.mark()
    verdicts.before_call()
    verdicts.after_call(null=False, outputs=1)
    while len(outside.thread_ids(child.pid)) > 1:   # it spins, then exits: its CPU time leaves the thread list
        time.sleep(0.05)
    assert _refused(verdicts.before_call) == "background-thread"
