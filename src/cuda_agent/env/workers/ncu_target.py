"""The process Nsight Compute profiles (`profile --ncu`: env/run/ncu_run.py), inside the candidate's
sandbox: `python -m cuda_agent.env.workers.ncu_target JOB.json`.

It loads the solution as the candidate worker does (load_candidate: the harness's builds, handed into
the box), makes `ModelNew` on one draw of the task's inputs, calls forward twice to warm it, then
`calls` times inside the NVTX range that ncu is told to profile. A load_inline/load call whose build
the harness has not handed in yet is written to `build_requests.json` and the process exits with
NEEDS_BUILD: the harness builds it (the same build an evaluation serves) and starts this again.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

NEEDS_BUILD = 3
REQUESTS = "build_requests.json"


def build_key(name: str, files: dict, flags: dict) -> str:
    """A build request's identity: the same sources and flags are the same build."""
    return hashlib.sha256(json.dumps([name, files, flags], sort_keys=True).encode()).hexdigest()[:24]


class _NeedsBuild(Exception):
    pass


def main(job_path: str) -> int:
    import torch

    from cuda_agent.env.measure.ncu import RANGE
    from cuda_agent.env.workers.candidate import load_candidate
    from cuda_agent.env.workers.draws import draw_inputs
    from cuda_agent.tasks.task import load_task_module

    job = json.loads(Path(job_path).read_text())
    box = Path(job_path).parent
    requests = []

    def build(name: str, files: dict, **flags) -> Path:
        handed = job["builds"].get(build_key(name, files, flags))
        if handed:
            return Path(handed)
        requests.append({"request": "build", "name": name, "files": files, **flags})
        raise _NeedsBuild(name)

    try:
        model_class, _ = load_candidate(Path(job["solution_dir"]), build, job["prebuilt"])
    except _NeedsBuild:
        (box / REQUESTS).write_text(json.dumps(requests))
        return NEEDS_BUILD
    device = torch.device("cuda")
    task = load_task_module(job["task_code"], "reference_task", filename="<task>")
    torch.manual_seed(job["seed"])
    model = model_class(*list(task.get_init_inputs())).to(device).eval()
    inputs = draw_inputs(task, job["seed"], device)
    with torch.no_grad():
        for _ in range(2):   # lazily loaded kernels, the allocator's first blocks: not profiled
            model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(RANGE)
        for _ in range(job["calls"]):
            model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
