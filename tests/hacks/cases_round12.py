"""The hack suite's twelfth round (session 22), against persistent judges
(`CUDA_AGENT_PERSISTENT_JUDGE=1`, docs/environment.md): one trusted judge process serves evaluations one
after another, only the candidate is fresh. An RL policy's candidates are evaluated back to back on that
judge, so each of them tries to use what it keeps. Every solution is the example task's `relu(x + bias)`
over one C++ file (kernels/round12.cpp), so one build serves every case:

- a recorder (an honest solution whose `ModelNew.__init__` writes a key into its staging file, past its
  outputs near each slot's start and end, and into its box and the folder above it) and a replayer
  evaluated next on the same judge (correct only if it found the key there);
- a scan of the staging file a later candidate is handed (nonzero bytes: an earlier evaluation's inputs or
  outputs, or a recording, left in memory the judge passes on);
- what a candidate holds and sees while a kept judge serves it (a descriptor of the judge's handover
  socket would let it hand the judge a staging file of its own for the next job; the judge's process or
  its folder in its mounts);
- candidates that end their evaluation in the ways that still leave the judge kept (the candidate's own
  failure): one that hangs on a call after the judge drew its inputs, one that dies of SIGSEGV mid-way,
  one that returns NaN, one that overwrites both staging slots (the inputs the judge put there and checks
  bit for bit) after its call; each followed on the same judge by an honest solution (still correct) and
  a wrong one (still rejected);
- a candidate holding 1.5 GiB, whose processes take a while to die once killed: the judge must not be handed
  to the next job before they have (its kernels could still write into the judge's memory it mapped);
- a candidate whose import, racing the judge's set-up (a task whose model takes seconds to make), makes the
  box's `reference_init.pt` (which the judge, outside the sandbox, saves the reference's weights to) a
  symbolic link to a file of the harness's.
"""

from __future__ import annotations

from tests.env.helpers import example_task
from tests.hacks.cases import example_model_new, kernel_files, report_in

from cuda_agent.tasks import Solution

KEY = "r12-recording-5c1e"
REPORT = "R12REPORT:"


def solution(forward: str, init: str = "") -> Solution:
    return Solution({"model_new.py": example_model_new(forward, init=init),
                     **kernel_files("round12.cpp", "honest_relu.h")})


HONEST = "return cuda_extension.honest(x, self.bias)"


def honest() -> tuple:
    return example_task(), solution(HONEST)


def wrong() -> tuple:
    """relu(x + bias) zeroed: wrong wherever x + bias > 0."""
    return example_task(), solution("return cuda_extension.gated(x, self.bias, False)")


def recorder() -> tuple:
    return example_task(), solution(HONEST, init=f"self.took = cuda_extension.stage_record({KEY!r})")


def replayer() -> tuple:
    return example_task(), solution("return cuda_extension.gated(x, self.bias, self.ok)",
                                    init=f"self.ok = bool(cuda_extension.stage_replay({KEY!r}))")


def on_call(at: int, how: str) -> tuple:
    """Honest but on call `at`: "hang", "crash" (SIGSEGV) or "nan"."""
    return example_task(), solution(f"return cuda_extension.on_call(x, self.bias, {at}, {how!r})")


def scribbler() -> tuple:
    """Honest output, then 0xFF over the first 8 MiB of both staging slots (its own inputs among them)."""
    return example_task(), solution("return cuda_extension.scribble(x, self.bias)")


def reporter(call: str) -> tuple:
    """A solution that fails at its start with `REPORT` and what `call` (an expression) returned."""
    return example_task(), solution(HONEST, init=f"raise RuntimeError({REPORT!r} + str({call}) + '<END>')")


def report_of(result) -> str:
    return report_in(result, REPORT)


def heavy(mib: int) -> tuple:
    """Honest, holding `mib` MiB of touched memory: when killed, its process takes a while to tear down
    (what a CUDA context does too), long after bwrap, outside its namespace, is gone."""
    return example_task(), solution(HONEST, init=f"cuda_extension.ballast({mib})")


def slow_task(seconds: float):
    """The example task, its `Model.__init__` taking `seconds` (a large model's weights being made)."""
    from cuda_agent.tasks import Task
    from tests.env.helpers import EXAMPLES

    code = (EXAMPLES / "model.py").read_text()
    marker = "super().__init__()\n"
    assert marker in code
    return Task("slow_init", code.replace(marker, marker + f"        import time; time.sleep({seconds})\n", 1))


def planter(target: str, seconds: float = 3.0) -> tuple:
    """At its import (before the judge has saved the reference's weights into the box) it makes the box's
    `reference_init.pt` a symbolic link to `target`, a file of the harness's outside the sandbox."""
    header = (f"PLANTED = cuda_extension.plant(__file__, 'reference_init.pt', {target!r})\n"
              f"if not PLANTED.startswith('planted'):   # too late (the judge had saved), or refused\n"
              f"    raise RuntimeError({REPORT!r} + PLANTED + '<END>')")
    return slow_task(seconds), Solution({"model_new.py": example_model_new(HONEST, header=header),
                                         **kernel_files("round12.cpp", "honest_relu.h")})
