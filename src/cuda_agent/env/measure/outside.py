"""The harness's view of the candidate's process from outside it: stopping it between commands,
its threads and their CPU time, its output read from its memory, and where a library it loaded
keeps a symbol.

Nothing here runs in the candidate's process, so nothing the candidate does can change what it
reports. The candidate is stopped (SIGSTOP) whenever it is not answering a command, so none of its
threads, signal handlers or timers runs between calls. On the CPU backend a call's time is the CPU
time all of its threads used while it answered (the kernel's scheduler statistics), and its output
is read through `/proc/PID/mem` while it is stopped, at positions drawn here after it answered.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import math
import os
import signal
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy

STOP_TIMEOUT_S = 2.0         # a stopped process's threads all report it within this
MAX_SPAN_FACTOR = 8          # a strided output may span at most this many times its own bytes
_CLOCK_TICK = os.sysconf("SC_CLK_TCK")


class UnreadableOutput(ValueError):
    """An output location that does not describe readable memory of the candidate's."""


class HiddenMemory(Exception):
    """The candidate's memory no longer reads through the descriptor the harness opened before any of
    its code ran: not an output's fault (an address outside its mappings reads as UnreadableOutput)
    but the process taking the harness's view of it away."""


class ForeignMemory(UnreadableOutput):
    """An output located in memory that is not the candidate's own: a file's or shared pages, which
    another process (the judge, through the staging file) may have written."""


# -- stopping and resuming -----------------------------------------------------------------------


def _threads(pid: int) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []


def thread_ids(pid: int) -> set[str]:
    """The process's threads (native ones too), as the kernel lists them; empty when it is gone."""
    return set(_threads(pid))


def threads_cpu_seconds(pid: int, tids: set[str]) -> dict[str, float]:
    """CPU time of each of `tids` still alive."""
    usage = {}
    for tid in tids:
        seconds = thread_cpu_seconds(tid, pid)
        if seconds is not None:
            usage[tid] = seconds
    return usage


def _stat_fields(path: str) -> list[bytes]:
    """The fields of a stat file after the command's name, which the process chooses (any bytes but NUL,
    `)` among them): read as bytes, split after its last `)`. IndexError on an empty read."""
    with open(path, "rb") as fh:
        return fh.read().rsplit(b")", 1)[1].split()


def _state(pid: int, tid: str) -> str:
    try:
        return _stat_fields(f"/proc/{pid}/task/{tid}/stat")[0].decode("ascii")
    except (OSError, IndexError):
        return "X"   # gone


def stop(pid: int, wait: bool = True) -> bool:
    """SIGSTOP the process and (`wait`) wait until every thread of it is stopped (its CPU statistics
    are then final); False when it is gone or did not stop in time."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return False
    if not wait:
        return True
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        states = [_state(pid, tid) for tid in _threads(pid)]
        if states and all(s in "tTXZ" for s in states):
            return True
        if not states:
            return False
        time.sleep(0.00005)
    return False


def resume(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


# -- CPU time -----------------------------------------------------------------------------------


def thread_cpu_seconds(tid: str, pid: int | str = "self") -> float | None:
    """A thread's CPU time: schedstat's nanoseconds where the kernel has them, else stat's ticks."""
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
            return int(fh.read().split()[0]) / 1e9
    except (OSError, IndexError, ValueError):
        pass
    ticks = _stat_ticks(f"/proc/{pid}/task/{tid}/stat")
    return None if ticks is None else ticks / _CLOCK_TICK


def _stat_ticks(path: str) -> int | None:
    """utime + stime of a stat file, in clock ticks."""
    try:
        fields = _stat_fields(path)
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None


def process_clock(pid: int) -> int:
    """The clock id of a process's CPU clock (CPUCLOCK_SCHED of the whole process, linux/posix-timers.h):
    its threads' CPU time to the nanosecond, those that have exited included."""
    return ((~pid) << 3) | 2


