"""Whether a task's tensors fit this machine, decided before any process starts.

The bytes an evaluation holds at once are `memory.evaluation_memory`'s (the judge, the candidate,
what passes between them; activations come on top, so a lower bound); held against the memory this machine has free
less a tenth for headroom, they turn an out-of-memory kill minutes into a run into a refusal naming
the sizes and a `--scale` that fits. The footprint is measured in a child process (infra/task_child.py):
a task whose code exits, crashes or hangs there raises TaskError from these checks.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from cuda_agent.env.infra.memory import EvalMemory, evaluation_memory
from cuda_agent.env.infra.task_child import estimate_footprint
from cuda_agent.tasks.footprint import Footprint, human_bytes
from cuda_agent.tasks.task import Task, TaskError

LARGE_SHARE = 0.25                    # of a GPU: an evaluation this large waits for the last one's exit
HEADROOM = 0.9                        # of the available memory, an evaluation may plan to use
TRY_SCALES = (0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625)


def needed_bytes(fp: Footprint, backend: str, trials: int) -> EvalMemory:
    """The host and device bytes one evaluation holds at once (the memory model)."""
    return evaluation_memory(fp, backend, trials)


def host_available() -> int | None:
    """Bytes the kernel would still hand out: MemAvailable, capped by a cgroup limit."""
    try:
        meminfo = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in meminfo.splitlines() if ":" in line)
    if "MemAvailable" not in fields:
        return None
    available = int(fields["MemAvailable"].split()[0]) * 1024
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            limit, usage = Path(limit_file).read_text().strip(), Path(usage_file).read_text().strip()
        except OSError:
            continue
        if limit.isdigit() and usage.isdigit() and int(limit) < (1 << 60):
            available = min(available, int(limit) - int(usage))
        break
    return available


def device_available(gpu: int = 0) -> int | None:
    """The GPU's total memory (asking for free memory would create a CUDA context in this process)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return int(torch.cuda.get_device_properties(gpu).total_memory)
    except Exception:
        return None


def takes_much_of_gpu(task: Task, trials: int, gpu: int | None) -> bool:
    """Whether an evaluation of `task` on `gpu` holds more than LARGE_SHARE of its memory (the model's
    device bytes): such an evaluation starts only once the workers killed before it are gone (teardown.py)."""
    fp = estimate_footprint(task, "cuda", gpu)
    total = device_available(gpu or 0)
    return fp is not None and total is not None and needed_bytes(fp, "cuda", trials).device > LARGE_SHARE * total


def _shortfall(need: EvalMemory, host: int | None, device: int | None) -> tuple[str, int, int] | None:
    """(what, needed, available) for the first memory that is too small, else None."""
    if device is not None and need.device > HEADROOM * device:
        return "GPU memory", need.device, device
    if host is not None and need.host > HEADROOM * host:
        return "memory", need.host, host
    return None


def too_large(task: Task, backend: str, trials: int, *, host: int | None = None, device: int | None = None,
              measure_machine: bool = True, gpu: int | None = None) -> str | None:
    """A message saying why `task` cannot be evaluated here (sizes, memory, a --scale that fits), or None
    (`gpu`: the device whose judges' fork server measures it)."""
    fp = estimate_footprint(task, backend, gpu)
    if fp is None:
        return None
    if measure_machine:
        host = host if host is not None else host_available()
        device = device if device is not None or backend != "cuda" else device_available()
    short = _shortfall(needed_bytes(fp, backend, trials), host, device)
    if short is None:
        return None
    what, need, have = short
    out = human_bytes(fp.output_bytes) if fp.output_bytes is not None else "unknown"
    message = (f"{task.name} is too large for this machine: one input set is {human_bytes(fp.input_bytes)}, "
               f"one output {out}, the weights {human_bytes(fp.param_bytes or 0)}; evaluating it holds at least "
               f"{human_bytes(need)} of {what} at once (the judge and the candidate at their peaks) and "
               f"{human_bytes(have)} is available.")
    scale = fitting_scale(task, backend, trials, host, device, gpu)
    if scale is None:
        return message + f" Use a machine with more memory ({_why_no_scale(task, backend, gpu)})."
    return message + (f" Shrink its inputs with --scale {scale[0]:g} (one input set then {human_bytes(scale[1])}; "
                      "the shapes keep their structure), or use a bigger machine.")


def _why_no_scale(task: Task, backend: str, gpu: int | None) -> str:
    from cuda_agent.tasks.scale import scale_task

    try:
        scale_task(task, TRY_SCALES[0], partial(estimate_footprint, backend=backend, gpu=gpu))
    except (TaskError, ValueError) as exc:
        return f"--scale cannot shrink it: {exc}"
    return f"not even --scale {TRY_SCALES[-1]:g} makes it fit"


def fitting_scale(task: Task, backend: str, trials: int, host: int | None,
                  device: int | None, gpu: int | None = None) -> tuple[float, int] | None:
    """The largest of TRY_SCALES at which `task` fits, with its input bytes there."""
    from cuda_agent.tasks.scale import scale_task

    for factor in TRY_SCALES:
        try:
            scaled = scale_task(task, factor, partial(estimate_footprint, backend=backend, gpu=gpu)).task
            fp = estimate_footprint(scaled, backend, gpu)
        except (TaskError, ValueError):
            return None
        if fp is not None and _shortfall(needed_bytes(fp, backend, trials), host, device) is None:
            return factor, fp.input_bytes
    return None
