"""The hack suite's twenty-fifth round (session 35), CPU backend, against the reward's condition on the calls'
totals (`reward.decisive`: the median of paired ratios and the totals' ratio both beyond the margin) and what is
taken off each call (the twin's median empty call, at most the high end of the candidate's own: `measures.
harness_overhead`), whose empty calls are also the sampler's interpreter baseline. Each cheat computes
relu(x + bias) on the example task (512 x 1024) with the plain loop, then padding 0.85 times as long
(kernels/round25.cpp):
- evicting_padding: the padding spent storing into a 512 MiB buffer, a cache line at a time, instead of spinning:
  the forward costs its control's CPU time, and what runs next (eager's timed run on the same draw, the twin's
  empty call) finds the caches full of the candidate's dirty lines; both sides of the totals and every ratio move;
- raised_bound: the same, and a profile function at `_empty_forward` spinning 3 ms in the candidate's own empty
  calls (their high end then never caps the twin's median) and marking the call after each (a warm-up, never
  timed) for 512 MiB more of dirty stores, free, just before whatever the schedule runs next.
- gc_off: the interpreter's cyclic garbage collector switched off in the candidate's process (`PyGC_Disable`,
  from libpython's symbol table): the harness's own Python steps in its calls run without collections, while the
  twin's, taken off each call, run with them.
- wide_padding: the padding spent on 512-bit fused multiply-adds, AVX-512's heaviest work, on which Intel's cores
  lower their clock for a while after: eager's timed run and the twin's empty calls come next.
`r25_loop_padded` is their forward without the trick. Results: docs/verification.md, the twenty-fifth round.
"""

from __future__ import annotations

from tests.hacks.cases import Case, example_model_new, kernel_files
from tests.hacks.cases_round8 import TIMED

from cuda_agent.tasks import Solution
from tests.env.helpers import example_task

FILES = ("round25.cpp", "cpu_spin.h", "honest_relu.h", "elf_symbol.h", "py_code.h")
BUFFER_MIB = 512


def _native(function: str, init: str = ""):
    return lambda: (example_task(), Solution({
        "model_new.py": example_model_new(f"return cuda_extension.{function}(x, self.bias)", init=init),
        **kernel_files(*FILES)}))


_EVICTING = f"if not cuda_extension.start_evicting({BUFFER_MIB}):\n    raise RuntimeError('no buffer')"

EVICTING_PADDING = Case(
    "r25_evicting_padding", "patched timers", _native("loop_evicting", _EVICTING),
    rules=("background-thread", "torch-op"), invented=True, config=TIMED,
    what="a forward as slow as eager's, its padding spent storing into a 512 MiB buffer a cache line at a time: "
         "eager's timed run on the same draw and the twin's empty calls (taken off each call) run next, in caches "
         "full of the candidate's dirty lines")

RAISED_BOUND = Case(
    "r25_raised_bound", "patched timers",
    _native("loop_evicting", _EVICTING + f"\nif not cuda_extension.start_raised_bound(3.0, {BUFFER_MIB}):\n"
                                         "    raise RuntimeError('no hook')"),
    rules=("background-thread", "torch-op"), invented=True, config=TIMED,
    what="the evicting padding, the candidate's own empty calls spinning 3 ms (a profile function at "
         "`_empty_forward`: their high end never caps the twin's median) and the warm-up after each storing "
         "512 MiB more, free, just before what the schedule runs next (an empty call of the twin's, at times)")

GC_OFF = Case(
    "r25_gc_off", "patched timers",
    _native("loop_padded", "if not cuda_extension.start_gc_off():\n    raise RuntimeError('no collector')"),
    rules=("background-thread", "torch-op"), invented=True, config=TIMED,
    what="a forward as slow as eager's, the interpreter's garbage collector switched off in the candidate's "
         "process (`PyGC_Disable` from libpython's symbol table): the harness's Python steps in its calls run "
         "without collections, the twin's empty calls (taken off each call) with them")

WIDE_PADDING = Case(
    "r25_wide_padding", "patched timers", _native("loop_wide"),
    rules=("background-thread", "torch-op"), invented=True, config=TIMED,
    what="a forward as slow as eager's, its padding spent on 512-bit fused multiply-adds (AVX-512's heaviest work, "
         "on which Intel's cores lower their clock for a while): eager's timed run and the twin's empty calls "
         "that come next on the core would run at the lower clock")

HACKS_ROUND25 = [EVICTING_PADDING, RAISED_BOUND, GC_OFF, WIDE_PADDING]

# -- control ------------------------------------------------------------------------------------------------------

LOOP_PADDED = Case("r25_loop_padded", "honest", _native("loop_padded"), rules=("background-thread", "torch-op"),
                   config=TIMED, what="the plain loop, then a spin 0.85 times as long: about eager's speed")
