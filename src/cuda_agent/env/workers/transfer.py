"""A verification output handed from the candidate to the judge: its tensors' raw bytes in a file of
the candidate's box, and a layout (JSON: the tree of lists, dicts and numbers, each tensor's dtype
and shape) that travels with the candidate's answer.

Raw bytes go through pinned host buffers (no pickling, archive or pageable copies: a strict
verification hands over nine outputs). Neither half is trusted by the judge: the layout is parsed
strictly (known dtypes, whole shapes, a bounded tree, sizes that add up to the file's exactly) and
the file is opened without following links and read into memory of the judge's own (a mapping of a
file in the candidate's folder could be truncated under the reader, and crash it).

Outputs that fit skip the files: `Staging` is a shared memory file of two slots that the harness
makes for each pair of workers and seals at a fixed size (nobody can shrink it under a reader's
mapping, so reading it cannot crash the judge). The candidate copies a verification call's output
into slot (call index mod 2) straight from the device, the judge copies it from there to its device
(both mappings registered with CUDA: full-speed transfers, no file written or read); the schedule
hands a slot back to the candidate only after the judge's verdict on it. Whatever the candidate
writes there is its own output: the judge checks it like any other.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import stat
from pathlib import Path
from typing import Any

import torch

from cuda_agent.env.workers.protocol import STAGING_FD_ENV, STAGING_SLOT_BYTES
from cuda_agent.tasks.layout import value_layout

MAX_NODES = 100_000     # containers, numbers and tensors in one output's layout
MAX_DEPTH = 64
# STAGING_SLOT_BYTES (protocol.py) per slot: larger outputs go through files, or on CUDA the device slot
# (device_slot.py); only written pages take memory
_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW


class UnreadableOutput(ValueError):
    """The file or its layout is not what an honest candidate's harness writes."""


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    """The tensor's elements, in row-major order, as one dimension of bytes (on its own device)."""
    flat = t.detach().resolve_conj().resolve_neg().contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else torch.empty(0, dtype=torch.uint8, device=t.device)


def write_output(value: Any, path: Path) -> dict:
    """Write every tensor of `value` to `path` (raw bytes, in `tensors_in` order); the layout back."""
    tree, host = output_to_host(value)
    write_host(host, path)
    return tree


def output_layout(value: Any) -> tuple[dict, list[torch.Tensor]]:
    """(layout, the tensors of `value` in the layout's order): tasks/layout.py's."""
    return value_layout(value)


def output_to_host(value: Any) -> tuple[dict, list[torch.Tensor]]:
    """(layout, every tensor's bytes in host memory): the device's part of `write_output`, which the
    candidate does while it holds the device; the file is written after it let go (`write_host`)."""
    tree, tensors = output_layout(value)
    return tree, host_copies(tensors)


