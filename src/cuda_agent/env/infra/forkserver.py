"""Judges forked from a process that has imported torch already: a small fork server.

Importing torch is most of a worker's start, and every evaluation starts a judge. The judge runs
only the task's code and is never sandboxed, so it can come from a fork: the server (`python -m
cuda_agent.env.infra.forkserver`, one per device of a harness process, started on first use) imports
`cuda_agent.env.workers.main` once, never touches CUDA, and forks each judge on request. Every judge
is still a process of its own for one evaluation, in a session of its own (killed with its group, as
a started one is), with the environment and folder it was asked for.

A request is one message on a socketpair shared only with the harness: the role, environment and
folder as JSON, and four descriptors (the worker's stdin, its protocol pipe, its log, and the write
end of a status pipe), and a fifth when the worker's pair has a staging file (transfer.Staging) or,
for a persistent judge, its handover socket instead (workers/handover.py; the request names which).
The server answers with the child's pid, and when it reaps the child it writes the exit status
(Popen's convention: minus the signal's number for a signal) to the status pipe, which is how the
harness polls and waits for a process that is not its own child.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback

from cuda_agent.env.workers.protocol import HANDOVER_FD_ENV, STAGING_FD_ENV

_MAX_REQUEST = 1 << 20


# -- the server (its own process) -------------------------------------------------------------


def report_exits(status_fds: dict[int, int]) -> None:
    """Reap every child that has exited and write its status (Popen's convention: minus the signal's
    number for a signal) to the status pipe noted for it, then close that pipe (SIGCHLD's handler)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = status_fds.pop(pid, None)
        if fd is not None:
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            try:
                os.write(fd, f"{code}\n".encode())
            except OSError:   # the harness is gone (its end of the status pipe closed)
                pass
            finally:
                os.close(fd)


def next_request(sock: socket.socket, max_fds: int) -> tuple[dict, list[int]] | None:
    """The harness's next request (its JSON and the descriptors sent with it), or None once the
    harness is gone (its end of the socket closed)."""
    try:
        message, fds, _, _ = socket.recv_fds(sock, _MAX_REQUEST, max_fds)
    except OSError:
        return None
    return (json.loads(message), fds) if message else None


def _serve(sock: socket.socket, warm: bool) -> None:
    importlib.import_module("cuda_agent.env.workers.main")   # the import every judge would otherwise pay
    if warm:   # what every measurement of a task would load again (workers/measure.py); not yet shown
        from cuda_agent.env.workers.measure import warm_up   # to leave CUDA untouched: CPU servers only

        warm_up()

    status_fds: dict[int, int] = {}
    signal.signal(signal.SIGCHLD, lambda *_: report_exits(status_fds))
    while (received := next_request(sock, 5)) is not None:
        request, fds = received
        stdin_fd, protocol_fd, log_fd, status_fd = fds[:4]
        staging_fd = fds[4] if len(fds) > 4 else None   # the pair's staging file, when it has one
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])   # the child is noted before it is reaped
        try:
            pid = os.fork()
            if pid == 0:
                _become_worker(request, sock, stdin_fd, protocol_fd, log_fd, [status_fd, *status_fds.values()],
                               staging_fd)
            status_fds[pid] = status_fd
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
        for fd in (stdin_fd, protocol_fd, log_fd, *fds[4:]):   # the child's now (status_fd: kept for the reaper)
            os.close(fd)
        sock.sendall(f"{pid}\n".encode())