def cpu_seconds(pid: int) -> float | None:
    """CPU time every thread of the process has used, those that have exited included: the kernel's CPU
    clock of the process, read from outside it. Where that clock cannot be read, its live threads' times
    summed, or the process's own total (clock ticks) where that is larger. Read while the process is
    stopped, either is final."""
    try:
        return time.clock_gettime(process_clock(pid))
    except OSError:
        pass
    times = [t for t in (thread_cpu_seconds(tid, pid) for tid in _threads(pid)) if t is not None]
    ticks = _stat_ticks(f"/proc/{pid}/stat")
    if not times and ticks is None:
        return None
    threads = sum(times)
    # the ticks lag the nanoseconds by up to a tick per thread: only a larger gap means time the
    # live threads do not account for (a thread that did work and exited)
    if ticks is not None and ticks / _CLOCK_TICK > threads + 2.0 / _CLOCK_TICK:
        return ticks / _CLOCK_TICK
    return threads


# -- a symbol of a library the candidate loaded --------------------------------------------------


def elf_symbol(path: str | Path, name: str) -> int:
    """`name`'s value in a 64-bit little-endian shared library's dynamic symbol table, relative to
    the library's lowest loaded address (its first PT_LOAD segment); LookupError when absent."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise LookupError(f"{path} is not a 64-bit little-endian ELF file")
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    loads = [struct.unpack_from("<IIQQ", data, phoff + i * phentsize) for i in range(phnum)]
    first = min(vaddr for kind, _, _, vaddr in loads if kind == 1) & ~0xFFF   # PT_LOAD, page-aligned
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind != 11:   # SHT_DYNSYM
            continue
        strings = sections[link][4]
        for entry in range(offset, offset + size, entsize or 24):
            st_name, _, _, shndx, value = struct.unpack_from("<IBBHQ", data, entry)
            end = data.index(b"\0", strings + st_name)
            if shndx and data[strings + st_name:end] == name.encode():
                return value - first
    raise LookupError(f"{name} is not exported by {path}")


def library_base(maps: str, path: str | Path) -> int:
    """Where a process mapped the library at `path`, from its /proc/PID/maps text: its mapping of file
    offset 0, matched by path or by device and inode (overlay file systems list another device there);
    LookupError unless there is exactly one."""
    info, real = os.stat(path), os.path.realpath(path)
    device = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}"
    starts = set()
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5 or int(fields[2], 16) != 0:
            continue
        if (len(fields) == 6 and fields[5].strip() == real) or (fields[3], fields[4]) == (device, str(info.st_ino)):
            starts.add(int(fields[0].split("-")[0], 16))
    if len(starts) != 1:
        raise LookupError(f"{Path(path).name} is mapped {len(starts)} times, not once")
    return starts.pop()


# -- the output, read from the candidate's memory -------------------------------------------------


_DTYPES = {
    "float64": "<f8", "float32": "<f4", "float16": "<f2", "bfloat16": "<u2", "int64": "<i8", "int32": "<i4",
    "int16": "<i2", "int8": "i1", "uint8": "u1", "bool": "?", "complex64": "<c8", "complex128": "<c16",
}


@dataclass
class Located:
    """One output tensor as the candidate's answer locates it: the address of element 0, its dtype,
    shape and strides (in elements)."""
    address: int
    dtype: str
    shape: list[int]
    strides: list[int]

    @classmethod
    def parse(cls, entry: Any) -> "Located":
        if not isinstance(entry, dict):
            raise UnreadableOutput("not an output location")
        address, dtype = entry.get("address"), entry.get("dtype")
        shape, strides = entry.get("shape"), entry.get("strides")
        if not isinstance(address, int) or address < 0 or dtype not in _DTYPES:
            raise UnreadableOutput(f"output location with address {address!r} and dtype {dtype!r}")
        if not (isinstance(shape, list) and isinstance(strides, list) and len(shape) == len(strides) and
                all(isinstance(n, int) and n >= 0 for n in shape) and
                all(isinstance(s, int) and s >= 0 for s in strides) and len(shape) <= 64):
            raise UnreadableOutput(f"output shape {shape!r} with strides {strides!r}")
        return cls(address, dtype, shape, strides)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        return numpy.dtype(_DTYPES[self.dtype]).itemsize

    def span(self) -> int:
        """Bytes from element 0 to the end of the last element."""
        if self.numel == 0:
            return 0
        return (sum((n - 1) * s for n, s in zip(self.shape, self.strides)) + 1) * self.itemsize

    def offsets(self, positions: numpy.ndarray) -> numpy.ndarray:
        """Byte offsets from element 0 of the row-major `positions`."""
        offsets = numpy.zeros(positions.shape, dtype=numpy.int64)
        rest = positions.astype(numpy.int64)
        for n, s in zip(reversed(self.shape), reversed(self.strides)):
            offsets += (rest % n) * s
            rest //= n
        return offsets * self.itemsize


class Memory:
    """The candidate's memory, through `/proc/PID/mem` (readable by the harness: the candidate is its
    descendant and runs as the same user, or in a user namespace the harness owns). Opened before any
    of the solution's code runs and held: the kernel checks access at open, so a process that later
    makes itself undumpable (prctl PR_SET_DUMPABLE) does not take the descriptor away. `check` and a
    read that fails for any other reason than an address outside its mappings raise HiddenMemory."""

    def __init__(self, pid: int):
        self.fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
        try:   # an address mapped from the start (the interpreter's first mapping), for `check`
            with open(f"/proc/{pid}/maps") as fh:
                self.known = int(fh.readline().split("-", 1)[0], 16)
        except (OSError, ValueError):
            os.close(self.fd)
            raise OSError(f"/proc/{pid}/maps is not readable") from None

    def close(self) -> None:
        os.close(self.fd)

    def check(self) -> None:
        """HiddenMemory unless the held descriptor still reads the candidate's memory."""
        try:
            self.read(self.known, 1)
        except UnreadableOutput:
            raise HiddenMemory(f"{self.known:#x}, mapped when the harness opened it, no longer reads") from None

    def read(self, address: int, nbytes: int) -> bytes:
        try:
            data = os.pread(self.fd, nbytes, address) if nbytes else b""
        except OSError as exc:   # not mapped there (EIO), or beyond the address space: the output's fault
            if exc.errno not in (errno.EIO, errno.EFAULT, errno.EINVAL):
                raise HiddenMemory(f"reading its memory failed: {exc.strerror}") from None
            data = b""
        if len(data) != nbytes:
            raise UnreadableOutput(f"{nbytes} bytes at {address:#x} are not the candidate's memory")
        return data

    def read_tensor(self, where: Located) -> numpy.ndarray:
        """The whole tensor, in row-major order."""
        dtype = numpy.dtype(_DTYPES[where.dtype])
        span = where.span()
        if span > MAX_SPAN_FACTOR * max(where.numel, 1) * dtype.itemsize + (1 << 20):
            raise UnreadableOutput(f"an output of {where.numel} elements spread over {span} bytes")
        raw = numpy.frombuffer(self.read(where.address, span), dtype=numpy.uint8)
        if where.numel == 0:
            return numpy.empty(where.shape, dtype=dtype)
        flat = raw.view(dtype) if span % dtype.itemsize == 0 else raw[:span - span % dtype.itemsize].view(dtype)
        return numpy.lib.stride_tricks.as_strided(flat, shape=where.shape,
                                                  strides=[s * dtype.itemsize for s in where.strides]).copy()

    def read_at(self, where: Located, positions: numpy.ndarray) -> numpy.ndarray:
        """Elements at row-major `positions`: gathered from one read when the tensor is small enough to
        read whole (cheaper than many reads), else one read per element."""
        dtype = numpy.dtype(_DTYPES[where.dtype])
        offsets = where.offsets(positions)
        span = where.span()
        if span <= (4 << 20) or span <= 8 * len(positions) * dtype.itemsize:
            raw = numpy.frombuffer(self.read(where.address, span), dtype=numpy.uint8)
            picked = raw[offsets[:, None] + numpy.arange(dtype.itemsize)]
        else:
            picked = numpy.frombuffer(b"".join(self.read(where.address + int(o), dtype.itemsize) for o in offsets),
                                      dtype=numpy.uint8).reshape(len(offsets), dtype.itemsize)
        return numpy.array(picked, order="C").view(dtype).reshape(-1)   # a writable copy: torch takes it silently


