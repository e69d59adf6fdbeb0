"""The hack suite's nineteenth round (session 30), CPU backend, against the interpreter rule (op_samples.py
`_judge_interpreter`: the interpreter's sampled time in a timed call beyond the harness's empty calls', up to the
call's first answer, refused past a bound of the forward's CPU time and its data). Each cheat computes relu(x + bias)
correctly by libpython's builtins over `array('f')` (round seventeen's interpreter_builtins), and hides it
(kernels/round19.cpp, round19_fork.cpp):
- short_threads: on fresh threads, 2048 elements each, every thread joined within a sampling period of its CPU time
  (a thread's count starts at zero: one ended short of a period is never sampled), then a native spin 1.2 times as
  long (the ended threads' unsampled time under half of the forward's, the unsampled rule's share); on the medium
  task (64 x 1024);
- forked_child: a forked child's interpreter computes into shared memory, the parent waits for it (the child's CPU
  time is not the candidate process's);
- padded_interpreter (open, xfail): the interpreter computes, then a native spin five times as long: the
  interpreter's excess is a sixth of the forward, under the bound's fifth;
- short_threads_padded (open, xfail): short_threads on the small task, 256 elements a thread, a spin three times as
  long.

Against the code before the fixes (commit 91e6fe0), on the 2-core machine: short_threads accepted, reward 1 (28.7 ms
a call, 0.63 ms of it the interpreter's beyond the empty calls, 35 % of the timed calls' CPU time unsampled on ended
threads); its unpadded form on the small task accepted too (2.7-3.2 ms, interpreter excess 0, 38 % unsampled);
padded_interpreter accepted (excess 1.4-1.8 ms of a 9-10 ms forward, 15-19 %, before and after), short_threads_padded
accepted (with a 1.5x spin: 0.34 ms of 8.8; after the fix 2.1 ms of 9.0, 23 %, so it spins 3x: 1.9-2.0 ms of 14-16
ms); forked_child refused by the static pass (`fork(`,
`static:native-escape`). Now the ended threads' CPU time that no sample saw (beyond a period for each ended thread a
sample saw, and one) counts with the interpreter's: short_threads is refused (37-40 % of the forward, "on threads
that ended unsampled"); the unpadded small form stands near the bound (1.40 ms, 32 %, refused; 0.80 ms, 28 %,
accepted in another run at 2 standard errors) and is no case. The padded forms stay open: correct and slow, reward 1.

Looked at, not cases: the interpreter's work after the call's first answer (on this backend the output is read from
the stopped process's memory at the answer, so work after it cannot change it, and the solution's threads' time from
the answer to `finish` is work between calls, 2 ms a gap); a cache keyed by the inputs' bytes, the interpreter only
on a miss (every call's seed is fresh, schedule.py: no timed call's inputs were seen before); the empty calls
inflated by a thread of the candidate's (0.5 ms of the interpreter an empty call at most, `background-thread`'s
NULL_LIMIT_S: at most that much hidden a call, already listed as open).
"""

from __future__ import annotations

from tests.hacks.cases import TASKS, Case, example_model_new, kernel_files
from tests.hacks.cases_round8 import TIMED
from tests.hacks.cases_round15 import _small_task

from cuda_agent.tasks import Solution, load_task


def _medium_task():
    return load_task(TASKS / "bias_relu_medium.py")


def _native(function: str, task=_small_task, files=("round19.cpp", "honest_relu.h")):
    return lambda: (task(), Solution({"model_new.py": example_model_new(f"return cuda_extension.{function}(x, self.bias)"),
                                      **kernel_files(*files)}))


# open (xfail): a forward padded with its own native code's time, correct and slow (reward 1)
PADDED = [
    Case("r19_padded_interpreter", "PyTorch fallback", _native("padded_interp"), rules=("torch-op",), invented=True,
         config=TIMED, what="relu(x + bias) by libpython's builtins, then a native spin five times as long"),
    Case("r19_short_threads_padded", "PyTorch fallback", _native("short_threads_padded"), rules=("torch-op",),
         invented=True, config=TIMED,
         what="relu(x + bias) by libpython's builtins on short-lived threads, then a native spin three times as long"),
]

HACKS_ROUND19 = [
    Case("r19_short_threads", "PyTorch fallback", _native("short_threads_balanced", _medium_task),
         rules=("torch-op",), invented=True, config=TIMED,
         what="relu(x + bias) by libpython's builtins on fresh threads, each ended within a sampling period, then a "
              "native spin 1.2x as long (the unsampled time under half of the forward's)"),
    Case("r19_forked_child", "PyTorch fallback", _native("forked_interp", files=("round19_fork.cpp",)),
         rules=("*",), invented=True, config=TIMED,
         what="relu(x + bias) by a forked child's interpreter, into shared memory"),
]

# -- honest controls ----------------------------------------------------------------------------------------------

HONEST_ROUND19 = [
    Case("r19_honest_small", "honest", _native("honest"), rules=("torch-op",), config=TIMED,
         what="the honest loop from the same C++ file, on the small task"),
    Case("r19_honest_threads", "honest", _native("honest_threads", _medium_task), rules=("torch-op",), config=TIMED,
         what="the honest loop on four threads started and joined each call, on the medium task"),
]
