"""The judge's loop (`python -m cuda_agent.env.workers judge`): its job, then the harness's commands
(judge.py's HANDLERS) until one it has no handler for. A persistent judge (handover.py) goes on to
the next job after each `NextJob`, for as long as every job leaves it fit for another."""

from __future__ import annotations

import torch

from cuda_agent.env.workers.common import short_traceback
from cuda_agent.env.workers.handover import Handover, TorchSettings, leaves_doubt
from cuda_agent.env.workers.judge import HANDLERS, _Judge
from cuda_agent.env.workers.messages import Dropped, JudgeJob, JudgeSetUp, NextJob, UnknownMessage, read_command
from cuda_agent.env.workers.protocol import ChildChannel
from cuda_agent.env.workers.transfer import Staging

_NEXT_JOB = NextJob.model_fields["cmd"].default


def run_judge(chan: ChildChannel) -> None:
    handover = Handover.from_environment()   # None: one job, then the process ends
    settings = TorchSettings() if handover is not None else None
    while True:
        job = JudgeJob.model_validate(chan.receive())
        staging = handover.staging() if handover is not None else Staging.from_environment()
        judge, doubt = _serve(chan, job, staging, persistent=handover is not None)
        if judge is None:   # its task failed, or the harness sent anything but NextJob
            return
        try:
            judge.drop()
            del judge
            settings.restore()
        except Exception as exc:
            doubt = doubt or f"its job could not be let go ({type(exc).__name__}: {str(exc)[:200]})"
        chan.send(Dropped(ok=doubt is None, message=doubt))
        if doubt is not None:
            return


def _serve(chan: ChildChannel, job: JudgeJob, staging: Staging | None, persistent: bool):
    """One job: (the judge, why it is unfit for another job or None) once the harness sent NextJob
    (persistent judges only); (None, None) when the job ended otherwise."""
    try:
        judge = _Judge(job, staging)
    except Exception as exc:  # the task itself is broken
        chan.send(JudgeSetUp(ok=False, message=f"{type(exc).__name__}: {exc}\n{short_traceback(exc)}"))
        return None, None
    name = torch.cuda.get_device_name(judge.device) if judge.device.type == "cuda" else "cpu"
    chan.send(JudgeSetUp(ok=True, device=name, output_bytes=judge.output_bytes, input_bytes=judge.input_bytes,
                         slot_bytes=judge.staging.slot_bytes if judge.staging is not None else 0,
                         device_slot=judge.device_slot is not None, device_slot_error=judge.device_slot_error))
    doubt = None
    while True:
        raw = chan.receive()
        if persistent and isinstance(raw, dict) and raw.get("cmd") == _NEXT_JOB:
            return judge, doubt
        try:
            cmd = read_command(raw, HANDLERS)
        except UnknownMessage:
            return None, None
        answer = HANDLERS[type(cmd)](judge, cmd)
        doubt = doubt or leaves_doubt(answer)
        chan.send(answer)
