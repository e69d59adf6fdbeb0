"""The candidate's sandbox: bubblewrap, with its own namespaces and nothing of the harness in reach.

- Its own PID namespace and /proc: the harness's `/proc/<pid>/root`, `cwd`, `fd` and `mem` are out
  of reach, and everything the candidate starts dies with the namespace's init when the sandbox is
  killed (nothing outlives it to disturb later timing).
- No capability, an unprivileged user (uid 65534) where user namespaces work, no network, IPC or UTS
  sharing, a new session; a seccomp filter (x86-64) refuses the system calls that reach into other
  processes or change the sandbox (ptrace, process_vm_*, perf_event_open, bpf, mount, setns, ...) or
  work outside the candidate's threads (io_uring).
- Writable: the job's `box` alone. `/tmp`, `/dev/shm` and the cache are private and empty; the
  libraries it loads are those the harness hands it (handed.py) in the read-only `libs` folder.

`EvalConfig.sandbox`: "auto" (default) and "bwrap" require bubblewrap and fail clearly without it;
"none" runs unsandboxed, which the user must ask for.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

INSTALL_HINT = ("install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; `cuda-agent doctor --fix` "
                "does it) or, to run candidates unsandboxed, pass --no-sandbox (EvalConfig(sandbox='none'))")
SANDBOX_UID = 65534   # nobody
# every namespace but the user one, named one by one: --unshare-all also tries a user namespace,
# which the kernel refuses to a chrooted root (a build container); _USER adds it where it works
_NAMESPACES = ["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
               "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
_BASE = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", *_NAMESPACES]
_USER = ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]


class SandboxUnavailable(RuntimeError):
    pass


def _probe(path: str, args: list[str]) -> str:
    try:
        probe = subprocess.run([path, *args, "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap could not run: {exc}"
    return "" if probe.returncode == 0 else f"bwrap does not work here: {probe.stderr.strip()[:300]}"


@lru_cache(maxsize=None)
def _bwrap_status() -> tuple[str | None, bool, str]:
    """(path to a working bwrap or None, whether a user namespace works too, why not)."""
    path = shutil.which("bwrap")
    if not path:
        return None, False, "bubblewrap (bwrap) is not installed"
    why = _probe(path, _BASE)
    if why:
        return None, False, why
    userns = os.environ.get("CUDA_AGENT_SANDBOX_USERNS", "1") != "0" and not _probe(path, [*_BASE, *_USER])
    return path, userns, ""


def sandbox_available() -> tuple[bool, str]:
    path, _, why = _bwrap_status()
    return path is not None, why


def isolation() -> tuple[list[str] | None, str]:
    """bubblewrap with the candidate's namespaces, capabilities and user but no file system yet (the
    start of another sandbox's command line: the compiler's, builds/build_sandbox.py), or None and why not."""
    path, userns, why = _bwrap_status()
    if path is None:
        return None, why
    return [path, *_NAMESPACES, *(_USER if userns else [])], ""


def user_namespaces_work() -> bool:
    """Whether the sandbox gets a user namespace of its own here (what the candidate zygote needs)."""
    return _bwrap_status()[1]


def sandbox_prefix(config, box: Path) -> list[str] | None:
    """The command prefix that runs a worker inside the sandbox, or None when sandboxing is off."""
    if config.sandbox == "none":
        return None
    path, userns, why = _bwrap_status()
    if path is None:
        raise SandboxUnavailable(f"cannot sandbox the candidate: {why}; {INSTALL_HINT}")
    from cuda_agent.env.builds.handed import handed_dir

    cache = Path(config.cache_dir).resolve()
    libs = handed_dir(box)
    libs.mkdir(parents=True, exist_ok=True)
    args = [path, *_BASE, *(_USER if userns else [])]
    for device in sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri/*")):
        args += ["--dev-bind", device, device]
    python = sorted(_python_paths())
    # Hide the home folder (keys, histories) unless Python itself lives there; hide the cache
    # (baselines, other solutions' sources) either way.
    home = Path.home().resolve()
    if str(home) != "/" and not any(_inside(p, home) for p in python) and not _inside(str(cache), home):
        args += ["--tmpfs", str(home)]
    # The private /tmp hides whatever lived there: bring back (read-only) the interpreter, its
    # packages and our own source when they are installed under /tmp (CI clones, pytest folders);
    # never a folder inside the cache (the harness's sys.path can hold a build folder there).
    for p in python:
        if _inside(p, Path("/tmp")) and not _inside(p, cache):
            args += ["--ro-bind", p, p]
    try:   # bwrap mounts over the cache, and cannot make its mount point on the read-only root
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass
    if cache.is_dir():
        args += ["--tmpfs", str(cache)]   # after those binds, so that none of them shows the cache again
    args += ["--ro-bind", str(libs), str(libs), "--bind", str(box), str(box), "--chdir", str(box)]
    return args


# -- seccomp ------------------------------------------------------------------------------------------

# x86-64 system call numbers refused inside the sandbox.
_DENIED_SYSCALLS = {
    "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "perf_event_open": 298,
    "bpf": 321, "userfaultfd": 323, "keyctl": 250, "add_key": 248, "request_key": 249, "mount": 165,
    "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308, "kexec_load": 246,
    "init_module": 175, "finit_module": 313, "delete_module": 176, "acct": 163, "swapon": 167, "reboot": 169,
    # io_uring: work submitted there runs in the kernel's own threads (io-wq), whose CPU time is not the
    # candidate's, and its timers fire whenever they are due, also while the judge's eager runs
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
}
_AUDIT_ARCH_X86_64 = 0xC000003E
_EPERM, _ENOSYS = 1, 38
# Process creation, refused where a call's time is the worker's CPU time (the CPU backend): a child
# process's CPU time is not the worker's, so work done there would go unmeasured. Threads are still
# made: `clone` with CLONE_THREAD passes; `clone3` (whose flags seccomp cannot read) answers ENOSYS,
# on which glibc makes its threads through `clone`.
_FORK, _VFORK, _CLONE, _CLONE3 = 57, 58, 56, 435
_EXECVE, _EXECVEAT = 59, 322
_CLONE_THREAD = 0x00010000


def seccomp_program(no_processes: bool = False, allowed: frozenset[str] = frozenset(),
                    no_exec: bool = False) -> bytes | None:
    """The filter as the compiled classic-BPF program bubblewrap's --seccomp reads (None off x86-64);
    `no_processes`: process creation refused too (threads allowed); `allowed`: calls of the refused
    list let through (the candidate zygote's own filter, zygote.py); `no_exec`: execve and execveat
    refused (a candidate forked from the zygote runs Python already; one bubblewrap starts needs exec)."""
    import platform
    import struct

    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    ld, jeq, jset, ret = 0x20, 0x15, 0x45, 0x06   # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JSET|K, BPF_RET|K
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | _EPERM, 0x00050000 | _ENOSYS
    # (code, true target, false target, k): targets are labels, resolved to relative jumps below
    program = [(ld, None, None, 4),                               # seccomp_data.arch
               (jeq, "next", "allow", _AUDIT_ARCH_X86_64),
               (ld, None, None, 0)]                               # seccomp_data.nr
    if no_processes:
        program += [(jeq, "enosys", "next", _CLONE3), (jeq, "deny", "next", _FORK), (jeq, "deny", "next", _VFORK),
                    (jeq, "clone", "next", _CLONE)]
    denied = {number for name, number in _DENIED_SYSCALLS.items() if name not in allowed}
    if no_exec:
        denied |= {_EXECVE, _EXECVEAT}
    program += [(jeq, "deny", "next", number) for number in sorted(denied)]
    program.append((jeq, "allow", "allow", 0))                    # any other call: allowed
    labels = {"clone": len(program)}                              # (every jump goes forward)
    program += [(ld, None, None, 16),                             # clone's flags: args[0], low half
                (jset, "allow", "deny", _CLONE_THREAD)]
    for label, verdict in (("allow", allow), ("deny", eperm), ("enosys", enosys)):
        labels[label] = len(program)
        program.append((ret, None, None, verdict))

    def jump(at: int, target) -> int:
        return 0 if target in (None, "next") else labels[target] - at - 1

    return b"".join(struct.pack("HBBI", code, jump(i, jt), jump(i, jf), k)
                    for i, (code, jt, jf, k) in enumerate(program))


def _inside(path: str, folder: Path) -> bool:
    return path == str(folder) or path.startswith(str(folder).rstrip("/") + "/")


def _python_paths() -> set[str]:
    import sys

    source_root = str(Path(__file__).resolve().parents[3])
    candidates = {sys.prefix, sys.base_prefix, sys.exec_prefix, source_root, *sys.path}
    return {os.path.realpath(p) for p in candidates if p and os.path.exists(p)}


# -- what runs inside ---------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):   # a child forked by any thread is listed there
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                found += [int(c) for c in fh.read().split()]
    except (OSError, ValueError):
        pass
    return found


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (host PIDs). Below a sandbox's bwrap: its init, the worker, and
    whatever the candidate started, even a session leader that left the worker's process group (it
    is reparented to the namespace's init, never to anything outside)."""
    found, stack = set(), _children(pid)
    while stack:
        child = stack.pop()
        if child not in found:
            found.add(child)
            stack += _children(child)
    return found
