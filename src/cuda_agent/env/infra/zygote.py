"""Sandboxed candidates forked from a zygote that has imported torch already (opt-in).

With CUDA_AGENT_CANDIDATE_ZYGOTE=1 a candidate is not a fresh `python -m cuda_agent.env.workers
candidate` inside bubblewrap but a fork of a zygote: one per (backend, device, sandbox) of a harness
process, started on first use inside bubblewrap (the candidate's sandbox with no job's folder in it)
as `python -m cuda_agent.env.infra.zygote FD`. It imports `cuda_agent.env.workers.main` once, never
touches CUDA, never runs a candidate's code, and is not dumpable (nothing below it may read its memory).
Unlike the candidate's sandbox it is root of its user namespace with CAP_SYS_ADMIN alone, and its
seccomp filter lets mount and unshare through: that is what setting up a child's namespaces needs.

On a request the zygote forks a keeper, which unshares mount, PID, IPC, network and UTS namespaces and
forks the candidate (PID 1 of its namespace; the keeper waits for it and exits with its status). The
candidate, before any of its code: mounts its own /proc (bubblewrap's read-only covers re-applied),
covers /tmp, /dev/shm and bubblewrap's other private folders with fresh ones, makes /dev read-only,
binds its job's `libs` (read-only) and `box` from descriptors the harness opened, enters a user
namespace of its own as uid 65534, drops every capability, closes every descriptor but those it was
handed, says hello over a unix socket (the kernel hands the harness its pid as the harness sees it:
SCM_CREDENTIALS), sets no_new_privs and installs the candidate's seccomp filter (`seccomp_program`,
stacked on the zygote's), and then is the candidate worker.

The zygote sees every job folder of the harness's job root (bound at JOBS); a child binds its own
job's `box` and `libs` from there and unmounts JOBS before it runs anything of the candidate's.

A request is one message on a socketpair shared only with the harness: JSON (environment, folder,
the mount plan, the job's name and its box and libs paths, the seccomp program) and the descriptors:
the worker's stdin, protocol pipe and log, the write end of a status pipe (the keeper's exit status is
written there, as forkserver.py does), the hello socket, and the staging file when there is one.
"""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import traceback

ENV = "CUDA_AGENT_CANDIDATE_ZYGOTE"
_HELLO_TIMEOUT_S = 30.0

_NEWNS, _NEWUTS, _NEWIPC, _NEWUSER, _NEWPID, _NEWNET = 0x20000, 0x4000000, 0x8000000, 0x10000000, 0x20000000, 0x40000000
_RDONLY, _NOSUID, _NODEV, _NOEXEC, _REMOUNT, _BIND, _REC, _PRIVATE = 1, 2, 4, 8, 32, 4096, 16384, 1 << 18
_PR_SET_DUMPABLE, _PR_SET_SECCOMP, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 4, 22, 24, 38
_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, _SECCOMP_MODE_FILTER = 47, 4, 2
_MNT_DETACH = 2
# where the zygote sees the folder that holds the jobs' folders (each child keeps its own job's alone)
JOBS = "/dev/.cuda-agent-jobs"   # (bubblewrap can make a folder in its /dev, and no private cover hides it)
_PROC_COVERS = ("sys", "sysrq-trigger", "irq", "bus")   # what bubblewrap makes read-only in its /proc
# the zygote's own filter: the candidate's, less what setting up a child takes
ZYGOTE_ALLOWED = frozenset({"mount", "umount2", "unshare"})
SANDBOX_UID = 65534


class ZygoteUnavailable(RuntimeError):
    pass


class ZygoteStopped(ZygoteUnavailable):
    pass


def enabled() -> bool:
    return os.environ.get(ENV, "0") == "1"


_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()
    _check(_libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {target}")


def _read_only(target: str, source: str | None = None) -> None:
    """Bind `source` (or `target` itself) on `target`, read-only."""
    _mount(source or target, target, None, _BIND | _REC)
    _mount(None, target, None, _REMOUNT | _BIND | _RDONLY | _NOSUID | _NODEV)


def _prctl(option: int, arg: int = 0) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0), f"prctl {option}")


# -- the zygote (its own process, inside bubblewrap) --------------------------------------------


