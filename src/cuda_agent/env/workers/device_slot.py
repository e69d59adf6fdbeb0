"""Verification outputs too large for a staging slot, handed over on the GPU itself.

On CUDA an output larger than a host staging slot (protocol.STAGING_SLOT_BYTES) does not leave the
device: the judge allocates one slot of device memory the size of the reference's output with the
driver's virtual memory calls (cuMemCreate, exportable as a file descriptor), and hands the
descriptor to its candidate through a Unix socket in the candidate's box (SCM_RIGHTS); the candidate
maps the same memory. Legacy CUDA IPC handles (cudaIpcGetMemHandle, torch's CUDA tensor sharing) do
not work here: the candidate runs in a PID namespace of its own, and those handles are refused across
namespaces; a descriptor is only a file.

Trust: the judge owns the memory and decides its size; the candidate maps only that allocation (none
of the judge's other memory). The candidate copies a verification call's output into the slot right
after its call (its snapshot, on the call's stream); the judge copies the slot into memory of its own
before it compares anything, so the comparison reads bytes the candidate cannot change any more. The
schedule sends the candidate's next call only after the judge's verdict on this one, so an honest
candidate never writes a slot the judge is still copying; whatever a dishonest one writes there is
its own output, checked like any other.
"""

from __future__ import annotations

import ctypes
import os
import socket
import threading
from pathlib import Path
from typing import Any

import torch

from cuda_agent.env.workers.transfer import (UnreadableOutput, _aligned, _flat_bytes, _nbytes, _staged_bytes,
                                             build_output, parse_layout, staged_bytes)

SOCKET_NAME = "device-slot.sock"   # in the candidate's box
CONNECT_TIMEOUT_S = 60.0

_PINNED, _POSIX_FD, _ON_DEVICE, _READ_WRITE = 1, 1, 1, 3   # CUmemAllocationType, handle type, location, access


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _Prop(ctypes.Structure):   # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _Access(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class DeviceSlotError(RuntimeError):
    """The slot could not be made or mapped here (outputs then go through files, as before)."""


_driver = None


def _cuda():
    global _driver
    if _driver is None:
        _driver = ctypes.CDLL("libcuda.so.1")
    return _driver


def _check(result: int, what: str) -> None:
    if result != 0:
        text = ctypes.c_char_p()
        _cuda().cuGetErrorString(result, ctypes.byref(text))
        raise DeviceSlotError(f"{what} failed: {text.value.decode() if text.value else result}")


def _prop(device: torch.device) -> _Prop:
    prop = _Prop()
    prop.type, prop.requestedHandleTypes = _PINNED, _POSIX_FD
    prop.location = _Location(_ON_DEVICE, device.index or 0)
    return prop


