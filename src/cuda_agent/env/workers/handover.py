"""A persistent judge's jobs, one after another (CUDA_AGENT_PERSISTENT_JUDGE=1: infra/judges.py).

A persistent judge is started with one end of a socketpair (its number in HANDOVER_FD_ENV) and no
staging file. Before each job the harness sends it that evaluation's staging file over the socket
(SCM_RIGHTS: `hand_staging`), then the JudgeJob on the channel; after the evaluation, `NextJob`
instead of a kill. The judge then lets go of everything of the job (judge.py's `_Judge.drop`: the
model, its compiled twin, drawn inputs, the staging mapping and the device slot) and answers
`Dropped`; a job that left doubt about the process (`leaves_doubt`) answers not ok, and the harness
kills it. The judge never runs candidate code: all it could carry over of a candidate is the bytes
it read from the shared files, which go with the job.
"""

from __future__ import annotations

import os
import socket

import torch

from cuda_agent.env.workers.protocol import HANDOVER_FD_ENV
from cuda_agent.env.workers.transfer import Staging

_STAGING, _NO_STAGING = b"staging", b"none"


def handover_pair() -> tuple[socket.socket, socket.socket]:
    """(the harness's end, the judge's end) of a persistent judge's socket."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def hand_staging(sock: socket.socket, fd: int | None) -> None:
    """The harness's: the next job's staging file (None: the job has none) to the waiting judge."""
    if fd is None:
        sock.sendall(_NO_STAGING)
    else:
        socket.send_fds(sock, [_STAGING], [fd])


class Handover:
    """The judge's end of the socket."""

    def __init__(self, fd: int):
        self.sock = socket.socket(fileno=fd)

    @classmethod
    def from_environment(cls) -> "Handover | None":
        """The judge's socket when it is a persistent one (its variable is removed either way)."""
        fd = os.environ.pop(HANDOVER_FD_ENV, None)
        return cls(int(fd)) if fd is not None else None

    def staging(self) -> Staging | None:
        """This job's staging file from the harness (None: outputs go through files). EOFError: the
        harness is gone."""
        data, fds, _, _ = socket.recv_fds(self.sock, 64, 1)
        if not data:
            raise EOFError("the harness closed the handover socket")
        if data != _STAGING or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            return None
        try:
            return Staging(fds[0])   # closes the descriptor; the mapping stays until the job is dropped
        except (OSError, ValueError):
            return None


def leaves_doubt(answer) -> str | None:
    """Why a judge's answer leaves its process unfit for another job (the task's code failed, or
    torch.compile, the profiler or a CUDA graph did: each may leave state behind), or None."""
    if any(getattr(item, "task_error", None) for item in getattr(answer, "answers", None) or [answer]):
        return "the task failed"
    error = getattr(answer, "error", None)
    return f"{type(answer).__name__}: {str(error)[:200]}" if error else None


def _setting(owner, name: str):
    return (lambda: getattr(owner, name)), (lambda value: setattr(owner, name, value))


def _deterministic():
    return torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()


def _anomaly():
    return torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()


# name -> (read it, set it): process-wide torch settings a task's module may change
_SETTINGS = {
    "default_dtype": (torch.get_default_dtype, torch.set_default_dtype),
    "default_device": (torch.get_default_device, torch.set_default_device),
    "grad": (torch.is_grad_enabled, torch.set_grad_enabled),
    "matmul_precision": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
    "matmul_tf32": _setting(torch.backends.cuda.matmul, "allow_tf32"),
    "cudnn_tf32": _setting(torch.backends.cudnn, "allow_tf32"),
    "cudnn_benchmark": _setting(torch.backends.cudnn, "benchmark"),
    "cudnn_deterministic": _setting(torch.backends.cudnn, "deterministic"),
    # its setter imports torch._inductor's config, most of a second the first time: set only if changed
    "deterministic": (_deterministic, lambda value: torch.use_deterministic_algorithms(value[0], warn_only=value[1])),
    "anomaly": (_anomaly, lambda value: torch.set_anomaly_enabled(*value)),
    "threads": (torch.get_num_threads, torch.set_num_threads),
}


class TorchSettings:
    """Process-wide torch settings a task's module may change, taken before a job and put back after
    (those changed), so that the next task's reference runs as in a fresh judge. Denormals are flushed
    to zero in no fresh judge (a setting torch cannot read back): always put back off."""

    def __init__(self):
        self.values = {name: read() for name, (read, _) in _SETTINGS.items()}

    def restore(self) -> None:
        for name, (read, write) in _SETTINGS.items():
            if read() != self.values[name]:
                write(self.values[name])
        torch.set_flush_denormal(False)


_kept: dict[str, tuple] = {}   # kind -> (its key, the object)


def kept(kind: str, key, make):
    """The object of `kind` an earlier job of this judge made for `key`, else `make()` (kept for the
    next job): what a persistent judge keeps between jobs (the device lock, the hold's library, the L2
    flusher's buffer), none of it the task's or the candidate's."""
    held = _kept.get(kind)
    if held is None or held[0] != key:
        held = _kept[kind] = (key, make())
    return held[1]
