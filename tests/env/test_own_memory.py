"""The harness refuses outputs located outside the candidate's own memory (measure/outside.own_memory):
pages of a file (the staging file mapped twice shows the judge's inputs) or shared pages."""

import ctypes
import mmap
import os

import numpy
import pytest

from cuda_agent.env.measure import outside
from cuda_agent.env.measure.outside import ForeignMemory, own_memory


def _kernel_answers_queries() -> bool:
    try:
        outside._queried(os.getpid(), 0, 1)
        return True
    except OSError:
        return False


QUERY = _kernel_answers_queries()


@pytest.fixture(params=["query", "text"])
def source(request, monkeypatch):
    """Every test both ways: the kernel asked per mapping (PROCMAP_QUERY) and the maps file's text."""
    if request.param == "query" and not QUERY:
        pytest.skip("this kernel has no PROCMAP_QUERY (Linux 6.11 and later)")
    monkeypatch.setattr(outside, "_query_refused", request.param == "text")
    return request.param


def _located(address: int, count: int) -> dict:
    return {"tensors": [{"address": address, "dtype": "float32", "shape": [count], "strides": [1]}]}


def _address(buffer) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(buffer))


@pytest.mark.usefixtures("source")
def test_heap_and_anonymous_memory_are_the_process_own():
    small = numpy.zeros(16, dtype=numpy.float32)           # malloc: the heap
    large = numpy.zeros(1 << 20, dtype=numpy.float32)       # malloc: an anonymous mapping of its own
    private = mmap.mmap(-1, 1 << 16, flags=mmap.MAP_PRIVATE)
    for address, count in ((small.ctypes.data, 16), (large.ctypes.data, 1 << 20), (_address(private), 1 << 14)):
        own_memory(os.getpid(), _located(address, count))   # no refusal


@pytest.mark.usefixtures("source")
@pytest.mark.parametrize("flags", [mmap.MAP_SHARED, mmap.MAP_PRIVATE], ids=["shared", "private"])
def test_a_mapped_file_is_refused(tmp_path, flags):
    path = tmp_path / "staging"
    path.write_bytes(b"\0" * (1 << 16))
    with open(path, "r+b") as fh:
        mapped = mmap.mmap(fh.fileno(), 1 << 16, flags=flags)
    with pytest.raises(ForeignMemory, match="staging"):
        own_memory(os.getpid(), _located(_address(mapped) + 64, 16))


@pytest.mark.usefixtures("source")
def test_shared_anonymous_memory_is_refused():
    shared = mmap.mmap(-1, 1 << 16, flags=mmap.MAP_SHARED)
    with pytest.raises(ForeignMemory, match="shared"):
        own_memory(os.getpid(), _located(_address(shared), 16))


@pytest.mark.usefixtures("source")
def test_an_output_that_runs_into_a_file_mapping_is_refused(tmp_path):
    """Own memory for its first bytes, a file's for the rest: every byte is checked."""
    path = tmp_path / "tail"
    path.write_bytes(b"\0" * mmap.PAGESIZE)
    anonymous = mmap.mmap(-1, 2 * mmap.PAGESIZE, flags=mmap.MAP_PRIVATE)
    base = _address(anonymous)
    with open(path, "r+b") as fh:   # the second page replaced by the file's
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        got = libc.mmap(base + mmap.PAGESIZE, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_WRITE,
                        mmap.MAP_SHARED | 0x10, fh.fileno(), 0)   # MAP_FIXED
        assert got == base + mmap.PAGESIZE
    own_memory(os.getpid(), _located(base, mmap.PAGESIZE // 4))   # the first page alone: own
    with pytest.raises(ForeignMemory):
        own_memory(os.getpid(), _located(base, mmap.PAGESIZE // 2))


@pytest.mark.skipif(not QUERY, reason="this kernel has no PROCMAP_QUERY (Linux 6.11 and later)")
def test_both_sources_list_the_same_mappings(tmp_path):
    """Every mapping of the process (files private and shared, shared and private anonymous memory, the
    heap, the stack, the vDSO): what the kernel answers per query is what its maps text lists."""
    path = tmp_path / "mapped"
    path.write_bytes(b"\0" * (1 << 16))
    with open(path, "r+b") as fh:
        kept = [mmap.mmap(fh.fileno(), 1 << 16, flags=flags) for flags in (mmap.MAP_SHARED, mmap.MAP_PRIVATE)]
    kept += [mmap.mmap(-1, 1 << 16, flags=flags) for flags in (mmap.MAP_SHARED, mmap.MAP_PRIVATE)]
    everything = (0, 1 << 63)
    queried = outside._queried(os.getpid(), *everything)
    listed = outside._listed(os.getpid(), *everything)
    assert queried == listed
    names = {name for *_, name in queried}
    assert {"[heap]", "[stack]", "/dev/zero (deleted)", str(path)} <= names   # shared anonymous: /dev/zero's
    start, end = queried[len(queried) // 2][:2]   # a range inside one mapping, and one across two
    assert outside._queried(os.getpid(), start + 1, end - 1) == outside._listed(os.getpid(), start + 1, end - 1)
    assert outside._queried(os.getpid(), end - 1, queried[len(queried) // 2 + 1][0] + 1) == \
        outside._listed(os.getpid(), end - 1, queried[len(queried) // 2 + 1][0] + 1)
    del kept
