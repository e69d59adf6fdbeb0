"""Instruction pointers of another process turned into (library, symbol): its mappings from
`/proc/PID/maps` (the kernel's list, read from outside it), each library's function symbols from its
own file (`.symtab` where the file keeps one, else `.dynsym`), names demangled in this process by libstdc++'s
`__cxa_demangle` (the names c++filt prints; `c++filt` itself where libstdc++ is not found).

The file read is the one at the mapping's listed path: through `/proc/PID/root` (the process's own view of
its file system, e.g. inside a sandbox), else as listed, each only while its inode is the mapping's. A
symbol table is read once per file (device, inode, size, modification time) into numpy arrays:
libtorch_cpu's half a million symbols take a fraction of a second.

Code that no library file holds is labelled so: `[anonymous]` (executable memory no file backs: code
written at run time, or a library's code copied there), `[unmapped]` (an address no mapping holds any
more), `memfd:...` (a memory file), `[not ELF] name` (a mapped file this reader cannot read as an ELF
file), `[not loaded] name` (an ELF file's bytes that none of its loadable segments holds: a library's code
always lies in one, so these are not the file's code as a loader would map it), `[writable] name` (a file
the process could have written, wherever its mount namespace shows it: mounts.py; its symbols are not
read, as the process chose them; judged only where that namespace is not this process's own), `[no file]
name` (a mapping whose listed path names no file that is the one mapped: a memory file or shared anonymous
memory, whose names the process chose and may shape like any path, a deleted file, a file replaced since).
Of the kernel's own names (`[heap]`, `[stack]`, `[anon:...]`, ...) only `[vdso]` and `[vsyscall]` are code a
library of the system's holds. A library of numpy's package (a folder `numpy` or `numpy.libs` on its path) is
labelled `[numpy] name`, its symbols read as any library's; so is, as `[package] name`, a library of another Python
package (a file under a `site-packages` or `dist-packages` folder, not torch's) that the process first mapped after
the symbolizer was made: made before any of a solution's code runs, it takes the libraries mapped then (the
worker's own) for the harness's, and any package loaded later (Pillow's image arithmetic, reached from a binding
through the builtins' `__import__`) for the solution's doing. So, as `[loaded late] name`, is a module of the
standard library's (`lib-dynload`) or a library of the system's (SQLite's, through `_sqlite3` or linked by the
solution's own library) first mapped then, the C and C++ runtimes, OpenMP and BLAS aside (`loaded_late`).

The maps text is read with its names as bytes (a mapping's name is whatever the process chose): decoded
with surrogate escapes, so that a path reads back as the file's, and shown with the bytes that are not
UTF-8 replaced.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass
from functools import cache

import numpy

from cuda_agent.env.measure.mounts import writable_files

_SYM = numpy.dtype([("name", "<u4"), ("info", "u1"), ("other", "u1"), ("shndx", "<u2"), ("value", "<u8"),
                    ("size", "<u8")])
_SHDR = numpy.dtype([("name", "<u4"), ("type", "<u4"), ("flags", "<u8"), ("addr", "<u8"), ("offset", "<u8"),
                     ("size", "<u8"), ("link", "<u4"), ("info", "<u4"), ("align", "<u8"), ("entsize", "<u8")])
_PHDR = numpy.dtype([("type", "<u4"), ("flags", "<u4"), ("offset", "<u8"), ("vaddr", "<u8"), ("paddr", "<u8"),
                     ("filesz", "<u8"), ("memsz", "<u8"), ("align", "<u8")])
_SHT_SYMTAB, _SHT_DYNSYM, _STT_FUNC, _PT_LOAD = 2, 11, 2, 1
UNKNOWN = "?"
ANONYMOUS, UNMAPPED, NOT_ELF, NOT_LOADED = "[anonymous]", "[unmapped]", "[not ELF] ", "[not loaded] "
WRITABLE = "[writable] "
NO_FILE = "[no file] "
NUMPY = "[numpy] "   # a library of numpy's package (its ufuncs, its BLAS): never a solution's own code
PACKAGE = "[package] "   # another Python package's library, loaded after the symbolizer was made (`late_package`)
TORCH_PACKAGES = ("torch", "torch.libs", "functorch", "torchgen", "nvidia", "triton")   # judged by their symbols
LATE = "[loaded late] "   # a library of the system's or the standard library's, first mapped after the symbolizer
# the folders of the system's libraries (and of the interpreter's own): a library loaded from one of them after the
# symbolizer was made was loaded by the solution's code (a solution's own libraries lie in the harness's cache)
SYSTEM_FOLDERS = ("/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/", "/usr/local/lib/", os.path.join(sys.base_prefix, "lib/"))
# what a solution's own library may load of the system's all the same: the C and C++ runtimes, OpenMP, BLAS
RUNTIME_LIBRARY = re.compile(r"(ld-linux[\w-]*|libc|libm|libmvec|libpthread|libdl|librt|libutil|libgcc_s|libstdc\+\+"
                             r"|libgomp|libatomic|libquadmath|libomp|libiomp5|libgfortran|libtbb\w*|libopenblas\w*"
                             r"|libblas|libcblas|liblapack|libblis\w*|libmkl_\w+)[.-]")
# a library of the system's mapped before the symbolizer was made, other than those runtimes and the interpreter's
# own: the harness's steps may use it (hashlib's libcrypto, zlib), so it is judged as the interpreter is, by amount
PRELOADED = "[preloaded] "
KERNEL_CODE = ("[vdso]", "[vsyscall]")   # the kernel's own code in every process (clock_gettime's fast path)


@dataclass(frozen=True)
class Mapping:
    start: int
    end: int
    offset: int
    path: str      # as /proc/PID/maps lists it ("" for anonymous memory, "[vdso]" and the like)
    inode: int = 0


def mappings(maps_text: str) -> list[Mapping]:
    """The executable mappings of a /proc/PID/maps text, by start address."""
    found = []
    for line in maps_text.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5 or "x" not in fields[1]:
            continue
        start, end = (int(v, 16) for v in fields[0].split("-"))
        found.append(Mapping(start, end, int(fields[2], 16), fields[5].strip() if len(fields) == 6 else "",
                             int(fields[4])))
    return sorted(found, key=lambda m: m.start)


class ElfSymbols:
    """One ELF file's function symbols, sorted by address, and its loadable segments. Read with `pread`
    (a memory map of the file would show in this process's own mappings); names are read when asked."""

    def __init__(self, path: str):
        self.path = path
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size

            def read(nbytes: int, offset: int) -> bytes:   # within the file only (its header may say anything)
                if nbytes < 0 or offset < 0 or offset + nbytes > size:
                    raise ValueError(f"{path}: {nbytes} bytes at {offset} lie outside the file")
                return os.pread(fd, nbytes, offset)

            head = read(64, 0)
            if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                raise ValueError(f"{path} is not a 64-bit little-endian ELF file")
            phoff, shoff = struct.unpack_from("<QQ", head, 0x20)
            phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", head, 0x36)
            phdrs = numpy.frombuffer(read(phnum * phentsize, phoff), dtype=_PHDR)
            self.loads = phdrs[phdrs["type"] == _PT_LOAD]
            sections = (numpy.frombuffer(read(shnum * shentsize, shoff), dtype=_SHDR) if shoff
                        else numpy.empty(0, _SHDR))
            table = next((s for kind in (_SHT_SYMTAB, _SHT_DYNSYM) for s in sections if s["type"] == kind), None)
            if table is None:
                entries = numpy.empty(0, _SYM)
                self.strings = 0
            else:
                entries = numpy.frombuffer(read(int(table["size"]), int(table["offset"])), dtype=_SYM)
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

    def lookup(self, vaddrs: numpy.ndarray, path: str) -> list[str | None]:
        """The (mangled) name of the function holding each address, read from `path` (this file, wherever
        it is seen from now); None outside every function."""
        at = numpy.searchsorted(self.values, vaddrs, side="right") - 1
        names: list[str | None] = []
        with open(path, "rb") as fh:
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


_TABLES: dict[tuple, ElfSymbols | None] = {}
_TABLES_LOCK = threading.Lock()


def symbols_of(path: str) -> ElfSymbols | None:
    """A file's symbols, read once per file (by device, inode, size and modification time: every
    path by which a candidate's sandbox shows the same library, through its process's root, shares them)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    with _TABLES_LOCK:   # evaluations may run in threads of one harness process (a pool)
        if identity not in _TABLES:
            if len(_TABLES) >= 64:
                _TABLES.pop(next(iter(_TABLES)))
            try:
                _TABLES[identity] = ElfSymbols(path)
            except (OSError, ValueError, IndexError):   # not an ELF file this reader can read
                _TABLES[identity] = None
        return _TABLES[identity]


def demangle(names: list[str]) -> dict[str, str]:
    """Each name demangled (once per name; names that are not C++ symbols stay as they are)."""
    for name in names:
        if name not in _DEMANGLED:
            _DEMANGLED[name] = _demangle_one(name) if name.startswith("_Z") else name
    return {n: _DEMANGLED[n] for n in names}


@cache
def _cxa_demangle():
    """libstdc++'s `__cxa_demangle` (what c++filt uses), in this process; None where it is not found."""
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
        libc = ctypes.CDLL(None)
    except OSError:
        return None
    function = lib.__cxa_demangle
    function.restype = ctypes.c_void_p
    function.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    libc.free.argtypes = [ctypes.c_void_p]
    return function, libc.free


def _demangle_one(name: str) -> str:
    found = _cxa_demangle()
    if found is None:
        return _cxxfilt(name)
    function, free = found
    status = ctypes.c_int(0)
    # a clone's suffix (".cold", ".isra.0") is kept by c++filt, not by __cxa_demangle
    base, dot, suffix = name.partition(".")
    pointer = function(base.encode(), None, None, ctypes.byref(status))
    if not pointer or status.value != 0:
        return name
    try:
        text = ctypes.string_at(pointer).decode(errors="replace")
    finally:
        free(pointer)
    return f"{text} [clone .{suffix}]" if dot else text


def _cxxfilt(name: str) -> str:
    if not shutil.which("c++filt"):
        return name
    try:
        out = subprocess.run(["c++filt", name], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return name
    return out or name


_DEMANGLED: dict[str, str] = {}


def _numpys(path: str) -> bool:
    """Whether a mapped file lies in numpy's package (numpy/ and the libraries its wheel brings, numpy.libs/)."""
    return any(part in ("numpy", "numpy.libs") for part in path.split("/")[:-1])


def package_of(path: str) -> str | None:
    """The Python package a mapped file lies in (the folder, or the module file, right under a `site-packages` or
    `dist-packages` folder), or None."""
    parts = path.split("/")
    for at in range(len(parts) - 2, -1, -1):
        if parts[at] in ("site-packages", "dist-packages"):
            return parts[at + 1]
    return None


def printable(name: str) -> str:
    """A name read with surrogate escapes, its bytes that are not UTF-8 replaced (for results and messages)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


class Symbolizer:
    """Addresses of process `pid` to (library file name, demangled symbol); the mappings are read at
    every `resolve` (parsed again only when their text changed: a library loaded, code moved or
    written since). An address's answer is kept while that text stays the same. `judge_files`: whether
    files the process could have written are labelled WRITABLE."""

    MAX_KNOWN = 1 << 16   # addresses answered and kept (forgotten all at once beyond it)

    def __init__(self, pid: int, judge_files: bool = True):
        self.pid = pid
        self.maps: list[Mapping] = []
        self._starts = numpy.empty(0, "<u8")
        self._ends = numpy.empty(0, "<u8")
        self.known: dict[int, tuple[str, str]] = {}
        self._text = None
        # read once: a sandboxed candidate cannot mount (its seccomp filter refuses mount, umount, unshare, setns)
        self.writable = writable_files(pid) if judge_files else None
        self.reload()
        self.first_mapped = frozenset(m.path for m in self.maps)   # the libraries loaded before (late_package)

    def late_package(self, path: str) -> bool:
        """Whether `path` is a library of a Python package other than torch's that was not mapped when this
        symbolizer was made."""
        package = package_of(path)
        return package is not None and package not in TORCH_PACKAGES and path not in self.first_mapped

    def loaded_late(self, path: str) -> bool:
        """Whether `path`, not mapped when this symbolizer was made and of no Python package, is a module of the
        standard library's (`lib-dynload`) or a library of the system's (SYSTEM_FOLDERS) other than the C and
        C++ runtimes, OpenMP and BLAS (RUNTIME_LIBRARY)."""
        if path in self.first_mapped or package_of(path) is not None:
            return False
        if "lib-dynload" in path.split("/")[:-1]:
            return True
        return path.startswith(SYSTEM_FOLDERS) and not RUNTIME_LIBRARY.match(os.path.basename(path))

    def preloaded(self, path: str) -> bool:
        """Whether `path`, mapped when this symbolizer was made and of no Python package, is a library of the
        system's (SYSTEM_FOLDERS) other than the C and C++ runtimes, OpenMP, BLAS and the interpreter's own."""
        name = os.path.basename(path)
        return (path in self.first_mapped and package_of(path) is None and path.startswith(SYSTEM_FOLDERS)
                and "lib-dynload" not in path.split("/")[:-1] and not name.startswith("libpython")
                and not RUNTIME_LIBRARY.match(name))

    def reload(self) -> None:
        try:   # names as the bytes they are (surrogate escapes): a path reads back as the file's
            with open(f"/proc/{self.pid}/maps", encoding="utf-8", errors="surrogateescape") as fh:
                text = fh.read()
        except OSError:
            text = ""
        if text == self._text:
            return
        self._text = text
        self.maps = mappings(text)
        self._starts = numpy.array([m.start for m in self.maps], dtype="<u8")
        self._ends = numpy.array([m.end for m in self.maps], dtype="<u8")
        self.known = {}

    def _indices(self, addresses: list[int]) -> numpy.ndarray:
        """Each address's mapping (its index in `maps`), -1 outside them all."""
        at = numpy.array(addresses, dtype="<u8")
        index = numpy.searchsorted(self._starts, at, side="right").astype(numpy.int64) - 1
        inside = (index >= 0) & (at < self._ends[numpy.maximum(index, 0)]) if len(self.maps) else index >= 0
        return numpy.where(inside, index, -1)

    def _file(self, where: Mapping) -> str | None:
        """The file at the mapping's listed path, as the process sees it, else as listed; None unless it is
        the file mapped there (its inode). The mapped file itself (`map_files`) is not asked for: a memory
        file's or shared memory's listed name is the process's choice (`/memfd:x/../lib/libc.so.6`), and a
        file no path names is no library's."""
        for path in (f"/proc/{self.pid}/root{where.path}", where.path):
            try:
                if os.stat(path).st_ino == where.inode:
                    return path
            except OSError:
                continue
        return None

    def resolve(self, addresses: list[int]) -> list[tuple[str, str]]:
        """(library, symbol) of each address: the library's file name (ANONYMOUS for memory no file backs,
        UNMAPPED, WRITABLE before a file's name where the process could have written it, NOT_ELF where it
        cannot be read as an ELF file, NOT_LOADED where none of the file's loadable segments holds the
        address), the symbol demangled ("?" where the file has no function there). Read after the samples
        were taken, while the process is stopped: the mappings as they are now."""
        self.reload()   # forgets the answers where the mappings changed
        unique = sorted(set(addresses))
        missing = [a for a in unique if a not in self.known]
        found = dict(zip(missing, self._resolve(missing))) if missing else {}
        if len(self.known) + len(found) > self.MAX_KNOWN:
            self.known = {}
        # an unmapped address is asked again: a library may be loaded there later
        self.known.update((a, place) for a, place in found.items() if place[0] != UNMAPPED)
        return [self.known.get(a) or found[a] for a in addresses]

    def _resolve(self, addresses: list[int]) -> list[tuple[str, str]]:
        by_mapping: dict[Mapping | None, list[int]] = {}
        for index, at in enumerate(self._indices(addresses).tolist()):
            by_mapping.setdefault(self.maps[at] if at >= 0 else None, []).append(index)
        resolved: list[tuple[str, str]] = [(UNMAPPED, UNKNOWN)] * len(addresses)
        mangled: dict[int, str] = {}
        for where, indices in by_mapping.items():
            if where is None:
                continue
            library = printable(os.path.basename(where.path) if where.path.startswith("/")
                                else (where.path or ANONYMOUS))
            if where.path.startswith("/") and self.writable is not None and self.writable.holds(where.path):
                for i in indices:
                    resolved[i] = (WRITABLE + library, UNKNOWN)
                continue
            path = self._file(where) if where.path.startswith("/") else None
            if where.path.startswith("/") and path is None:
                for i in indices:
                    resolved[i] = (NO_FILE + library, UNKNOWN)
                continue
            table = symbols_of(path) if path else None
            if path and table is None:   # its header unreadable, whatever its first bytes say
                library = NOT_ELF + library
            elif _numpys(where.path):
                library = NUMPY + library
            elif self.late_package(where.path):
                library = PACKAGE + library
            elif self.loaded_late(where.path):
                library = LATE + library
            elif self.preloaded(where.path):
                library = PRELOADED + library
            names: list[str | None] = [None] * len(indices)
            labels = [library] * len(indices)
            if table is not None:
                offsets = [addresses[i] - where.start + where.offset for i in indices]
                vaddrs = [table.vaddr(o) for o in offsets]
                known = [k for k, v in enumerate(vaddrs) if v is not None]
                labels = [library if v is not None else NOT_LOADED + library for v in vaddrs]
                try:
                    found = table.lookup(numpy.array([vaddrs[k] for k in known], dtype="<u8"), path)
                except OSError:   # gone meanwhile: its functions unnamed
                    found = [None] * len(known)
                for k, name in zip(known, found):
                    names[k] = name
            for i, name, label in zip(indices, names, labels):
                resolved[i] = (label, UNKNOWN)
                if name:
                    mangled[i] = name
        plain = demangle(list(mangled.values()))
        for i, name in mangled.items():
            resolved[i] = (resolved[i][0], plain[name])
        return resolved
