"""Instruction pointers of another process turned into (library, symbol): its mappings from
`/proc/PID/maps` (the kernel's list, read from outside it), each library's function symbols from its
own file (`.symtab` where the file keeps one, else `.dynsym`), names demangled with `c++filt`.

The file is opened through `/proc/PID/root` (the process's own view of its file system, e.g. inside a
sandbox), else at the path as listed; a symbol table is read once per file (path, device, inode, size,
modification time) into numpy arrays: libtorch_cpu's half a million symbols take a fraction of a second.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from dataclasses import dataclass
from functools import lru_cache

import numpy

_SYM = numpy.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"),
                    ("size", "<u8")])
_SHDR = numpy.dtype([("name", "<u4"), ("type", "<u4"), ("flags", "<u8"), ("addr", "<u8"), ("offset", "<u8"),
                     ("size", "<u8"), ("link", "<u4"), ("info", "<u4"), ("align", "<u8"), ("entsize", "<u8")])
_PHDR = numpy.dtype([("type", "<u4"), ("flags", "<u4"), ("offset", "<u8"), ("vaddr", "<u8"), ("paddr", "<u8"),
                     ("filesz", "<u8"), ("memsz", "<u8"), ("align", "<u8")])
_SHT_SYMTAB, _SHT_DYNSYM, _STT_FUNC, _PT_LOAD = 2, 11, 2, 1
UNKNOWN = "?"


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    offset: int
    path: str      # as /proc/PID/maps lists it ("" for anonymous memory, "[vdso]" and the like)


def mappings(maps_text: str) -> list[Mapping]:
    """The executable mappings of a /proc/PID/maps text, by start address."""
    found = []
    for line in maps_text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5 or "x" not in fields[1]:
            continue
        start, end = (int(v, 16) for v in fields[0].split("-"))
        found.append(Mapping(start, end, int(fields[2], 16), fields[5].strip() if len(fields) == 6 else ""))
    return sorted(found, key=lambda m: m.start)


class ElfSymbols:
    """One ELF file's function symbols, sorted by address, and its loadable segments. Read with `pread`
    (a memory map of the file would show in this process's own mappings); names are read when asked."""

    def __init__(self, path: str):
        self.path = path
        fd = os.open(path, os.O_RDONLY)
        try:
            head = os.pread(fd, 64, 0)
            if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                raise ValueError(f"{path} is not a 64-bit little-endian ELF file")
            phoff, shoff = struct.unpack_from("<QQ", head, 0x20)
            phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", head, 0x36)
            phdrs = numpy.frombuffer(os.pread(fd, phnum * phentsize, phoff), dtype=_PHDR)
            self.loads = phdrs[phdrs["type"] == _PT_LOAD]
            sections = (numpy.frombuffer(os.pread(fd, shnum * shentsize, shoff), dtype=_SHDR) if shoff
                        else numpy.empty(0, _SHDR))
            table = next((s for kind in (_SHT_SYMTAB, _SHT_DYNSYM) for s in sections if s["type"] == kind), None)
            if table is None:
                entries = numpy.empty(0, _SYM)
                self.strings = 0
            else:
                entries = numpy.frombuffer(os.pread(fd, int(table["size"]), int(table["offset"])), dtype=_SYM)
                self.strings = int(sections[int(table["link"])]["offset"])
        finally:
            os.close(fd)
        funcs = entries[((entries["info"] & 0xF) == _STT_FUNC) & (entries["shndx"] != 0) & (entries["value"] != 0)]
        order = numpy.argsort(funcs["value"], kind="stable")
        self.values = funcs["value"][order]
        self.ends = self.values + numpy.maximum(funcs["size"][order], 1)
        self.names = funcs["name"][order]

    def vaddr(self, file_offset: int) -> int | None:
        """The link-time address of a file offset that a loadable segment maps."""
        for seg in self.loads:
            if int(seg["offset"]) <= file_offset < int(seg["offset"]) + int(seg["filesz"]):
                return file_offset - int(seg["offset"]) + int(seg["vaddr"])
        return None

    def lookup(self, vaddrs: numpy.ndarray) -> list[str | None]:
        """The (mangled) name of the function holding each address; None outside every function."""
        at = numpy.searchsorted(self.values, vaddrs, side="right") - 1
        names: list[str | None] = []
        with open(self.path, "rb") as fh:
            for address, index in zip(vaddrs.tolist(), at.tolist()):
                if index < 0 or address >= int(self.ends[index]):
                    names.append(None)
                    continue
                names.append(_string(fh.fileno(), self.strings + int(self.names[index])))
        return names


def _string(fd: int, offset: int) -> str:
    """The NUL-terminated string at `offset` (a mangled name may run to kilobytes)."""
    chunks = []
    while True:
        chunk = os.pread(fd, 1024, offset)
        end = chunk.find(b"\0")
        if end >= 0 or not chunk:
            chunks.append(chunk[:end] if end >= 0 else chunk)
            return b"".join(chunks).decode(errors="replace")
        chunks.append(chunk)
        offset += len(chunk)


@lru_cache(maxsize=64)
def _symbols(path: str, identity: tuple) -> ElfSymbols | None:
    try:
        return ElfSymbols(path)
    except (OSError, ValueError, IndexError):
        return None


def symbols_of(path: str) -> ElfSymbols | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return _symbols(path, (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns))


def demangle(names: list[str]) -> dict[str, str]:
    """Each name demangled (c++filt, once per name; names it does not know stay as they are)."""
    todo = [n for n in set(names) if n not in _DEMANGLED]
    if todo and shutil.which("c++filt"):
        try:
            out = subprocess.run(["c++filt"], input="\n".join(todo) + "\n", capture_output=True, text=True,
                                 timeout=30).stdout.splitlines()
        except (OSError, subprocess.SubprocessError):
            out = []
        if len(out) == len(todo):
            _DEMANGLED.update(zip(todo, out))
    return {n: _DEMANGLED.get(n, n) for n in names}


_DEMANGLED: dict[str, str] = {}


class Symbolizer:
    """Addresses of process `pid` to (library file name, demangled symbol); the mappings are read
    again when an address falls outside those known (a library loaded since)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.maps: list[Mapping] = []
        self._starts = numpy.empty(0, "<u8")
        self.reload()

    def reload(self) -> None:
        try:
            with open(f"/proc/{self.pid}/maps") as fh:
                self.maps = mappings(fh.read())
        except OSError:
            self.maps = []
        self._starts = numpy.array([m.start for m in self.maps], dtype="<u8")

    def _mapping(self, address: int) -> Mapping | None:
        index = int(numpy.searchsorted(self._starts, address, side="right")) - 1
        if index >= 0 and address < self.maps[index].end:
            return self.maps[index]
        return None

    def _file(self, path: str) -> str:
        inside = f"/proc/{self.pid}/root{path}"
        return inside if os.path.exists(inside) else path

    def resolve(self, addresses: list[int]) -> list[tuple[str, str]]:
        """(library, symbol) of each address: the library's file name ("[anonymous]" for memory no file
        backs), the symbol demangled ("?" where the file has no function there)."""
        unique = sorted(set(addresses))
        found = dict(zip(unique, self._resolve(unique)))
        return [found[a] for a in addresses]

    def _resolve(self, addresses: list[int]) -> list[tuple[str, str]]:
        if any(self._mapping(a) is None for a in addresses):
            self.reload()
        by_mapping: dict[Mapping | None, list[int]] = {}
        for index, address in enumerate(addresses):
            by_mapping.setdefault(self._mapping(address), []).append(index)
        resolved: list[tuple[str, str]] = [("[unmapped]", UNKNOWN)] * len(addresses)
        mangled: dict[int, str] = {}
        for where, indices in by_mapping.items():
            if where is None:
                continue
            library = os.path.basename(where.path) if where.path.startswith("/") else (where.path or "[anonymous]")
            table = symbols_of(self._file(where.path)) if where.path.startswith("/") else None
            names: list[str | None] = [None] * len(indices)
            if table is not None:
                offsets = [addresses[i] - where.start + where.offset for i in indices]
                vaddrs = [table.vaddr(o) for o in offsets]
                known = [k for k, v in enumerate(vaddrs) if v is not None]
                found = table.lookup(numpy.array([vaddrs[k] for k in known], dtype="<u8"))
                for k, name in zip(known, found):
                    names[k] = name
            for i, name in zip(indices, names):
                resolved[i] = (library, UNKNOWN)
                if name:
                    mangled[i] = name
        plain = demangle(list(mangled.values()))
        for i, name in mangled.items():
            resolved[i] = (resolved[i][0], plain[name])
        return resolved
