"""A harness process per device: the evaluations of one GPU run in its own interpreter.

An evaluation's harness side is Python (it sends each call, reads outputs, keeps the statistics)
and its timed calls wait on it. With every GPU's evaluations in one process, their threads share
one interpreter lock, so a second GPU's evaluations delay the first's. `EvalPool` therefore starts
one `DeviceHost` per GPU when it has several: a spawned process running `evaluate` in as many threads
as the device has evaluations in flight, answering over a pipe.
"""

from __future__ import annotations

import multiprocessing
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import count


class DeviceHostDied(RuntimeError):
    """The device's harness process ended while evaluations were waiting on it."""


def _serve(conn, device: int | None, threads: int) -> None:
    """In the host process: evaluate what arrives, answer each request as it finishes, in any order."""
    from cuda_agent.env.run.evaluation import evaluate   # the child imports the harness once

    send_lock = threading.Lock()

    def answer(request_id: int, future: Future) -> None:
        error = future.exception()
        message = (request_id, None, _portable(error)) if error else (request_id, future.result(), None)
        with send_lock:
            conn.send(message)

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"device-{device}") as executor:
        while True:
            try:
                request = conn.recv()
            except EOFError:
                break
            if request is None:
                break
            request_id, task, solution, config = request
            future = executor.submit(evaluate, task, solution, config, gpu=device)
            future.add_done_callback(lambda done, rid=request_id: answer(rid, done))
    conn.close()


def _portable(error: BaseException) -> BaseException:
    """The exception itself where it pickles, else its type and text in a RuntimeError."""
    import pickle

    try:
        pickle.dumps(error)
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")


class DeviceHost:
    """The parent's handle on one device's harness process."""

    def __init__(self, device: int | None, threads: int):
        context = multiprocessing.get_context("spawn")   # no fork of a process that runs threads
        self._conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, device, threads),
                                       name=f"cuda-agent-device-{device}", daemon=True)
        self.process.start()
        child.close()
        self._ids = count()
        self._waiting: dict[int, Future] = {}
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name=f"device-{device}-answers", daemon=True)
        self._reader.start()

    def submit(self, task, solution, config) -> Future:
        future: Future = Future()
        with self._lock:
            if not self.process.is_alive():
                raise DeviceHostDied(f"the harness process of device {self.process.name} is not running")
            request_id = next(self._ids)
            try:
                self._conn.send((request_id, task, solution, config))
            except OSError as exc:   # it died after the check (BrokenPipeError): the same answer as before it
                raise DeviceHostDied(f"the harness process of device {self.process.name} is not running "
                                     f"({exc})") from None
            self._waiting[request_id] = future
        return future

    def _read(self) -> None:
        while True:
            try:
                request_id, result, error = self._conn.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                future = self._waiting.pop(request_id)
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)
        with self._lock:
            orphans, self._waiting = list(self._waiting.values()), {}
        code = self.process.exitcode
        for future in orphans:
            future.set_exception(DeviceHostDied(f"{self.process.name} ended (exit code {code}) before "
                                                "answering; its evaluations were lost, submit them again"))

    def close(self, timeout: float = 60.0) -> None:
        """Ask the process to finish what it runs and stop; end it if it does not within `timeout`."""
        if self.process.is_alive():
            try:
                with self._lock:
                    self._conn.send(None)
            except OSError:
                pass
            self.process.join(timeout)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(5)
        self._conn.close()