def own_memory(pid: int, output: dict) -> None:
    """Refuses (ForeignMemory) a located output any of whose bytes lie outside the process's private
    anonymous memory (its heap and anonymous mappings, where allocators put tensors): a mapping of a
    file, or a shared one, can show pages another process wrote, e.g. the judge's inputs in the
    staging file mapped a second time. The mappings are the kernel's (`areas`)."""
    located = [Located.parse(entry) for entry in output.get("tensors") or []]
    spans = [(where.address, where.address + where.span()) for where in located if where.numel]
    if not spans:
        return
    for low, high in spans:
        for start, end, shared, inode, name in areas(pid, low, high):
            if shared or inode or (name and name != "[heap]"):
                raise ForeignMemory(f"the output at {low:#x} lies in {'a shared' if shared else 'a'} "
                                    f"mapping of {name or 'shared memory'}, not the process's own memory")


# struct procmap_query (linux/fs.h): size, query_flags, query_addr, vma_start, vma_end, vma_flags,
# vma_page_size, vma_offset, inode, dev_major, dev_minor, vma_name_size, build_id_size, vma_name_addr,
# build_id_addr
_QUERY = struct.Struct("<QQQQQQQQQIIIIQQ")
_PROCMAP_QUERY = 0xC0686611        # _IOWR('f', 17, struct procmap_query)
_COVERING_OR_NEXT, _VMA_SHARED = 0x10, 0x08
_NAME_BYTES = 4096 + 256           # a path (PATH_MAX) and its " (deleted)"
_query_refused = False             # the kernel has no PROCMAP_QUERY (before Linux 6.11): the text only


