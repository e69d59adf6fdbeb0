"""The hack suite's twenty-second round (session 32), CPU backend, against the reward's statistic and the baseline's
caches rather than the overhead's measure. Each cheat computes relu(x + bias) correctly on the example task
(512 x 1024) with a forward no faster than eager's, and tries to earn a speed reward all the same
(kernels/round22.cpp):
- median_blind: the plain loop (faster than eager), and on about three calls in ten a spin eight times the loop's
  CPU time after it (eight times, in the case). The reward reads the median of per-call ratios, which the fast calls hold; the calls' mean is
  slower than eager's (about 3.4 loops a call against eager's 1.5-2);
- evict_before_eager: the plain loop and a spin 1.15 times as long (about eager's speed), its output made over a
  buffer of its own with a deleter (torch::from_blob) that runs when the harness lets the output go after reading
  it: on the harness's thread, outside the call's clock and every limit, it reads through 384 MiB of its own memory
  (more than this machine's 300 MiB last-level cache), so that the judge's copy of the draw, written moments before
  the candidate's call, is in no cache when eager runs on it, next; then it touches its own output buffer again.
- evict_others: the same, the deleter then reading the candidate's own private memory again (the heap and anonymous
  mappings, up to 256 MiB), so that only other processes' data are left cold: the judge's, and those of a process
  that measures the harness's overhead apart from the candidate;
- evict_by_hook: the same eviction with no deleter, from a profile function on the harness's thread (round
  twenty-one's way to PyEval_SetProfile) where the worker calls `_inspect`, after the call's answer;
- lean_real_calls: the same padded forward; `__init__` replaces, through the builtins' `exec`, two of the worker's
  own steps in a call with cheaper ones for real calls alone (the command read without validation, the staged
  inputs' views made once per slot): what is taken off each real call as the harness's overhead is then more than
  its own steps cost.
Results: docs/verification.md, the twenty-second round.
"""

from __future__ import annotations

from tests.hacks.cases import Case, example_model_new, kernel_files
from tests.hacks.cases_round8 import TIMED

from cuda_agent.tasks import Solution
from tests.env.helpers import example_task

FILES = ("round22.cpp", "honest_relu.h")
EVICT_MB = 384   # above the test machine's last-level cache (300 MiB)


def _native(function: str, init: str = ""):
    return lambda: (example_task(), Solution({
        "model_new.py": example_model_new(f"return cuda_extension.{function}(x, self.bias)", init=init),
        **kernel_files(*FILES)}))


MEDIAN_BLIND = Case(
    "r22_median_blind", "telling checked calls from timed ones", _native("bimodal", "cuda_extension.set_bimodal(0.3, 8.0)"),
    rules=("background-thread", "torch-op"), invented=True, config=TIMED,
    what="the plain loop, and on three calls in ten a spin eight times as long after it: the median call is faster "
         "than eager's, the mean call slower")
EVICT_BEFORE_EAGER = Case(
    "r22_evict_before_eager", "patched timers", _native("evicting", f"cuda_extension.start_evicting({EVICT_MB})"),
    rules=("background-thread", "torch-op"), invented=True, config=TIMED,
    what="a forward as slow as eager's, its output's deleter (run after the answer, on the harness's thread) reading "
         f"{EVICT_MB} MiB so that eager's run on the same draw, next, finds its inputs in no cache")

EVICT_OTHERS = Case(
    "r22_evict_others", "patched timers",
    _native("evicting", f"cuda_extension.start_evicting({EVICT_MB}, rewarm_own=True)"),
    rules=("background-thread", "torch-op"), invented=True, config=TIMED,
    what=f"evict_before_eager, the deleter then reading its own private memory again (up to 256 MiB): only other "
         "processes' data (the judge's, the overhead's measure if it runs apart) left cold")
EVICT_BY_HOOK = Case(
    "r22_evict_by_hook", "patched timers", _native("hooked", f"cuda_extension.start_evict_hook({EVICT_MB})"),
    rules=("background-thread", "torch-op"), invented=True, config=TIMED,
    what=f"a forward as slow as eager's; a profile function on the harness's thread reads {EVICT_MB} MiB where the "
         "worker calls `_inspect` (after the call's answer), so that eager's run, next, finds its inputs in no cache")

LEAN_REAL_CALLS = Case(
    "r22_lean_real_calls", "patched timers", _native("padded", "cuda_extension.start_lean()"),
    rules=("background-thread", "torch-op"), invented=True, config=TIMED,
    what="a forward as slow as eager's; the worker's own steps in a real call (reading the command, viewing the "
         "staged inputs) replaced in its process by cheaper ones, the empty calls' left as they are")

HACKS_ROUND22 = [MEDIAN_BLIND, EVICT_BEFORE_EAGER, EVICT_OTHERS, EVICT_BY_HOOK, LEAN_REAL_CALLS]

# -- controls -----------------------------------------------------------------------------------------------------

HONEST_ROUND22 = [
    Case("r22_honest", "honest", _native("honest"), rules=("background-thread", "torch-op"), config=TIMED,
         what="the plain loop on the example task: about 1.5x eager's speed, a speed reward"),
]

PADDED = Case("r22_padded", "honest", _native("padded"), rules=("background-thread", "torch-op"), config=TIMED,
              what="the plain loop, then a spin 1.15 times as long: about eager's speed")
# the median cheat's forward with every call padded as its slow ones are: its mean's speed, far below eager's
ALL_SLOW = Case("r22_all_slow", "honest", _native("bimodal", "cuda_extension.set_bimodal(1.0, 8.0)"),
                rules=("background-thread", "torch-op"), config=TIMED,
                what="the plain loop and a spin eight times as long on every call")
