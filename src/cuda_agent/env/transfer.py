"""A verification output handed from the candidate to the judge: its tensors' raw bytes in a file of
the candidate's box, and a layout (JSON: the tree of lists, dicts and numbers, each tensor's dtype
and shape) that travels with the candidate's answer.

torch.save / torch.load spent about 0.3 s on a 128 MB output (pickling, a zip archive, two copies
on the way in, pageable copies to and from the GPU), nine times per strict verification. Raw bytes
go through pinned host buffers instead. Neither half is trusted by the judge: the layout is parsed
strictly (known dtypes, whole shapes, a bounded tree, sizes that add up to the file's exactly) and
the file is opened without following links and read into memory of the judge's own (a mapping of a
file in the candidate's folder could be truncated under the reader, and crash it).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import torch

MAX_NODES = 100_000     # containers, numbers and tensors in one output's layout
MAX_DEPTH = 64


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


def output_to_host(value: Any) -> tuple[dict, list[torch.Tensor]]:
    """(layout, every tensor's bytes in host memory): the device's part of `write_output`, which the
    candidate does while it holds the device; the file is written after it let go (`write_host`)."""
    tensors: list[torch.Tensor] = []

    def layout(v: Any) -> dict:
        if isinstance(v, torch.Tensor):
            tensors.append(v)
            return {"tensor": str(v.dtype).removeprefix("torch."), "shape": list(v.shape)}
        if isinstance(v, (list, tuple)):
            return {"list": [layout(x) for x in v]}
        if isinstance(v, dict):
            return {"dict": [[k if isinstance(k, (str, int)) else str(k), layout(x)] for k, x in v.items()]}
        if v is None or isinstance(v, (bool, int, float)):
            return {"value": v}
        return {"other": type(v).__name__}

    tree = layout(value)
    host = []
    for t in tensors:
        data = _flat_bytes(t)
        if data.is_cuda:   # through pinned memory: a pageable copy runs at a fraction of the speed
            pinned = torch.empty(data.numel(), dtype=torch.uint8, pin_memory=True)
            pinned.copy_(data)
            data = pinned
        host.append(data)
    return tree, host


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


def read_output(path: str | Path, layout: Any, device: torch.device, pin: bool = False) -> Any:
    """The output `write_output` wrote, rebuilt on `device`; UnreadableOutput when the layout or the
    file is not one it can have written. `pin`: on the CPU, in pinned memory (to go to a GPU next)."""
    specs: list[tuple[torch.dtype, list[int]]] = []
    nodes = [0]

    def check(node: Any, depth: int) -> None:   # the whole layout first: nothing read before it adds up
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
    expected = sum(_nbytes(dtype, shape) for dtype, shape in specs)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableOutput("not a regular file")
        if info.st_size != expected:
            raise UnreadableOutput(f"{info.st_size} bytes, but its layout needs {expected}")
        tensors = iter([_read_tensor(fh, dtype, shape, device, pin) for dtype, shape in specs])

    def build(node: dict) -> Any:
        if "tensor" in node:
            return next(tensors)
        if "list" in node:
            return [build(item) for item in node["list"]]
        if "dict" in node:
            return {key: build(item) for key, item in node["dict"]}
        if "value" in node:
            return node["value"]
        return _Unsupported(node["other"])

    return build(layout)


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
