"""The guard's verdict on each of the candidate's calls, decided by the harness from outside the
candidate's process (harness side; the candidate's half is guard.py and native/guard.cpp).

What decides it are facts the candidate's Python cannot rewrite:
- the native guard's record (`cag_report` in native/guard.cpp): counters that only grow (calls begun
  and ended, operators refused, custom-operator and extension calls, outputs checked and outputs no
  kernel produced), read with one `pread` of `/proc/PID/mem` after every call, at the address the
  library's own symbol table and the process's mappings give;
- the process's threads, listed by the kernel (`/proc/PID/task`, native threads too), before and after
  each call, and the CPU time the solution's threads used between calls;
- where given (`sampling`, op_samples.py), where its threads' CPU time went during each call, sampled by
  the kernel's perf events into the harness's own buffers: ATen's operator kernels there refuse it even
  when native code has rewritten the record.

The two files (`/proc/PID/mem`, `/proc/PID/maps`) are opened when the job is sent, before any of the
solution's code runs: the access check is made at open, so a solution that later hides its memory
(`prctl(PR_SET_DUMPABLE, 0)`) does not take them away; files the harness cannot open then (`problem`)
are the machine's failure, which the evaluation reports as internal. A record that cannot be read
later, or that does not match the calls the harness made, rejects the candidate (fail closed); it is
never accepted.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

from cuda_agent.env.measure.outside import elf_symbol, library_base, thread_ids, threads_cpu_seconds
from cuda_agent.env.rules import registry as rules

RECORD_SYMBOL = "cag_report"
_RECORD = struct.Struct("<8s8q32s152s")   # native/guard.cpp's struct Report, 256 bytes
_MAGIC = b"CAGREC1\0"
_REFUSED_RULES = (rules.TORCH_OP.name, rules.DATA_MOVEMENT.name)   # what the native guard notes


class Refused(Exception):
    """A call broke a rule; `rule` is its registered name, the message one line for the agent."""

    def __init__(self, rule: rules.Rule, message: str):
        super().__init__(message)
        self.rule = rule


@dataclass(frozen=True)
class GuardRecord:
    begins: int
    ends: int
    violations: int
    custom_calls: int
    extension_calls: int
    outputs_checked: int
    outputs_foreign: int
    ops_seen: int
    rule: str
    op: str

    @classmethod
    def parse(cls, raw: bytes) -> "GuardRecord":
        magic, *counts, rule, op = _RECORD.unpack(raw)
        if magic != _MAGIC:
            raise ValueError("no guard record at its address")
        text = [field.split(b"\0", 1)[0].decode(errors="replace") for field in (rule, op)]
        return cls(*counts, *text)

    @property
    def kernel_calls(self) -> int:
        return self.custom_calls + self.extension_calls


def violation_message(rule: str, op: str) -> str:
    if rule == rules.DATA_MOVEMENT.name and "into Python" in op:
        return (f"forward read its inputs' values into Python ({op}); the work is your kernels' to do: pass the "
                "tensors to them")
    if rule == rules.DATA_MOVEMENT.name:
        return (f"forward moved its input's data with PyTorch ({op}: a copy of an input, e.g. .contiguous() "
                "on a transposed or permuted view); layout changes count as compute: do them in your kernel")
    return (f"forward called the PyTorch operator {op}; only the solution's own kernels may compute "
            "(allocation and views are allowed)")


def _unreadable(why: str) -> Refused:
    return Refused(rules.PROTOCOL_FORGERY, f"the harness could not read the guard's record from the solution's "
                                           f"process ({why}); a process that hides its memory or its guard from "
                                           "the harness is refused")


class CallVerdicts:
    """One evaluation's verdicts on the candidate's calls. Made when the job is sent (the threads alive
    then are the harness's own); `mark` once the model is made, `before_call` as each call is sent,
    `answered` where the call's clock stops before the harness's own checks in the candidate's process
    (`finish`), `after_call` on its last answer."""

    GAP_LIMIT_S = 0.002      # in one gap between calls (an OpenMP worker parking itself uses microseconds)
    TOTAL_LIMIT_S = 0.02     # over all gaps
    NULL_LIMIT_S = 0.0005    # in one of the harness's empty calls (calibration.py: their time is taken off)

    def __init__(self, pid: int, guard_library: str | Path | None, sampling=None):
        """`guard_library`: the guard the candidate loads (None: the guard is off, threads alone are judged).
        `sampling`: an op_samples.OpSampling of the candidate, started and judged around each call."""
        self.pid, self.library, self.sampling = pid, guard_library, sampling
        self.harness_threads = thread_ids(pid)
        self.mem = self.maps = None
        self.problem = None
        if guard_library is not None:
            try:
                self.mem = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
                self.maps = os.open(f"/proc/{pid}/maps", os.O_RDONLY)
            except OSError as exc:
                self.problem = f"/proc/{pid}: {exc.strerror}"
        self.address: int | None = None
        self.last: GuardRecord | None = None
        self.calls = 0                       # calls the harness sent
        self.kernel_calls: list[int] = []    # per real call
        self.thread_time: dict[str, float] = {}
        self.gap_total = 0.0
        self.before: set[str] = set()
        self.at_call: dict[str, float] = {}   # the solution's threads' CPU time as the current call began
        self.at_answer: dict[str, float] | None = None   # ... as it answered, before the harness's checks
        self.harness_at_call: dict[str, float] = {}       # the harness's own threads' CPU time as the call began
        self.harness_at_answer: dict[str, float] | None = None   # ... and as it answered

    def close(self) -> None:
        if self.sampling is not None:
            self.sampling.close()
        for fd in (self.mem, self.maps):
            if fd is not None:
                os.close(fd)
        self.mem = self.maps = None

    # -- threads -------------------------------------------------------------------------------

    def _solution_threads(self) -> dict[str, float]:
        return threads_cpu_seconds(self.pid, thread_ids(self.pid) - self.harness_threads)

    def mark(self) -> None:
        """Once the model is made (the solution's load and `__init__` may use its threads): the CPU time
        its threads have used so far, from which work between calls is counted."""
        self.thread_time = self._solution_threads()

    def before_call(self, timed: bool = False, null: bool = False, data_bytes: int = 0) -> None:
        """Before a call is sent (the candidate stopped): the CPU time the solution's threads used since
        the last call ended (work kept running after forward returned, or started ahead). `timed`: a
        timed call (sampled more sparsely); `null`: one of the harness's empty calls (sampled as the timed ones
        are: their time is taken off the timed calls'); `data_bytes`: what its forward reads and writes, as
        the harness knows it (the sampling's bound on the interpreter's time grows with it)."""
        ids = thread_ids(self.pid)
        every = threads_cpu_seconds(self.pid, ids)   # read once: the sampling's start needs all of them
        usage = {tid: seconds for tid, seconds in every.items() if tid not in self.harness_threads}
        self.harness_at_call = {tid: seconds for tid, seconds in every.items() if tid in self.harness_threads}
        self.harness_at_answer = None
        gap = sum(max(0.0, seconds - self.thread_time.get(tid, 0.0)) for tid, seconds in usage.items())
        self.gap_total += gap
        # a thread gone since the last call ran after forward returned (to exit, at least), and the CPU
        # time it used went with it out of the thread list
        gone = self.thread_time.keys() - usage.keys()
        if gone or gap > self.GAP_LIMIT_S or self.gap_total > self.TOTAL_LIMIT_S:
            raise Refused(rules.BACKGROUND_THREAD, "a thread the solution started kept working outside forward "
                                                   "(after it returned or before the next call); all work must "
                                                   "finish inside forward")
        self.before = ids
        self.at_call = usage
        self.calls += 1
        if self.sampling is not None:
            self.sampling.start(timed, null, threads=every, data_bytes=data_bytes)

    def answered(self) -> None:
        """On a call's first answer (the candidate stopped, the call's clock stopped), before the harness
        resumes it for its own checks of the call (`finish`): what the solution's threads have used by
        then. `after_call` counts what they use during those checks as work between calls. The sampling
        tells the call's own samples from those of the checks."""
        every = threads_cpu_seconds(self.pid, thread_ids(self.pid))
        self.at_answer = {tid: seconds for tid, seconds in every.items() if tid not in self.harness_threads}
        self.harness_at_answer = {tid: seconds for tid, seconds in every.items() if tid in self.harness_threads}
        if self.sampling is not None:
            self.sampling.answered()

    def harness_seconds(self) -> float:
        """The CPU time the harness's own threads (those alive when the job was sent) used from the call's start
        (`before_call`) to its first answer (`answered`; 0 before it). An empty call measures the harness's
        steps by it (rounds.py `_outside_call`), not by the process's clock: a thread of the solution's that
        works there, alive or ended within the call, or holds the GIL while the harness's thread waits, would
        otherwise raise what is taken off every call."""
        if self.harness_at_answer is None:
            return 0.0
        return sum(max(0.0, seconds - self.harness_at_call.get(tid, 0.0))
                   for tid, seconds in self.harness_at_answer.items())

    def after_call(self, null: bool, outputs: int) -> None:
        """On a call's last answer (ok): the guard's record of it, and the threads it left.
        `outputs`: the output's non-empty tensors (the harness's own count of what the candidate
        must have checked)."""
        record = self._read() if self.library is not None else None
        alive = thread_ids(self.pid)
        at_answer, self.at_answer = self.at_answer, None
        # a thread alive when the call answered ran past it, even if it ended during the harness's checks
        left = sorted((alive | set(at_answer or ())) - self.before, key=int)
        if record is not None:
            self._judge(record, null, outputs)
        if self.sampling is not None:   # after the record: its refusal names the operator
            self.sampling.finish()
        if left:
            raise Refused(rules.BACKGROUND_THREAD, "work still running after forward returned (a detached thread? "
                                                   f"thread {left[0]} of the solution's process was alive after the "
                                                   "call); all work must finish inside forward")
        self.thread_time = threads_cpu_seconds(self.pid, alive - self.harness_threads)
        if at_answer is not None:
            self._after_answer(at_answer)
        worked = sum(max(0.0, seconds - self.at_call.get(tid, 0.0)) for tid, seconds in self.thread_time.items())
        if null and worked > self.NULL_LIMIT_S:
            raise Refused(rules.BACKGROUND_THREAD, f"a thread the solution started worked {worked * 1e3:.2f} ms during "
                                                   "one of the harness's empty calls, in which no forward runs: all "
                                                   "work must be inside forward")

    def timing_done(self) -> None:
        """Every timed call made: the verdicts that look at all of them at once (the sampling's interpreter)."""
        if self.sampling is not None:
            self.sampling.timing_done()

    def _after_answer(self, at_answer: dict[str, float]) -> None:
        """The CPU time the solution's threads used after the call answered, while the harness's own
        checks ran in its process: work between calls, counted against the same limits."""
        late = sum(max(0.0, seconds - at_answer.get(tid, 0.0)) for tid, seconds in self.thread_time.items())
        self.gap_total += late
        if at_answer.keys() - self.thread_time.keys() or late > self.GAP_LIMIT_S or self.gap_total > self.TOTAL_LIMIT_S:
            raise Refused(rules.BACKGROUND_THREAD, f"a thread the solution started worked {late * 1e3:.2f} ms after "
                                                   "forward returned, while the harness checked the call; all work "
                                                   "must finish inside forward")

    # -- the guard's record ------------------------------------------------------------------------

    def _read(self) -> GuardRecord:
        if self.problem:
            raise _unreadable(self.problem)
        try:
            if self.address is None:
                self.address = self._base() + elf_symbol(self.library, RECORD_SYMBOL)
            raw = os.pread(self.mem, _RECORD.size, self.address)
            return GuardRecord.parse(raw if len(raw) == _RECORD.size else b"")
        except (OSError, LookupError, ValueError, struct.error) as exc:
            raise _unreadable(str(exc) or type(exc).__name__) from None

    def _base(self) -> int:
        """The guard library's load address, from the maps file opened before the solution's code ran."""
        chunks, offset = [], 0
        while chunk := os.pread(self.maps, 1 << 16, offset):
            chunks.append(chunk)
            offset += len(chunk)
        return library_base(b"".join(chunks).decode(errors="replace"), self.library)

    def _judge(self, record: GuardRecord, null: bool, outputs: int) -> None:
        last = self.last or GuardRecord(0, 0, 0, 0, 0, 0, 0, 0, "", "")
        self.last = record
        if record.begins != self.calls or record.ends != self.calls:
            raise Refused(rules.PROTOCOL_FORGERY, f"the guard's record counts {record.begins} calls begun and "
                                                  f"{record.ends} ended where the harness made {self.calls}: the "
                                                  "solution drove the harness's guard itself")
        if record.violations != last.violations:
            rule = record.rule if record.rule in _REFUSED_RULES else None
            if rule is None:
                raise Refused(rules.PROTOCOL_FORGERY, "the guard's record names no rule for a refused operator")
            raise Refused(rules.RULES[rule], violation_message(rule, record.op))
        if null:
            return
        calls = record.kernel_calls - last.kernel_calls
        if calls <= 0:
            raise Refused(rules.NO_CUSTOM_KERNEL, "forward never called the solution's compiled extension: "
                                                  "the output must come from your own kernels")
        if record.outputs_foreign != last.outputs_foreign:
            raise Refused(rules.OUTPUT_NOT_FROM_KERNEL,
                          "forward returned a tensor that none of the solution's kernels produced or wrote "
                          "(computed in Python or by a library?); outputs must come from your kernels")
        if record.outputs_checked - last.outputs_checked != outputs:
            raise Refused(rules.PROTOCOL_FORGERY, f"the guard checked {record.outputs_checked - last.outputs_checked} "
                                                  f"of the call's {outputs} output tensors: the solution skipped "
                                                  "the harness's check of its outputs")
        # every call must call the kernels equally often (the first may do one-time work)
        # (each earlier call matched the second's count, or the evaluation ended there)
        self.kernel_calls.append(calls)
        if len(self.kernel_calls) > 2 and calls != self.kernel_calls[1]:
            raise Refused(rules.BEHAVIOUR_CHANGED, f"forward called its kernels {calls} times in one call and "
                                                   f"{self.kernel_calls[1]} times in another: every call must do the "
                                                   "same work")
