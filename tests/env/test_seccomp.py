"""The sandbox's seccomp filter on the CPU backend: threads are made, processes are not (a child's CPU
time is not the worker's, so work done there would go unmeasured: hacks round 8)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cuda_agent.env.infra.sandbox import sandbox_available, seccomp_program

pytestmark = pytest.mark.skipif(not sandbox_available()[0], reason="bubblewrap is needed")

PROBE = r"""
import ctypes, os, threading
done = []
t = threading.Thread(target=lambda: done.append(1)); t.start(); t.join()
print("thread", "made" if done else "not made")
for name, make in (("fork", os.fork), ("posix_spawn", lambda: os.posix_spawn("/bin/true", ["true"], {}))):
    try:
        pid = make()
        if pid == 0:
            os._exit(0)
        print(name, "made")
    except OSError as exc:
        print(name, "refused", exc.errno)
libc = ctypes.CDLL(None, use_errno=True)
print("vfork", "refused" if libc.syscall(58) == -1 else "made")
params = ctypes.create_string_buffer(120)   # struct io_uring_params
fd = libc.syscall(425, 4, params)           # io_uring_setup(4 entries)
print("io_uring", "refused", ctypes.get_errno()) if fd == -1 else print("io_uring made")
"""


def run_filtered(no_processes: bool) -> str:
    program = seccomp_program(no_processes=no_processes)
    if program is None:
        pytest.skip("the filter is x86-64 only")
    fd = os.memfd_create("filter")
    os.write(fd, program)
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        done = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
                               "--die-with-parent", "--seccomp", str(fd), sys.executable, "-c", PROBE],
                              pass_fds=(fd,), capture_output=True, text=True, timeout=60)
    finally:
        os.close(fd)
    return done.stdout + done.stderr


def test_the_cpu_filter_refuses_processes_and_lets_threads_be_made():
    out = run_filtered(no_processes=True)
    assert "thread made" in out, out
    assert "fork refused 1" in out and "posix_spawn refused" in out and "vfork refused" in out, out
    assert "io_uring refused 1" in out, out   # its work runs in the kernel's threads, not the candidate's


def test_without_it_processes_are_made():
    out = run_filtered(no_processes=False)
    assert "thread made" in out and "fork made" in out and "posix_spawn made" in out, out


EXEC_PROBE = r"""
import os, sys
from cuda_agent.env.infra.sandbox import seccomp_program
from cuda_agent.env.infra.zygote import _install_filter
_install_filter(seccomp_program(no_exec=sys.argv[1] == "1"))
try:
    os.execv("/bin/true", ["true"])
except OSError as exc:
    print("exec refused", exc.errno)
"""


@pytest.mark.parametrize("no_exec", [True, False])
def test_the_forked_candidates_filter_refuses_exec(no_exec):
    """A candidate forked from the zygote gets the filter with `no_exec` (it runs Python already)."""
    if seccomp_program() is None:
        pytest.skip("the filter is x86-64 only")
    done = subprocess.run([sys.executable, "-c", EXEC_PROBE, "1" if no_exec else "0"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert ("exec refused 1" in done.stdout) == no_exec, done.stdout + done.stderr