def _serve(sock: socket.socket) -> None:
    from cuda_agent.env.infra.forkserver import next_request, report_exits

    importlib.import_module("cuda_agent.env.workers.main")   # the import every candidate would otherwise pay
    _prctl(_PR_SET_DUMPABLE, 0)   # no child, in whatever user namespace, may ptrace it or open its memory
    status_fds: dict[int, int] = {}
    signal.signal(signal.SIGCHLD, lambda *_: report_exits(status_fds))   # forkserver.py's reaper
    while (received := next_request(sock, 8)) is not None:
        request, fds = received
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])
        try:
            pid = os.fork()
            if pid == 0:
                _keeper(request, fds, sock, list(status_fds.values()))
            status_fds[pid] = fds[3]
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
        for i, fd in enumerate(fds):
            if i != 3:   # the status pipe is kept for the reaper
                os.close(fd)
        sock.sendall(f"{pid}\n".encode())


def _keeper(request: dict, fds: list[int], sock: socket.socket, server_fds: list[int]) -> None:
    """In the zygote's child: new namespaces, the candidate forked into them, its status passed on."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
        sock.close()
        for fd in server_fds:
            os.close(fd)
        os.close(fds[3])
        os.setsid()
        _check(_libc.unshare(_NEWNS | _NEWPID | _NEWIPC | _NEWNET | _NEWUTS), "unshare")
        pid = os.fork()
        if pid == 0:
            _candidate(request, fds)
        for i, fd in enumerate(fds):
            if i != 3:
                os.close(fd)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):   # dies of the same signal: the harness reads it as Popen would say it
            if os.WTERMSIG(status) not in (signal.SIGKILL, signal.SIGSTOP):
                signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
            os.kill(os.getpid(), os.WTERMSIG(status))
        os._exit(os.WEXITSTATUS(status))
    except BaseException:
        os.write(fds[2], traceback.format_exc().encode())
    finally:
        os._exit(1)


def _candidate(request: dict, fds: list[int]) -> None:
    """PID 1 of the new namespaces: the sandbox finished, then the candidate worker. Never returns."""
    stdin_fd, protocol_fd, log_fd, _, hello_fd, *rest = fds
    staging_fd = rest[0] if rest else None
    try:
        os.dup2(log_fd, 2)   # a failed set-up says why in the job's log
        from cuda_agent.env.infra.forkserver import _become_worker
        program = bytes.fromhex(request["seccomp"]) if request["seccomp"] else None
        _prctl(_PR_SET_DUMPABLE, 1)   # (the zygote's 0 is inherited) its /proc/self is its own: the harness reads it
        _private_mounts(request)
        _check(_libc.unshare(_NEWUSER), "unshare(CLONE_NEWUSER)")
        for name, text in (("setgroups", "deny"), ("uid_map", f"{SANDBOX_UID} 0 1"), ("gid_map", f"{SANDBOX_UID} 0 1")):
            with open(f"/proc/self/{name}", "w") as fh:
                fh.write(text)
        _drop_capabilities()
        keep = {0, 1, 2, stdin_fd, protocol_fd, log_fd, hello_fd, *rest}
        for name in os.listdir("/proc/self/fd"):
            if int(name) not in keep:
                try:
                    os.close(int(name))
                except OSError:
                    pass
        hello = socket.socket(fileno=hello_fd)
        hello.send(b"1")   # the kernel adds our credentials: our pid as the harness sees it
        hello.close()
    except BaseException:
        os.write(2, traceback.format_exc().encode())
        os._exit(1)
    _become_worker(request, None, stdin_fd, protocol_fd, log_fd, [], staging_fd,
                   last=lambda: _install_filter(program))


def _private_mounts(request: dict) -> None:
    """Its own /proc, private folders of its own, its job's libs and box, nothing of another job."""
    _mount(None, "/", None, _REC | _PRIVATE)   # nothing it mounts is seen by the zygote or a sibling
    _mount("proc", "/proc", "proc", _NOSUID | _NODEV | _NOEXEC)
    for name in _PROC_COVERS:
        if os.path.exists(f"/proc/{name}"):
            _read_only(f"/proc/{name}")
    if os.path.isdir("/dev/pts"):   # terminals of its own (bubblewrap's instance is shared by every child)
        _mount("devpts", "/dev/pts", "devpts", _NOSUID | _NOEXEC, "newinstance,ptmxmode=0666,mode=620")
    sources = {path: os.open(path, os.O_PATH) for kind, path in request["plan"] if kind == "ro-bind"}
    try:
        for kind, path in request["plan"]:
            if kind == "tmpfs":
                os.makedirs(path, exist_ok=True)
                _mount("tmpfs", path, "tmpfs", _NOSUID | _NODEV, "mode=0755")
            elif kind == "read-only":
                _mount(None, path, None, _REMOUNT | _BIND | _RDONLY | _NOSUID | _NODEV)
            else:
                os.makedirs(path, exist_ok=True)
                _read_only(path, f"/proc/self/fd/{sources[path]}")
    finally:
        for fd in sources.values():
            os.close(fd)
    job = os.path.join(JOBS, request["job"])
    os.makedirs(request["libs"], exist_ok=True)
    _read_only(request["libs"], os.path.join(job, "libs"))
    os.makedirs(request["box"], exist_ok=True)
    _mount(os.path.join(job, "box"), request["box"], None, _BIND)
    _mount(None, request["box"], None, _REMOUNT | _BIND | _NOSUID | _NODEV)
    _check(_libc.umount2(JOBS.encode(), _MNT_DETACH), "umount the jobs' folder")   # every other job: gone