def areas(pid: int, low: int, high: int) -> list[tuple[int, int, bool, int, str]]:
    """The process's mappings that overlap [low, high), by address: (start, end, shared, inode, name),
    as /proc/PID/maps lists them (shared: its `s`; inode 0 and name "" for anonymous memory). Asked of
    the kernel one mapping at a time through the maps file's PROCMAP_QUERY ioctl, which reports the
    same fields without writing out the whole list; read from the list's text where the kernel does not
    answer it."""
    global _query_refused
    if not _query_refused:
        try:
            return _queried(pid, low, high)
        except OSError as exc:
            if exc.errno in (errno.ENOTTY, errno.EINVAL, errno.EOPNOTSUPP):
                _query_refused = True
    return _listed(pid, low, high)


def _queried(pid: int, low: int, high: int) -> list[tuple[int, int, bool, int, str]]:
    found = []
    name = ctypes.create_string_buffer(_NAME_BYTES)
    fd = os.open(f"/proc/{pid}/maps", os.O_RDONLY)
    try:
        address = low
        while address < high:
            query = bytearray(_QUERY.pack(_QUERY.size, _COVERING_OR_NEXT, address, 0, 0, 0, 0, 0, 0, 0, 0,
                                          _NAME_BYTES, 0, ctypes.addressof(name), 0))
            try:
                fcntl.ioctl(fd, _PROCMAP_QUERY, query, True)
            except OSError as exc:
                if exc.errno == errno.ENOENT:   # no mapping at or above `address`
                    break
                raise
            fields = _QUERY.unpack(query)
            start, end, flags, inode, name_size = fields[3], fields[4], fields[5], fields[8], fields[11]
            if start >= high:
                break
            text = name.raw[:max(name_size - 1, 0)].decode(errors="replace") if name_size else ""
            found.append((start, end, bool(flags & _VMA_SHARED), inode, text))
            address = end
    finally:
        os.close(fd)
    return found


