"""A worker process's entry (`python -m cuda_agent.env.workers judge|candidate`, or a judge forked by
infra/forkserver.py): its device set up, its ready message, then the role's loop (judge_jobs.py,
candidate.py), each driven call by call by the harness (env/run/evaluation.py), which alone knows
the schedule. Each gets a fresh process per evaluation (a persistent judge, CUDA_AGENT_PERSISTENT_JUDGE=1,
serves several in turn: handover.py).
The role `measure` is no worker of an evaluation: a child in which the harness has the task's code
measured on the meta device (measure.py).

Both roles' modules are imported here, before any job arrives: the candidate's bindings are made
before the solution's code runs, and the fork server's judges start with everything imported.
"""

from __future__ import annotations

import importlib
import os
import sys
import time

import torch

from cuda_agent.env.measure import timing  # captures clocks and sync before candidate code can patch them
from cuda_agent.env.workers import common
from cuda_agent.env.workers.common import device_of
from cuda_agent.env.workers.candidate import run_candidate
from cuda_agent.env.workers.judge_jobs import run_judge
from cuda_agent.env.workers.messages import Ready
from cuda_agent.env.workers.protocol import ChildChannel


def warm_harness_kernels(device: torch.device) -> None:
    """The harness's own device work once on a few elements, before any job: CUDA loads each kernel
    at its first launch (milliseconds each, waiting for the device), which would otherwise happen in
    an evaluation's first calls while they hold the device's lock. Like creating the CUDA context, this
    runs without the lock: a few kernels on 64 elements, once per worker."""
    from cuda_agent.env.workers.draws import TRANSFORMS, structured
    from cuda_agent.env.rules.guard import InputSentinel
    from cuda_agent.env.rules.samples import take_samples
    from cuda_agent.env.rules.verify import Tolerance, compare_outputs, output_scale

    x = torch.randn(64, device=device)
    for transform in TRANSFORMS:                                        # the structured input sets
        structured([x], transform, seed=1)
    torch.empty(64, device=device).fill_(float("nan"))                  # the allocator's poison
    out = torch.relu(x)
    take_samples(out, count=16)                                         # random positions, gather, copy back
    for full in (True, False):                                          # the input sentinel, both kinds
        InputSentinel([x], full=full).changed()
    compare_outputs(out, out.clone(), Tolerance(relative_to_scale=True))  # the judge's comparison
    compare_outputs(out, out + 1, Tolerance())
    output_scale(out)
    bool(torch.isfinite(out).all())
    timing.device_synchronize(device)


def main() -> None:
    import faulthandler

    common.TRACE_CALLS = os.environ.get("CUDA_AGENT_TRACE_CALLS") == "1"
    common.TRACE_HEAP = common.TRACE_CALLS and os.environ.get("CUDA_AGENT_TRACE_HEAP") == "1"
    faulthandler.enable()  # a crashing kernel leaves the Python stack that called it in the log
    role = sys.argv[1]
    if role == "measure":   # the task's code measured on meta for the harness: no device, no channel
        from cuda_agent.env.workers.measure import child_main

        child_main()
    chan = ChildChannel()
    started = time.monotonic()
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:   # the worker's setting (isolation.worker_env), also in a
        torch.set_num_threads(int(threads))       # judge forked after the server imported torch
    if os.environ.get("CUDA_AGENT_WORKER_BACKEND") == "cuda" and torch.cuda.is_available():
        torch.empty(1, device="cuda")  # create the context now, while no job waits for us
        warm_harness_kernels(torch.device("cuda"))
    if role == "candidate":   # PyTorch's thread pools started before Ready: the harness counts the threads
        from cuda_agent.env.rules.guard import warm_harness_threads   # alive then as its own (call_verdict.py)

        warm_harness_threads(device_of(os.environ.get("CUDA_AGENT_WORKER_BACKEND", "cpu")))
        # the extension loaders its builder takes over when the solution loads (builds/inline.py): an import
        # of a tenth of a second, made here rather than on an edit's path
        importlib.import_module("torch.utils.cpp_extension")
    chan.send(Ready(ready=True, pid=os.getpid(), device_setup=[started, time.monotonic()]))
    try:
        (run_judge if role == "judge" else run_candidate)(chan)
    except EOFError:
        pass
    # Skip interpreter teardown: candidate extensions and threads may hang or crash in it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