def host_copies(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor's bytes in host memory (for `write_host`)."""
    host = []
    for t in tensors:
        data = _flat_bytes(t)
        if data.is_cuda:   # through pinned memory: a pageable copy runs at a fraction of the speed
            pinned = torch.empty(data.numel(), dtype=torch.uint8, pin_memory=True)
            pinned.copy_(data)
            data = pinned
        host.append(data)
    return host


def write_host(host: list[torch.Tensor], path: Path) -> None:
    with open(path, "wb") as fh:
        for data in host:
            fh.write(data.numpy().data)


class _Unsupported:
    """A value of a type the layout cannot carry (compares unequal to anything the reference returns)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


def _dtype(name: Any) -> torch.dtype:
    dtype = getattr(torch, name, None) if isinstance(name, str) and name.isidentifier() else None
    if not isinstance(dtype, torch.dtype):
        raise UnreadableOutput(f"unknown dtype {name!r}")
    return dtype


def _shape(shape: Any) -> list[int]:
    if not (isinstance(shape, list) and len(shape) <= MAX_DEPTH
            and all(type(n) is int and n >= 0 for n in shape)):
        raise UnreadableOutput(f"malformed shape {shape!r}")
    return shape


def _nbytes(dtype: torch.dtype, shape: list[int]) -> int:
    count = 1
    for n in shape:
        count *= n
    return count * dtype.itemsize


def parse_layout(layout: Any) -> list[tuple[torch.dtype, list[int]]]:
    """Each tensor's (dtype, shape) in a layout from the candidate, checked whole before anything is
    read (UnreadableOutput: not one `output_layout` can have made)."""
    specs: list[tuple[torch.dtype, list[int]]] = []
    nodes = [0]

    def check(node: Any, depth: int) -> None:
        nodes[0] += 1
        if nodes[0] > MAX_NODES or depth > MAX_DEPTH:
            raise UnreadableOutput("layout too large or too deep")
        if not isinstance(node, dict) or len(node) not in (1, 2):
            raise UnreadableOutput("malformed layout")
        if "tensor" in node and set(node) == {"tensor", "shape"}:
            specs.append((_dtype(node["tensor"]), _shape(node["shape"])))
        elif set(node) == {"list"} and isinstance(node["list"], list):
            for item in node["list"]:
                check(item, depth + 1)
        elif set(node) == {"dict"} and isinstance(node["dict"], list):
            for pair in node["dict"]:
                if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], (str, int))):
                    raise UnreadableOutput("malformed dict entry")
                check(pair[1], depth + 1)
        elif set(node) == {"value"} and (node["value"] is None or isinstance(node["value"], (bool, int, float))):
            pass
        elif set(node) == {"other"} and isinstance(node["other"], str):
            pass
        else:
            raise UnreadableOutput("malformed layout")

    check(layout, 0)
    return specs


def build_output(layout: Any, tensors: list[torch.Tensor]) -> Any:
    """The output a (parsed) layout describes, with `tensors` in its order."""
    return _build(layout, iter(tensors))


def _build(node: dict, remaining) -> Any:
    # not a recursive closure: that is a reference cycle holding the tensors until the collector runs
    if "tensor" in node:
        return next(remaining)
    if "list" in node:
        return [_build(item, remaining) for item in node["list"]]
    if "dict" in node:
        return {key: _build(item, remaining) for key, item in node["dict"]}
    if "value" in node:
        return node["value"]
    return _Unsupported(node["other"])


def read_output(path: str | Path, layout: Any, device: torch.device, pin: bool = False) -> Any:
    """The output `write_output` wrote, rebuilt on `device`; UnreadableOutput when the layout or the
    file is not one it can have written. `pin`: on the CPU, in pinned memory (to go to a GPU next)."""
    specs = parse_layout(layout)
    expected = sum(_nbytes(dtype, shape) for dtype, shape in specs)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableOutput("not a regular file")
        if info.st_size != expected:
            raise UnreadableOutput(f"{info.st_size} bytes, but its layout needs {expected}")
        tensors = [_read_tensor(fh, dtype, shape, device, pin) for dtype, shape in specs]
    return build_output(layout, tensors)


def _read_tensor(fh, dtype: torch.dtype, shape: list[int], device: torch.device, pin: bool) -> torch.Tensor:
    size = _nbytes(dtype, shape)
    host = torch.empty(size, dtype=torch.uint8, pin_memory=pin or device.type == "cuda")
    view, done = host.numpy().data, 0
    while done < size:
        got = fh.readinto(view[done:])
        if not got:
            raise UnreadableOutput("the file ended early")
        done += got
    return host.to(device).view(dtype).view(shape)


# -- the staging file: outputs without files ----------------------------------------------------------


def create_staging(slot_bytes: int | None = None) -> int:
    """The harness's: a shared memory file of two slots (of STAGING_SLOT_BYTES), sealed at that size, for
    one pair of workers (each inherits the descriptor, STAGING_FD_ENV); the caller closes its own once
    both started."""
    fd = os.memfd_create("cuda-agent-staging", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, 2 * (slot_bytes or STAGING_SLOT_BYTES))
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
    except OSError:
        os.close(fd)
        raise
    return fd


def _clear_cuda_error() -> None:
    """A failed runtime call leaves its error for the thread's next `cudaGetLastError`, which PyTorch
    reads after every kernel launch: cleared here, in the CUDA runtime torch loaded (or the next launch
    of an honest forward would fail with it)."""
    import ctypes

    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_LAZY).cudaGetLastError()
            return
        except (OSError, AttributeError):
            continue


def _aligned(offset: int) -> int:
    return -(-offset // 64) * 64   # every tensor's bytes start 64-aligned (any dtype can view them)


def layout_fits(layout: Any) -> bool:
    """Whether tensors of `layout` fit a staging slot of this machine's size."""
    return _staged_bytes([_nbytes(dtype, shape) for dtype, shape in parse_layout(layout)]) <= STAGING_SLOT_BYTES


def _staged_bytes(sizes: list[int]) -> int:
    offset = 0
    for size in sizes:
        offset = _aligned(offset + size)
    return offset


def staged_bytes(tensors: list[torch.Tensor]) -> int:
    """What these tensors take in a staging slot."""
    return _staged_bytes([t.numel() * t.element_size() for t in tensors])


class Staging:
    """A worker's mapping of the staging file (`create_staging`): slot 0 and slot 1."""

    def __init__(self, fd: int):
        try:
            if fcntl.fcntl(fd, fcntl.F_GET_SEALS) & _SEALS != _SEALS:
                raise UnreadableOutput("the staging file is not sealed")
            size = os.fstat(fd).st_size
            self.slot_bytes = size // 2
            self.mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self.memory = torch.frombuffer(self.mapping, dtype=torch.uint8) if size else torch.empty(0, dtype=torch.uint8)
        self.pinned = [0, 0]   # bytes of each slot registered with CUDA
        self.unpinnable = False   # registration failed once: pageable copies from then on (slower, not wrong)

    @classmethod
    def from_environment(cls) -> "Staging | None":
        """The worker's staging file, when the harness gave it one (its variable is removed either way)."""
        fd = os.environ.pop(STAGING_FD_ENV, None)
        if fd is None:
            return None
        try:
            return cls(int(fd))
        except (OSError, ValueError):
            return None   # outputs then go through files

    def close(self) -> None:
        """Unregister the slots from CUDA and unmap the file (a persistent judge, between its jobs):
        nothing of it stays reachable in this process. Raises BufferError while a view of it is alive."""
        if self.mapping.closed:
            return
        for index, size in enumerate(self.pinned):
            if size and int(torch.cuda.cudart().cudaHostUnregister(self.memory.data_ptr() + index * self.slot_bytes)):
                _clear_cuda_error()   # not left for the next job's first kernel launch
        self.pinned = [0, 0]
        self.memory = None
        self.mapping.close()

    def _slot(self, index: int, nbytes: int, device: torch.device) -> torch.Tensor:
        if index not in (0, 1) or nbytes > self.slot_bytes:
            raise UnreadableOutput(f"{nbytes} bytes do not fit a staging slot")
        start = index * self.slot_bytes
        if device.type == "cuda" and nbytes > self.pinned[index] and not self.unpinnable:   # once per size
            self._pin(index, start, nbytes)
        return self.memory[start:start + nbytes]

    def _pin(self, index: int, start: int, nbytes: int) -> None:
        cudart = torch.cuda.cudart()
        base = self.memory.data_ptr() + start
        if self.pinned[index]:
            cudart.cudaHostUnregister(base)
        size = min(self.slot_bytes, -(-nbytes // (2 << 20)) * (2 << 20))   # whole 2 MiB, within the slot
        registered = int(cudart.cudaHostRegister(base, size, 0)) == 0
        if not registered:
            _clear_cuda_error()
        self.pinned[index] = size if registered else 0
        self.unpinnable = not registered

    def prepare(self, nbytes: int, device: torch.device) -> None:
        """Both slots ready for outputs of `nbytes` (on a GPU: their pages touched and registered, which
        for 128 MB takes tens of milliseconds: done before any call holds the device)."""
        if nbytes <= self.slot_bytes:
            for index in (0, 1):
                self._slot(index, nbytes, device)

    def fits(self, tensors: list[torch.Tensor]) -> bool:
        return staged_bytes(tensors) <= self.slot_bytes

    def put(self, index: int, tensors: list[torch.Tensor]) -> None:
        """The candidate's: `tensors`' bytes into slot `index`, each at an aligned offset (from the
        device straight into the registered slot)."""
        device = tensors[0].device if tensors else torch.device("cpu")
        slot, offset = self._slot(index, staged_bytes(tensors), device), 0
        for t in tensors:
            data = _flat_bytes(t)
            slot[offset:offset + data.numel()].copy_(data)
            offset = _aligned(offset + data.numel())

    def take(self, index: int, layout: Any, device: torch.device, copy: bool = True) -> Any:
        """The judge's: the output in slot `index` as its layout describes (checked as `read_output`
        checks a file's): on a GPU, views of the registered slot that `to(device)` copies at full
        speed; on the CPU, a copy (the comparison must not read memory the candidate still writes).
        `copy=False`: views on the CPU too (the candidate's inputs, which the judge put there)."""
        specs = parse_layout(layout)
        slot = self._slot(index, _staged_bytes([_nbytes(dtype, shape) for dtype, shape in specs]), device)
        offset, tensors = 0, []
        for dtype, shape in specs:
            size = _nbytes(dtype, shape)
            raw = slot[offset:offset + size]
            offset = _aligned(offset + size)
            raw = raw if device.type == "cuda" or not copy else raw.clone()
            tensors.append(raw.view(dtype).view(shape) if size else torch.empty(shape, dtype=dtype))
        return build_output(layout, tensors)