def _become_worker(request: dict, sock: socket.socket | None, stdin_fd: int, protocol_fd: int, log_fd: int,
                   server_fds: list[int], staging_fd: int | None = None, last=None) -> None:
    """In the forked child: what `python -m cuda_agent.env.workers ROLE` would be. Never returns.
    `last`: called just before the worker's main (the candidate zygote's seccomp filter). An exception,
    before or in that main, has its traceback written to the worker's log and exits with code 1."""
    log = log_fd   # where a failure is said: the log's own descriptor, then fd 2 once it is the log
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGCHLD])
        os.setsid()
        if sock is not None:
            sock.close()
        for fd in server_fds:   # the status pipes are the server's (and the harness's) alone
            os.close(fd)
        os.dup2(stdin_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        log = 2
        os.close(stdin_fd)
        os.close(log_fd)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        os.environ.clear()
        os.environ.update(request["env"], CUDA_AGENT_PROTOCOL_FD=str(protocol_fd))
        os.environ.pop(STAGING_FD_ENV, None)
        os.environ.pop(HANDOVER_FD_ENV, None)
        if staging_fd is not None:   # its number here, not the harness's
            fd_env = request.get("fd_env", STAGING_FD_ENV)
            os.environ[fd_env if fd_env in (STAGING_FD_ENV, HANDOVER_FD_ENV) else STAGING_FD_ENV] = str(staging_fd)
        os.chdir(request["cwd"])
        sys.argv = ["cuda_agent.env.workers", request["role"]]
        import random

        random.seed()   # not the server's state, shared by every fork
        if last is not None:
            last()
        from cuda_agent.env.workers.main import main as worker_main

        worker_main()
    except BaseException:
        _write_traceback(log)
    finally:
        os._exit(1)   # main() ends the process itself; anything else is a failure to start


def _write_traceback(fd: int) -> None:
    """The exception being handled, written to `fd` with its traceback: os._exit, which ends a
    child that failed, skips the interpreter's own report of it."""
    try:
        os.write(fd, traceback.format_exc().encode(errors="replace"))
    except OSError:   # nowhere left to say it
        pass


def main() -> None:
    sock = socket.socket(fileno=int(sys.argv[1]))
    _serve(sock, warm=sys.argv[2:] == ["warm"])


# -- the harness's side ------------------------------------------------------------------------


class ForkedProcess:
    """What the harness uses of `subprocess.Popen`, for a worker forked by the server."""

    def __init__(self, pid: int, stdin, status_fd: int):
        self.pid = pid
        self.stdin = stdin
        self.returncode: int | None = None
        self._status = status_fd
        self._lock = threading.Lock()   # the harness polls while a reaper thread waits

    def poll(self) -> int | None:
        return self.wait(0) if self.returncode is None else self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            return self._timed_out(timeout)
        try:
            if self.returncode is None:
                ready, _, _ = select.select([self._status], [], [], timeout)
                if not ready:
                    return self._timed_out(timeout)
                text = os.read(self._status, 64).decode().strip()
                os.close(self._status)
                self.returncode = int(text) if text else -signal.SIGKILL   # the server died with it
            return self.returncode
        finally:
            self._lock.release()

    def _timed_out(self, timeout: float | None) -> None:
        if timeout == 0:   # poll()
            return None
        raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout)

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class _Server:
    def __init__(self, env: dict, warm: bool):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen([sys.executable, "-m", "cuda_agent.env.infra.forkserver", str(theirs.fileno()),
                                      *(["warm"] if warm else [])],
                                     pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        theirs.close()
        self.sock = ours
        self.lock = threading.Lock()

    def fork(self, role: str, env: dict, cwd: str, protocol_fd: int, log_fd: int,
             staging_fd: int | None = None, fd_env: str = STAGING_FD_ENV) -> ForkedProcess:
        stdin_read, stdin_write = os.pipe()
        status_read, status_write = os.pipe()
        try:
            with self.lock:
                socket.send_fds(self.sock, [json.dumps({"role": role, "env": env, "cwd": cwd, "fd_env": fd_env}).encode()],
                                [stdin_read, protocol_fd, log_fd, status_write,
                                 *([staging_fd] if staging_fd is not None else [])])
                answer = self.sock.recv(64)
            if not answer:
                raise OSError("the fork server stopped")
        except BaseException:
            os.close(stdin_write)
            os.close(status_read)
            raise
        finally:
            os.close(stdin_read)
            os.close(status_write)
        return ForkedProcess(int(answer), os.fdopen(stdin_write, "wb"), status_read)


_servers: dict = {}   # device -> its server (None: the CPU's, or a harness with one device)
_servers_lock = threading.Lock()


def fork_worker(role: str, env: dict, cwd, protocol_fd: int, log_fd: int,
                staging_fd: int | None = None, device: int | None = None,
                fd_env: str = STAGING_FD_ENV, server_env: dict | None = None) -> ForkedProcess:
    """Fork a worker with this environment and folder from `device`'s server (started on first use,
    with `server_env`, else `env`: the import path the worker needs). One server per device, so one
    device's forks never wait behind another's (a server forks one request at a time). `staging_fd`
    reaches the worker under `fd_env` (STAGING_FD_ENV, or HANDOVER_FD_ENV for a persistent judge's
    socket). The caller keeps (and closes) its own descriptors."""
    with _servers_lock:
        server = _servers.get(device)
        if server is None or server.proc.poll() is not None:
            server = _servers[device] = _Server(server_env or env, warm=device is None)
    return server.fork(role, env, str(cwd), protocol_fd, log_fd, staging_fd, fd_env)


if __name__ == "__main__":
    main()
