"""The work a task asks for, from its reference: the FLOPs of one forward and the fewest bytes it moves.

Found for the harness, never by the candidate, on PyTorch's `meta` device (as tasks/footprint.py finds
the task's memory), in a child process of its own (env/infra/task_child.py): the task's `get_inputs()`,
`Model` and one forward run on tensors without storage, so a large task costs nothing to measure, and
the figures depend on the task's source alone (kept per task code). FLOPs are `torch.utils.flop_counter.FlopCounterMode`'s count of that
forward: matmuls, convolutions and attention; elementwise operations and reductions count nothing, so
such a task has no FLOPs and the memory bound alone decides. The fewest bytes: every input tensor,
parameter and buffer read once, every output tensor written once (elements x itemsize). A task that
cannot run on meta (a data-dependent shape, `.item()`, an explicit device) has no work figures.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass

from cuda_agent.tasks.task import Task, load_task_module

_counter = itertools.count()


@dataclass(frozen=True)
class Work:
    flops: int | None   # None: the counter counted nothing (no matmul, convolution or attention)
    bytes: int          # inputs, parameters and buffers read once, outputs written once
    dtype: str          # the floating dtype holding most of those bytes ("float32", "bfloat16", ...)


def work_of(read: list, written: list, flops: int) -> Work:
    """The work of a forward that reads the tensors `read`, writes `written` and counted `flops`."""
    # a tensor passed twice is read once; one both read and written (in place) counts on both sides
    unique = list({id(t): t for t in read}.values()) + list({id(t): t for t in written}.values())
    sizes: dict[str, int] = {}
    for t in unique:
        if t.is_floating_point():
            name = str(t.dtype).removeprefix("torch.")
            sizes[name] = sizes.get(name, 0) + t.numel() * t.element_size()
    return Work(flops=flops or None, bytes=sum(t.numel() * t.element_size() for t in unique),
                dtype=max(sizes, key=sizes.get) if sizes else "float32")


def task_work(task: Task, backend: str | None = None, gpu: int | None = None) -> Work | None:
    """The work of one forward of `task`'s reference on its inputs, or None where it cannot run on meta.
    Measured in a child process (env/infra/task_child.py), once per task code; raises TaskError when the
    task's code exits, crashes or does not finish there."""
    from cuda_agent.env.infra.task_child import measured

    return measured("work", task, backend, gpu)


def measure_work(task: Task) -> Work | None:
    """`task_work`'s measurement, in this process: it runs the task's code, so only in a process of its own."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from cuda_agent.env.rules.verify import tensors_in

    name = f"_cuda_agent_work_{next(_counter)}"
    try:
        with torch.device("meta"):
            module = load_task_module(task.code, name, task.origin or task.name)
            inputs = module.get_inputs()
            model = module.Model(*module.get_init_inputs())
            counter = FlopCounterMode(display=False)
            with torch.no_grad(), counter:
                output = model(*inputs)
        weights = list(itertools.chain(model.parameters(), model.buffers()))
        return work_of(tensors_in(inputs) + weights, tensors_in(output), int(counter.get_total_flops()))
    except Exception:
        return None
    finally:
        sys.modules.pop(name, None)
