"""The candidate's heap fill, set per call: a block freed with values in it comes back filled while
the fill is on, with those values while it is off."""

import subprocess
import sys

SCRIPT = """
import ctypes, sys
from cuda_agent.env.workers.heap_fill import FILL_BYTE, set_heap_fill

libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, (ctypes.c_size_t,)
libc.free.argtypes = (ctypes.c_void_p,)
size = 64 << 10                      # a heap block (below the mmap threshold), past the per-thread cache
set_heap_fill(sys.argv[1] == "on")
block = libc.malloc(size)
ctypes.memset(block, 7, size)
libc.free(block)
again = libc.malloc(size)            # the same block, handed back
body = ctypes.string_at(again + 64, size - 128)   # its middle: the allocator's own words left out
print(again == block, sorted(set(body)))
"""


def _reuse(fill: str) -> str:
    return subprocess.run([sys.executable, "-c", SCRIPT, fill], capture_output=True, text=True, timeout=60,
                          check=True).stdout.split(maxsplit=1)


def test_with_the_fill_on_a_reused_block_holds_the_fill_not_its_old_values():
    from cuda_agent.env.workers.heap_fill import FILL_BYTE

    same, values = _reuse("on")
    assert same == "True"
    assert values.strip() == str([FILL_BYTE ^ 0xFF])   # glibc fills a new block with the byte's complement


def test_with_the_fill_off_a_reused_block_keeps_its_old_values():
    same, values = _reuse("off")
    assert same == "True" and values.strip() == "[7]"