def _drop_capabilities() -> None:
    for cap in range(64):
        if _libc.prctl(_PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0) != 0 and ctypes.get_errno() == 22:
            break   # EINVAL: past the last capability this kernel knows
    _prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL)
    header = struct.pack("Ii", 0x20080522, 0)                   # _LINUX_CAPABILITY_VERSION_3, this thread
    data = ctypes.create_string_buffer(24)                         # two empty {effective, permitted, inheritable}
    _check(_libc.capset(ctypes.c_char_p(header), data), "capset")


def _install_filter(program: bytes | None) -> None:
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    if program is None:
        return
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("HxxxxxxQ", len(program) // 8, ctypes.addressof(buffer))
    _check(_libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.c_char_p(fprog), 0, 0), "seccomp")


def main() -> None:
    _serve(socket.socket(fileno=int(sys.argv[1])))


# -- the harness's side ------------------------------------------------------------------------


def _split(wrap: list[str], box: str) -> tuple[list[str], list[list[str]], str]:
    """The candidate's bubblewrap prefix (sandbox_prefix) as the zygote's prefix, the plan that
    redoes its private folders in each child, and the libs folder."""
    from cuda_agent.env.infra.sandbox import _USER

    tail = wrap[-8:]
    if len(wrap) < 8 or tail[0] != "--ro-bind" or tail[3:] != ["--bind", box, box, "--chdir", box]:
        raise ZygoteUnavailable("the sandbox's command is not the one the zygote knows")
    head = wrap[:-8]
    at = next((i for i in range(len(head)) if head[i:i + len(_USER)] == _USER), None)
    if at is None:
        raise ZygoteUnavailable("no user namespace for the sandbox here")
    prefix = [*head[:at], "--unshare-user", "--uid", "0", "--gid", "0", "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETFCAP",
              *head[at + len(_USER):]]
    plan = [["read-only", "/dev"], ["tmpfs", "/dev/shm"]]
    for i, arg in enumerate(head[:-1]):
        if arg == "--tmpfs":
            plan.append(["tmpfs", head[i + 1]])
        elif arg == "--ro-bind" and head[i + 1] != "/":
            plan.append(["ro-bind", head[i + 1]])
    return prefix, plan, tail[1]