def _listed(pid: int, low: int, high: int) -> list[tuple[int, int, bool, int, str]]:
    found = []
    with open(f"/proc/{pid}/maps", errors="replace") as fh:   # a mapping's name is any bytes the process chose
        for line in fh.read().splitlines():
            fields = line.split(maxsplit=5)
            start, end = (int(part, 16) for part in fields[0].split("-"))
            if end <= low or start >= high:
                continue
            found.append((start, end, fields[1][3] != "p", int(fields[4]), fields[5] if len(fields) > 5 else ""))
    return found


def read_samples(memory: Memory, output: dict, count: int) -> dict:
    """The candidate's located output (`output`: its structure, located tensors and Python numbers) as
    a sample record the judge compares (samples.compare_sampled's format), its positions drawn here:
    every element of a tensor of at most `count` elements, else `count` of them."""
    import torch

    from cuda_agent.env.rules.samples import pack_samples, random_positions

    tensors = []
    for entry in output.get("tensors") or []:
        where = Located.parse(entry)
        # the strides it was read through: the judge decides from them whether the layout passes
        record = {"shape": where.shape, "dtype": where.dtype, "strides": where.strides}
        if where.numel:   # drawn now, after the output was fixed (the harness's own sampler)
            positions = random_positions(where.numel, count, torch.device("cpu")).numpy()
            values = torch.from_numpy(memory.read_at(where, positions))
            if where.dtype == "bfloat16":
                values = values.view(torch.bfloat16)
            if values.is_complex():
                values = torch.view_as_real(values)
            kind = torch.float64 if values.is_floating_point() else torch.int64
            record["positions"] = pack_samples(torch.from_numpy(positions))
            record["values"] = pack_samples(values.to(kind).reshape(-1))
        tensors.append(record)
    return {"structure": output.get("structure"), "tensors": tensors, "scalars": output.get("scalars") or []}


def layout_of(tree: Any, located: list[Located]) -> dict:
    """The output's layout (transfer.output_layout's tree) with each tensor's dtype and shape taken
    from its location, in order; UnreadableOutput when the two do not describe the same tensors."""
    remaining = list(located)

    def walk(node: Any, depth: int) -> Any:
        if depth > 64 or not isinstance(node, dict) or not node:
            raise UnreadableOutput("an output layout the harness does not write")
        kind = "tensor" if "tensor" in node else next(iter(node))
        value = node[kind]
        if kind == "tensor":
            if not remaining:
                raise UnreadableOutput("more tensors in the output's layout than located")
            where = remaining.pop(0)
            return {"tensor": where.dtype, "shape": where.shape}
        if kind == "list" and isinstance(value, list):
            return {"list": [walk(v, depth + 1) for v in value]}
        if kind == "dict" and isinstance(value, list):
            return {"dict": [[k, walk(v, depth + 1)] for k, v in value]}
        return node

    layout = walk(tree, 0)
    if remaining:
        raise UnreadableOutput("more tensors located than in the output's layout")
    return layout


def write_whole(memory: Memory, output: dict, path: Path, limit_bytes: int | None = None) -> dict:
    """Every tensor of the located output read whole into `path` (transfer's raw format: each tensor's
    row-major bytes in order, at the offsets `transfer.read_output` expects); its layout back.
    `limit_bytes`: the most the harness reads (the reference's output, with room): a located output
    claims its sizes, and a broadcast one (stride 0) spans few bytes for any number of elements."""
    located = [Located.parse(entry) for entry in output.get("tensors") or []]
    total = sum(where.numel * where.itemsize for where in located)
    if limit_bytes is not None and total > limit_bytes:
        raise UnreadableOutput(f"an output of {total} bytes, more than the reference's ({limit_bytes} with room)")
    layout = layout_of(output.get("tree"), located)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        for where in located:
            fh.write(numpy.ascontiguousarray(memory.read_tensor(where)).tobytes())
    return layout
