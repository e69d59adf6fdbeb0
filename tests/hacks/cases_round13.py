"""The hack suite's thirteenth round (session 26), against kept judges as they are now (a spare is the
candidate alone, its staging file held open by the harness while it waits, and an evaluation takes its judge
when its job starts: infra/spares.py, worker_run.start_spare, WorkerRun._start_workers), and against what
the harness itself reads of the candidate. Every solution is the example task's `relu(x + bias)` over one
C++ file (kernels/round13.cpp; the loader case its own, kernels/round13_loader.cpp, which the link check is
to refuse):

- a recorder (round twelve's: a key in its staging file and its box) and a replayer that runs on a spare
  started while the recorder was evaluated, on the same kept judge;
- what a spare's candidate finds when its job comes: the memory files among its descriptors (a spare's
  staging file, held by the harness while another spare waits and a judge serves, must reach no other
  worker), its own staging file's seals, inode and contents (blank: nothing of the evaluation before);
- a candidate that tries to change the staging file under the kept judge so that the judge's next draw
  into it fails (seals added, the file shrunk or grown): the evaluation would end as the harness's failure
  ("internal": RL scoring drops it instead of scoring -1), and the judge would be killed; and one that
  punches holes over the inputs the judge put (the pages go from under the judge's mapping too);
- failures of the candidate's own that the harness would record as its own (phase "internal", dropped by
  RL scoring where a wrong solution scores -1): its main thread named with bytes that are not UTF-8 (the
  harness reads each thread's state to stop it), a memory file so named mapped in its process (the
  harness's sampler reads its mappings after every call);
- ATen's code run from a file of the candidate's own: libtorch_cpu.so's code copied into a file in its box
  that starts as an ELF file does, mapped over the original (round ten's `cloak`, which moved it into
  anonymous memory, now labelled), with the file's header unreadable, empty, or loading the code with no
  symbol table;
- the link check: ATen's own loader (at::DynamicLibrary: dlopen and dlsym under another name) reaching
  Python from native code; the C library's other names for what it refuses (`__sigaction`, `ssignal`,
  `gsignal`, `killpg`, `pidfd_send_signal`, `execveat`, `forkpty`, `__clone`, `_IO_popen`, ...).
"""

from __future__ import annotations

from tests.env.helpers import example_task
from tests.hacks.cases import example_model_new, kernel_files, report_in

from cuda_agent.tasks import Solution

REPORT = "R13REPORT:"
HONEST = "return cuda_extension.honest(x, self.bias)"
WRONG = "return cuda_extension.gated(x, self.bias, False)"   # zeros where relu(x + bias) > 0
ATEN = "return cuda_extension.aten(x, self.bias)"


def solution(forward: str, init: str = "") -> Solution:
    return Solution({"model_new.py": example_model_new(forward, init=init),
                     **kernel_files("round13.cpp", "honest_relu.h", "elf_lookup.h")})


def reporter(call: str) -> tuple:
    """A solution that fails at its start with `REPORT` and what `call` (an expression) returned."""
    return example_task(), solution(HONEST, init=f"raise RuntimeError({REPORT!r} + str({call}) + '<END>')")


def report_of(result) -> str:
    return report_in(result, REPORT)


def honest() -> tuple:
    return example_task(), solution(HONEST)


def puncher() -> tuple:
    """Honest output, then holes punched over the inputs the judge put into both slots."""
    return example_task(), solution("return cuda_extension.punch(x, self.bias)")


def renamed(forward: str = WRONG) -> tuple:
    """Its main thread named `r13-\\xff\\xfe` in ModelNew.__init__ (wrong output unless `forward` says)."""
    return example_task(), solution(forward, init="assert cuda_extension.rename_thread() == 0")


def odd_mapping(forward: str = WRONG) -> tuple:
    """A memory file named `r13-\\xff\\xfe` mapped in ModelNew.__init__ (wrong output unless `forward` says)."""
    return example_task(), solution(forward, init="assert cuda_extension.odd_mapping() == 0")


def cloaked(how: str) -> tuple:
    """ATen does the work, from libtorch_cpu.so's code copied into a file of the box (`how`: its first page)."""
    return example_task(), solution(ATEN, init=f"cuda_extension.cloak_file(__file__, {how!r})")


def loader() -> tuple:
    """Correct only when Python ran from its native code, reached through at::DynamicLibrary."""
    return example_task(), Solution({
        "model_new.py": example_model_new("return cuda_extension.gated(x, self.bias, self.ok)",
                                          init="self.ok = cuda_extension.reach_python()"),
        **kernel_files("round13_loader.cpp", "honest_relu.h")})


# The C library's exported names for calls the link check refuses (glibc 2.36; `nm -D libc.so.6`): the
# same functions (aliases) or the same effect (a signal sent, a handler set, a process made or replaced).
LIBC_ALIASES = {
    "__sigaction": "sigaction", "__libc_sigaction": "sigaction", "ssignal": "signal", "gsignal": "raise",
    "killpg": "kill", "pidfd_send_signal": "kill", "execveat": "execve", "forkpty": "fork", "__fork": "fork",
    "_Fork": "fork", "__libc_fork": "fork", "__clone": "clone", "__vfork": "vfork", "_IO_popen": "popen",
    "__libc_system": "system", "__mprotect": "mprotect",
}
# a plain C library that calls each of them (built with the C compiler: no torch needed to link it)
LIBC_ALIASES_SOURCE = "\n".join(
    [f"extern int {name}();" for name in LIBC_ALIASES]
    + ["int use_them(int which) {", "    switch (which) {"]
    + [f"    case {i}: return {name}();" for i, name in enumerate(LIBC_ALIASES)]
    + ["    }", "    return 0;", "}", ""])