class _Zygote:
    def __init__(self, prefix: list[str], env: dict):
        from cuda_agent.env.infra.sandbox import seccomp_program

        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        passed = [theirs.fileno()]
        program = seccomp_program(allowed=ZYGOTE_ALLOWED)
        if program is not None:
            filter_fd = os.memfd_create("cuda-agent-zygote-seccomp")
            os.write(filter_fd, program)
            os.lseek(filter_fd, 0, os.SEEK_SET)
            passed.append(filter_fd)
            prefix = [*prefix, "--seccomp", str(filter_fd)]
        self.errors = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen([*prefix, sys.executable, "-m", "cuda_agent.env.infra.zygote",
                                          str(theirs.fileno())], pass_fds=passed, env=env,
                                         stdin=subprocess.DEVNULL, stdout=self.errors, stderr=self.errors,
                                         start_new_session=True)
        finally:
            for fd in passed[1:]:
                os.close(fd)
            theirs.close()
        self.sock = ours
        self.lock = threading.Lock()

    def why_dead(self) -> str:
        try:
            self.proc.wait(5)   # what bubblewrap or Python said before it ended
        except subprocess.TimeoutExpired:
            pass
        self.errors.seek(0)
        return self.errors.read()[-500:].decode(errors="replace").strip() or "no output"

    def fork(self, request: dict, protocol_fd: int, log_fd: int, staging_fd: int | None):
        from cuda_agent.env.infra.forkserver import ForkedProcess

        stdin_read, stdin_write = os.pipe()
        status_read, status_write = os.pipe()
        hello, hello_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        hello.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        try:
            try:
                with self.lock:
                    try:
                        socket.send_fds(self.sock, [json.dumps(request).encode()],
                                        [stdin_read, protocol_fd, log_fd, status_write, hello_theirs.fileno(),
                                         *([staging_fd] if staging_fd is not None else [])])
                        answer = self.sock.recv(64)
                    except OSError:   # (a reset or a broken pipe) it ended
                        answer = b""
            finally:
                os.close(stdin_read)
                os.close(status_write)
                hello_theirs.close()
            if not answer:
                raise ZygoteStopped(f"the zygote stopped: {self.why_dead()}")
            pid = _hello_pid(hello)
            if pid is None:
                raise ZygoteUnavailable("the candidate's sandbox could not be set up (its log says why)")
        except BaseException:
            os.close(stdin_write)
            os.close(status_read)
            raise
        finally:
            hello.close()
        return ForkedProcess(pid, os.fdopen(stdin_write, "wb"), status_read)


def _hello_pid(hello: socket.socket) -> int | None:
    """The candidate's pid as this process sees it, from the credentials of its one message."""
    ready, _, _ = select.select([hello], [], [], _HELLO_TIMEOUT_S)
    if not ready:
        return None
    data, ancillary, _, _ = hello.recvmsg(8, socket.CMSG_SPACE(struct.calcsize("3i")))
    for level, kind, payload in ancillary:
        if data and level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
            return struct.unpack("3i", payload[:12])[0] or None
    return None


_zygotes: dict = {}
_broken: dict = {}   # key -> why its zygote died before its first child
_zygotes_lock = threading.Lock()


def fork_candidate(wrap: list[str], program: bytes | None, env: dict, box, protocol_fd: int, log_fd: int,
                   backend: str, gpu: int | None, staging_fd: int | None = None):
    """A candidate forked from the zygote of (backend, gpu, sandbox), started on first use with
    `env`, under the seccomp filter `program` (what bubblewrap would have installed); a
    forkserver.ForkedProcess whose pid is the candidate's. Raises ZygoteUnavailable."""
    box = str(box)
    prefix, plan, libs = _split(wrap, box)
    job = os.path.dirname(box)
    if os.path.dirname(libs) != job:
        raise ZygoteUnavailable("the job's libs are not beside its box")
    prefix += ["--bind", os.path.dirname(job), JOBS]   # every job's folder, for its children to pick theirs
    key = (backend, gpu, tuple(prefix))
    with _zygotes_lock:
        if key in _broken:   # one that could not start once will not start here: no second try
            raise ZygoteUnavailable(_broken[key])
        zygote = _zygotes.get(key)
        fresh = zygote is None or zygote.proc.poll() is not None
        if fresh:
            zygote = _zygotes[key] = _Zygote(prefix, env)
    request = {"role": "candidate", "env": env, "cwd": box, "plan": plan,
               "seccomp": program.hex() if program else None, "box": box, "libs": libs, "job": os.path.basename(job)}
    try:
        return zygote.fork(request, protocol_fd, log_fd, staging_fd)
    except ZygoteStopped as exc:
        if fresh:
            _broken[key] = str(exc)
        raise


if __name__ == "__main__":
    main()
