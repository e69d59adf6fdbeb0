"""The symbolizer (measure/symbolize.py) on this test's own process: an address is named from its
library's file once and then from what it kept while the mappings stay as they were, and an address
no mapping held is asked again (a file mapped there since is seen)."""

from __future__ import annotations

import ctypes
import mmap
import os

from cuda_agent.env.measure import symbolize
from cuda_agent.env.measure.symbolize import UNMAPPED, Symbolizer

LIBC = ctypes.CDLL(None)


def _address(function) -> int:
    return ctypes.cast(function, ctypes.c_void_p).value


def test_an_address_is_named_from_the_file_once(monkeypatch):
    qsort, bsearch = _address(LIBC.qsort), _address(LIBC.bsearch)
    symbolizer = Symbolizer(os.getpid())
    first = symbolizer.resolve([qsort, qsort])
    assert first[0] == first[1] and first[0][0].startswith("libc") and first[0][1] == "qsort"
    monkeypatch.setattr(symbolizer, "reload", lambda: None)   # this process's mappings held as they were
    reads = []
    original = symbolize.ElfSymbols.lookup
    monkeypatch.setattr(symbolize.ElfSymbols, "lookup",
                        lambda self, vaddrs, path: reads.append(len(vaddrs)) or original(self, vaddrs, path))
    assert symbolizer.resolve([qsort, bsearch, qsort]) == [first[0], (first[0][0], "bsearch"), first[0]]
    assert reads == [1]   # bsearch alone was read from the file
    assert Symbolizer(os.getpid()).resolve([qsort, bsearch]) == [first[0], (first[0][0], "bsearch")]


def test_an_address_no_mapping_held_is_asked_again(tmp_path):
    size = 2 * mmap.PAGESIZE
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    # a reserved range (PROT_NONE), not executable: no library is mapped there yet
    base = libc.mmap(None, size, 0, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    symbolizer = Symbolizer(os.getpid())
    assert symbolizer.resolve([base + 64]) == [(UNMAPPED, symbolize.UNKNOWN)]
    late = tmp_path / "late.so"
    late.write_bytes(b"\0" * size)
    with open(late, "rb") as fh:
        got = libc.mmap(base, size, mmap.PROT_READ | mmap.PROT_EXEC, mmap.MAP_PRIVATE | 0x10, fh.fileno(), 0)  # MAP_FIXED
    assert got == base
    try:
        assert symbolizer.resolve([base + 64]) == [(symbolize.NOT_ELF + "late.so", symbolize.UNKNOWN)]
    finally:
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.munmap(base, size)
