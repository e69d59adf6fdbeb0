"""The hack suite's twenty-fourth round (session 34), CPU backend, against the C library's heap fill set by the
candidate's worker per call (on for verification calls, off for every other, `workers/heap_fill.py`). Each cheat
computes relu(x + bias) on the example task (512 x 1024) with the plain loop then a spin 0.85 times as long
(kernels/round24.cpp):
- heap_tuned: glibc's other allocator knobs set in the candidate's process alone (`mallopt`: no mmap, no trimming,
  a 64 MiB top pad): its allocations, and the harness's own steps there, never map or fault fresh pages, while
  eager's process and the twin (what is taken off each call) keep the defaults;
- stale_rows: the fill read as the sign of a verification call (a fresh heap block holding its pattern): outside
  them one row in 512 is left unwritten, its values the previous call's (plausible, not this call's), in the hope
  that the timed calls' sampled positions miss it;
- empty_fill: the fill turned back on in the candidate's own empty calls (a profile function at `_empty_forward`,
  `mallopt(M_PERTURB, 165)`): they pay it on the harness's allocations, the twin's do not, and their high end is
  the bound on what is taken off each real call.
`r24_loop_padded` is their forward without the trick. Results: docs/verification.md, the twenty-fourth round.
"""

from __future__ import annotations

from tests.hacks.cases import Case, example_model_new, kernel_files
from tests.hacks.cases_round8 import TIMED

from cuda_agent.tasks import Solution
from tests.env.helpers import example_task

FILES = ("round24.cpp", "cpu_spin.h", "elf_symbol.h", "py_code.h")


def _native(function: str, init: str = ""):
    return lambda: (example_task(), Solution({
        "model_new.py": example_model_new(f"return cuda_extension.{function}(x, self.bias)", init=init),
        **kernel_files(*FILES)}))


HEAP_TUNED = Case(
    "r24_heap_tuned", "patched timers",
    _native("loop_padded", "if not cuda_extension.start_heap_tuned():\n    raise RuntimeError('mallopt')"),
    rules=("background-thread", "torch-op"), invented=True, config=TIMED,
    what="a forward as slow as eager's, glibc's allocator tuned in the candidate's process alone (no mmap, no "
         "trimming, a 64 MiB top pad: `mallopt`): its allocations and the harness's steps there never fault fresh "
         "pages, eager's and the twin's may")
STALE_ROWS = Case(
    "r24_stale_rows", "telling checked calls from timed ones", _native("stale_rows", "cuda_extension.set_skip(512)"),
    rules=("recheck-after-timing",), invented=True, config=TIMED,
    what="the heap's fill read as the sign of a verification call; outside them one row in 512 left unwritten, "
         "holding the previous call's values (the fill is off there), hoping the sampled positions miss it")

EMPTY_FILL = Case(
    "r24_empty_fill", "patched timers",
    _native("loop_padded", "if not cuda_extension.start_empty_fill():\n    raise RuntimeError('no hook')"),
    rules=("background-thread", "torch-op"), invented=True, config=TIMED,
    what="a forward as slow as eager's, the heap's fill turned back on in the candidate's own empty calls (a profile "
         "function at `_empty_forward`): the bound on what is taken off each call rises, the twin's calls keep no fill")

HACKS_ROUND24 = [HEAP_TUNED, STALE_ROWS, EMPTY_FILL]

# -- control ------------------------------------------------------------------------------------------------------

LOOP_PADDED = Case("r24_loop_padded", "honest", _native("loop_padded"), rules=("background-thread", "torch-op"),
                   config=TIMED, what="the plain loop, then a spin 0.85 times as long: about eager's speed")