def slot_size(nbytes: int, device: torch.device) -> int:
    """`nbytes` rounded up to the driver's allocation granularity."""
    granularity = ctypes.c_size_t()
    _check(_cuda().cuMemGetAllocationGranularity(ctypes.byref(granularity), ctypes.byref(_prop(device)), 0),
           "cuMemGetAllocationGranularity")
    step = max(1, granularity.value)
    return -(-max(1, nbytes) // step) * step


class _CudaArray:
    """A device address as `__cuda_array_interface__` (torch.as_tensor wraps it without copying)."""

    def __init__(self, address: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (address, False),
                                         "strides": None, "version": 2}


def offer(fd: int, nbytes: int, box: Path) -> socket.socket:
    """The judge's: `fd` (with the slot's size) to the first process that connects to the box's
    socket, from a thread of its own; the descriptor is closed and the socket removed after, or once
    the listening socket returned is shut down (`DeviceSlot.close`)."""
    path = box / SOCKET_NAME
    path.unlink(missing_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def hand_over() -> None:
        try:
            conn, _ = server.accept()   # no time limit: the candidate connects once it has built and loaded
            with conn:
                socket.send_fds(conn, [str(nbytes).encode()], [fd])
        except OSError:
            pass   # nobody came (the candidate failed before): outputs go through files
        finally:
            os.close(fd)
            server.close()
            path.unlink(missing_ok=True)

    threading.Thread(target=hand_over, daemon=True, name="device-slot").start()
    return server


def receive(box: Path) -> tuple[int, int]:
    """The candidate's: (the slot's size, its descriptor) from the judge's socket in the box."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(CONNECT_TIMEOUT_S)
            conn.connect(str(box / SOCKET_NAME))
            data, fds, _, _ = socket.recv_fds(conn, 64, 1)
    except OSError as exc:
        raise DeviceSlotError(f"no slot from the judge: {exc}") from None
    if len(fds) != 1 or not data.isdigit():
        for fd in fds:
            os.close(fd)
        raise DeviceSlotError("the judge's answer carried no slot")
    return int(data), fds[0]


class DeviceSlot:
    """One slot of device memory shared by a judge (which made it) and its candidate (which mapped it)."""

    def __init__(self, handle: int, nbytes: int, device: torch.device):
        torch.cuda.init()
        torch.empty(1, device=device)   # the primary context current on this thread before any driver call
        self.handle, self.nbytes, self.device = handle, nbytes, device
        address = ctypes.c_uint64()
        cuda = _cuda()
        _check(cuda.cuMemAddressReserve(ctypes.byref(address), ctypes.c_size_t(nbytes), ctypes.c_size_t(0),
                                        ctypes.c_uint64(0), ctypes.c_uint64(0)), "cuMemAddressReserve")
        self.address = address.value
        _check(cuda.cuMemMap(ctypes.c_uint64(self.address), ctypes.c_size_t(nbytes), ctypes.c_size_t(0),
                             ctypes.c_uint64(handle), ctypes.c_uint64(0)), "cuMemMap")
        access = _Access(_Location(_ON_DEVICE, device.index or 0), _READ_WRITE)
        _check(cuda.cuMemSetAccess(ctypes.c_uint64(self.address), ctypes.c_size_t(nbytes), ctypes.byref(access),
                                   ctypes.c_size_t(1)), "cuMemSetAccess")
        self.memory = torch.as_tensor(_CudaArray(self.address, nbytes), device=device)

    # -- the judge's: make it, hand it over ------------------------------------------------------

    @classmethod
    def create(cls, nbytes: int, device: torch.device, box: Path) -> "DeviceSlot":
        """A slot of at least `nbytes` on `device`, offered to the first process that connects to the
        box's socket (the candidate; one connection, then the socket is gone)."""
        torch.empty(1, device=device)
        size = slot_size(nbytes, device)
        handle = ctypes.c_uint64()
        _check(_cuda().cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(_prop(device)),
                                   ctypes.c_uint64(0)), "cuMemCreate")
        slot = cls(handle.value, size, device)
        # blank before the candidate maps it: memory the driver hands again within one process is not
        # cleared, so a judge kept for evaluation after evaluation could hold an earlier job's data there
        slot.memory.zero_()
        torch.cuda.synchronize(device)
        fd = ctypes.c_int(-1)
        _check(_cuda().cuMemExportToShareableHandle(ctypes.byref(fd), ctypes.c_uint64(handle.value), _POSIX_FD,
                                                    ctypes.c_uint64(0)), "cuMemExportToShareableHandle")
        slot.offered = offer(fd.value, size, Path(box))
        return slot

    # -- the candidate's: map it ------------------------------------------------------------------

    @classmethod
    def connect(cls, box: Path, device: torch.device) -> "DeviceSlot":
        """The judge's slot, mapped here (DeviceSlotError when that cannot be)."""
        torch.empty(1, device=device)
        nbytes, fd = receive(Path(box))
        handle = ctypes.c_uint64()
        try:
            _check(_cuda().cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD),
                   "cuMemImportFromShareableHandle")
        finally:
            os.close(fd)
        return cls(handle.value, nbytes, device)

    # -- use -----------------------------------------------------------------------------------------

    def fits(self, tensors: list[torch.Tensor]) -> bool:
        return all(t.device == self.memory.device for t in tensors) and staged_bytes(tensors) <= self.nbytes

    def put(self, tensors: list[torch.Tensor]) -> None:
        """The candidate's: `tensors`' bytes into the slot, each at an aligned offset, on the current
        stream (device to device)."""
        offset = 0
        for t in tensors:
            data = _flat_bytes(t)
            self.memory[offset:offset + data.numel()].copy_(data)
            offset = _aligned(offset + data.numel())

    def take(self, layout: Any) -> Any:
        """The judge's: the output in the slot as its (parsed) layout describes, copied into memory of
        the judge's own (the slot stays writable by the candidate; the copy does not)."""
        specs = parse_layout(layout)
        sizes = [_nbytes(dtype, shape) for dtype, shape in specs]
        if _staged_bytes(sizes) > self.nbytes:
            raise UnreadableOutput(f"{_staged_bytes(sizes)} bytes do not fit the device slot of {self.nbytes}")
        offset, tensors = 0, []
        for (dtype, shape), size in zip(specs, sizes):
            own = self.memory[offset:offset + size].clone()
            offset = _aligned(offset + size)
            tensors.append(own.view(dtype).view(shape) if size else torch.empty(shape, dtype=dtype,
                                                                                device=self.device))
        return build_output(layout, tensors)

    offered: socket.socket | None = None   # the judge's offer, until the candidate took it

    def close(self) -> None:
        """Unmap (and, the last holder, free) the slot; an offer nobody took is withdrawn."""
        if self.offered is not None:
            try:
                self.offered.shutdown(socket.SHUT_RDWR)   # wakes its accept: the descriptor is closed
            except OSError:
                pass   # taken already: the socket is closed
            self.offered = None
        if self.address:
            torch.cuda.synchronize(self.device)
            self.memory = None
            cuda = _cuda()
            cuda.cuMemUnmap(ctypes.c_uint64(self.address), ctypes.c_size_t(self.nbytes))
            cuda.cuMemAddressFree(ctypes.c_uint64(self.address), ctypes.c_size_t(self.nbytes))
            cuda.cuMemRelease(ctypes.c_uint64(self.handle))
            self.address = 0
