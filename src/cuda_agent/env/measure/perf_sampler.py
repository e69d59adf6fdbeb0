"""Where another process's threads spend their CPU time, sampled from outside it with the kernel's
perf events: every `period_ns` of a thread's CPU time the kernel notes its user-space instruction
pointer, into ring buffers only this (the harness's) process maps.

The events are the software CPU clock (`PERF_COUNT_SW_CPU_CLOCK`; hardware counters are often absent
in virtual machines), user space only (`exclude_kernel`: what `perf_event_paranoid` 2 allows a process
that may ptrace the target). One event per (thread, CPU the process may run on), each with `inherit`:
the threads the process creates later, and the threads they create, carry the event too, so a thread
born and joined inside one call is seen (an event with `inherit` can only be mapped when it is bound to
a CPU, hence one per CPU). The events of one CPU write into one buffer (`PERF_EVENT_IOC_SET_OUTPUT`),
as `perf record` does. They start disabled; the harness enables them around the calls it samples
(`enable` / `disable`, ioctls on its own descriptors, which the target cannot see or undo) and drains
the buffers while the target is stopped.

Nothing here runs in the sampled process. `PerfUnavailable` says why sampling cannot be set up on this
machine (paranoid level 3 and above, a seccomp filter or a container without the syscall, no
permission to trace the target, too little lockable memory for the buffers).
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import platform
import struct
from dataclasses import dataclass

_SYSCALL = {"x86_64": 298, "aarch64": 241}
_TYPE_SOFTWARE, _SW_CPU_CLOCK = 1, 0
_SAMPLE_IP, _SAMPLE_TID = 1 << 0, 1 << 1
# attr flag bits (linux/perf_event.h): disabled, inherit, exclude_kernel, exclude_hv
_DISABLED, _INHERIT, _EXCLUDE_KERNEL, _EXCLUDE_HV = 1 << 0, 1 << 1, 1 << 5, 1 << 6
_FLAG_FD_CLOEXEC = 8
_IOC_ENABLE, _IOC_DISABLE, _IOC_SET_OUTPUT = 0x2400, 0x2401, 0x2405
_RECORD_LOST, _RECORD_SAMPLE = 2, 9
_ATTR = struct.Struct("<IIQQQQQIIQQQQIiQIHH")   # struct perf_event_attr up to sample_max_stack (112 bytes)
_HEADER = struct.Struct("<IHH")                 # struct perf_event_header
_SAMPLE = struct.Struct("<QII")                 # ip, pid, tid (PERF_SAMPLE_IP | PERF_SAMPLE_TID)
_HEAD_AT, _TAIL_AT = 1024, 1032                 # data_head, data_tail in struct perf_event_mmap_page
_PAGE = mmap.PAGESIZE

DEFAULT_PERIOD_NS = 100_000
BUFFER_BUDGET = 512 << 10   # bytes of ring buffer per sampler, shared out over the CPUs (the kernel bounds
                            # what a user may lock: kernel.perf_event_mlock_kb per CPU, then RLIMIT_MEMLOCK)
MAX_BUFFER_PAGES = 64       # per CPU: 256 KiB, 1 s of one busy thread at 100 us between samples
MIN_BUFFER_PAGES = 8        # per CPU, however many CPUs: 0.13 s of one busy thread at 100 us (the lock
                            # allowance grows with the CPUs too)


class PerfUnavailable(OSError):
    """Perf sampling of the target cannot be set up here; the message says why."""


@dataclass(frozen=True)
class Sample:
    ip: int
    tid: int


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    libc.ioctl.restype = ctypes.c_int
    return libc


def _open_event(libc, attr: bytes, tid: int, cpu: int) -> int:
    number = _SYSCALL.get(platform.machine())
    if number is None:
        raise PerfUnavailable(errno.ENOSYS, f"perf_event_open's number on {platform.machine()} is not known here")
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = libc.syscall(ctypes.c_long(number), buf, ctypes.c_int(tid), ctypes.c_int(cpu), ctypes.c_int(-1),
                      ctypes.c_ulong(_FLAG_FD_CLOEXEC))
    if fd < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return fd


def _attr(period_ns: int) -> bytes:
    flags = _DISABLED | _INHERIT | _EXCLUDE_KERNEL | _EXCLUDE_HV
    return _ATTR.pack(_TYPE_SOFTWARE, _ATTR.size, _SW_CPU_CLOCK, period_ns, _SAMPLE_IP | _SAMPLE_TID, 0, flags,
                      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)


class Sampler:
    """Perf sampling of one process (`pid`, as this process sees it), set up by `attach`."""

    def __init__(self, pid: int, period_ns: int = DEFAULT_PERIOD_NS, buffer_bytes: int | None = None):
        """`buffer_bytes`: the ring buffers' total (BUFFER_BUDGET by default), a power of two of pages per
        CPU; a full buffer drops samples until it is drained (`lost`)."""
        self.pid, self.period_ns, self.budget = pid, period_ns, buffer_bytes or BUFFER_BUDGET
        self.pages = 1
        self.libc = _libc()
        self.fds: list[int] = []
        self.buffers: dict[int, mmap.mmap] = {}    # cpu -> its ring buffer
        self.leaders: dict[int, int] = {}          # cpu -> the event whose buffer the others share
        self.attached: set[int] = set()
        self.lost = 0
        self.enabled = False

    # -- setting up -----------------------------------------------------------------------------

    def attach(self) -> "Sampler":
        """One disabled event per (thread, CPU) of the process; the threads it creates from now on inherit
        them. Listed again until no thread appears (one born while the list was being attached is then
        covered too). PerfUnavailable when the kernel refuses."""
        try:
            cpus = sorted(os.sched_getaffinity(self.pid))
        except OSError as exc:
            raise PerfUnavailable(exc.errno, f"the process's CPUs: {exc.strerror}") from None
        pages = max(MIN_BUFFER_PAGES, self.budget // (_PAGE * len(cpus)))
        self.pages = min(MAX_BUFFER_PAGES, 1 << (pages.bit_length() - 1))
        attr = _attr(self.period_ns)
        try:
            for _ in range(8):
                new = self._threads() - self.attached
                if not new:
                    return self
                for tid in sorted(new):
                    for cpu in cpus:
                        self._add(attr, tid, cpu)
                    self.attached.add(tid)
            return self
        except PerfUnavailable:
            self.close()
            raise
        except OSError as exc:
            self.close()
            raise PerfUnavailable(exc.errno, f"perf_event_open on process {self.pid}: {exc.strerror} "
                                             f"(kernel.perf_event_paranoid {_paranoid()})") from None

    def _threads(self) -> set[int]:
        try:
            return {int(t) for t in os.listdir(f"/proc/{self.pid}/task")}
        except OSError:
            return set()

    def _add(self, attr: bytes, tid: int, cpu: int) -> None:
        try:
            fd = _open_event(self.libc, attr, tid, cpu)
        except OSError as exc:
            if exc.errno == errno.ESRCH:   # the thread ended meanwhile
                return
            raise
        self.fds.append(fd)
        if cpu not in self.leaders:
            try:
                self.buffers[cpu] = mmap.mmap(fd, (1 + self.pages) * _PAGE, mmap.MAP_SHARED,
                                              mmap.PROT_READ | mmap.PROT_WRITE)
            except OSError as exc:
                raise PerfUnavailable(exc.errno, f"mapping a perf buffer: {exc.strerror} (kernel.perf_event_mlock_kb "
                                                 "and the memlock limit bound the buffers)") from None
            self.leaders[cpu] = fd
        elif self.libc.ioctl(fd, _IOC_SET_OUTPUT, ctypes.c_int(self.leaders[cpu])) != 0:
            raise OSError(ctypes.get_errno(), "PERF_EVENT_IOC_SET_OUTPUT: " + os.strerror(ctypes.get_errno()))

    def close(self) -> None:
        for buffer in self.buffers.values():
            buffer.close()
        for fd in self.fds:
            os.close(fd)
        self.fds, self.buffers, self.leaders = [], {}, {}

    # -- sampling -------------------------------------------------------------------------------

    def _ioctl_all(self, request: int) -> None:
        # an ioctl on an event reaches the events its threads' children inherited from it
        for fd in self.fds:
            self.libc.ioctl(fd, request, 0)

    def enable(self) -> None:
        self._ioctl_all(_IOC_ENABLE)
        self.enabled = True

    def disable(self) -> None:
        self._ioctl_all(_IOC_DISABLE)
        self.enabled = False

    def drain(self) -> list[Sample]:
        """The samples written since the last drain (all CPUs), the buffers emptied. `lost` counts those
        the kernel dropped because a buffer was full."""
        samples: list[Sample] = []
        size = self.pages * _PAGE
        for buffer in self.buffers.values():
            head, = struct.unpack_from("<Q", buffer, _HEAD_AT)
            tail, = struct.unpack_from("<Q", buffer, _TAIL_AT)
            if head - tail > size:   # cannot happen unless the buffer was overwritten: start over
                tail = head - size
            start = tail % size   # the unread records, unwrapped
            data = (bytes(buffer[_PAGE + start:_PAGE + size]) + bytes(buffer[_PAGE:_PAGE + start])
                    if start + (head - tail) > size else bytes(buffer[_PAGE + start:_PAGE + start + (head - tail)]))
            position = tail
            while position + _HEADER.size <= head:
                at = position - tail
                kind, _, length = _HEADER.unpack_from(data, at)
                if length < _HEADER.size:
                    break
                if kind == _RECORD_SAMPLE and length >= _HEADER.size + _SAMPLE.size:
                    ip, _, tid = _SAMPLE.unpack_from(data, at + _HEADER.size)
                    samples.append(Sample(ip, tid))
                elif kind == _RECORD_LOST:
                    self.lost += struct.unpack_from("<QQ", data, at + _HEADER.size)[1]
                position += length
            struct.pack_into("<Q", buffer, _TAIL_AT, head)
        return samples


def _paranoid() -> str:
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as fh:
            return fh.read().strip()
    except OSError:
        return "unknown"
