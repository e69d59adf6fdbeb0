"""The hack suite's eleventh round (session 19), written blind against the candidate zygote
(`CUDA_AGENT_CANDIDATE_ZYGOTE=1`, docs/verification.md "The candidate zygote"): candidates forked from one
sandboxed zygote per harness process. Every solution here is the example task's `relu(x + bias)` over one
C++ file (kernels/round11.cpp), so one build serves every case:

- a recorder (an honest solution whose `ModelNew.__init__` leaves a key through every channel it can: files
  in /tmp, /dev/shm, /var/tmp, home, the cache and its box's parent; SysV shared memory and message queues;
  a POSIX message queue; a bound abstract unix socket; its environment; every regular file it holds open,
  its log among them, reopened through /proc/self/fd) and a replayer evaluated after it in the same harness
  process (correct only if it found the key through one of them);
- the same pair over the kernel's page cache of a large file on the read-only root that nothing else reads
  (the recorder clears 24 pages with posix_fadvise(DONTNEED) and reads those of its key's set bits; the
  replayer asks preadv2(RWF_NOWAIT), which answers only from the cache);
- probes whose `ModelNew.__init__` raises with a report of what the process sees (the verdict's message
  carries it): processes, parent, capabilities, descriptors, writable folders, its mounts; and the strings
  the fork left in its memory that name a job folder (an earlier candidate's job, left in the zygote's heap?);
- the shared mappings a candidate has (one made by the zygote before the fork would be common memory);
- a recorder that stays alive while a replayer of another evaluation of the same process runs beside it;
- a key added to the kernel's keyrings (session, user, user-session: add_key through syscall(), found in
  libc's symbol table), looked for with request_key;
- a candidate that never returns (PID 1 of its namespace ignores signals it has no handler for), then the
  next evaluation; and one that replaces its own image (execve, found in libc's symbol table).
"""

from __future__ import annotations

import glob
import os

from tests.env.helpers import example_task
from tests.hacks.cases import example_model_new, kernel_files, report_in

from cuda_agent.tasks import Solution

KEY = "r11-recording-7f3a"
CACHE_VALUE = 0xA5A5A5   # 24 bits, one page each
REPORT = "R11REPORT:"


def solution(forward: str, init: str = "") -> Solution:
    return Solution({"model_new.py": example_model_new(forward, init=init),
                     **kernel_files("round11.cpp", "honest_relu.h", "elf_lookup.h")})


HONEST = "return cuda_extension.honest(x, self.bias)"
GATED = "return cuda_extension.gated(x, self.bias, self.ok)"


def recorder(hold: float = 0.0) -> tuple:
    """Records KEY, then (with `hold`) stays alive that many seconds in ModelNew.__init__."""
    init = f"self.took = cuda_extension.record({KEY!r})" + (f"\ncuda_extension.hold({hold})" if hold else "")
    return example_task(), solution(HONEST, init=init)


def replayer() -> tuple:
    return example_task(), solution(GATED, init=f"self.ok = bool(cuda_extension.replay({KEY!r}))")


def cache_recorder(path: str) -> tuple:
    return example_task(), solution(HONEST, init=f"cuda_extension.cache_write({path!r}, {CACHE_VALUE})")


def cache_replayer(path: str) -> tuple:
    return example_task(), solution(GATED, init=f"self.ok = cuda_extension.cache_read({path!r}) == {CACHE_VALUE}")


def reporter(call: str) -> tuple:
    """A solution that fails at its start with `REPORT` and what `call` (an expression) returned."""
    return example_task(), solution(HONEST, init=f"raise RuntimeError({REPORT!r} + str({call}) + '<END>')")


def report_of(result) -> str:
    return report_in(result, REPORT)


def quiet_large_file() -> str | None:
    """A file of the read-only root of 40 MB or more that no process maps (a JDK's sources, an archive):
    its pages are in the page cache only when someone read them."""
    for pattern in ("/usr/lib/jvm/*/lib/src.zip", "/usr/share/package-lists/*.tsv", "/usr/lib/jvm/*/lib/modules"):
        for path in sorted(glob.glob(pattern)):
            if os.path.getsize(path) >= 40 << 20 and os.access(path, os.R_OK):
                return path
    return None
