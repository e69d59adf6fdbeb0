"""A sandboxed candidate's start: started afresh (bubblewrap, then Python importing torch) against
forked from the sandboxed zygote (CUDA_AGENT_CANDIDATE_ZYGOTE=1, env/infra/zygote.py), in one run.

Each start is `start_worker("candidate", ...)` inside the sandbox up to its Ready message, in a job
folder of its own; the two ways alternate (fresh, zygote, then zygote, fresh, ...) so that a load that
comes and goes falls on both alike. Printed per way: the wall seconds to Ready (median, min, max) and the
candidate process's own CPU seconds at Ready (all its threads, read from /proc: for a forked one, what
it did after the fork; the zygote's one import is reported apart, as the first zygote start's wall).

    python benchmarks/candidate_start.py [--backend cpu|cuda] [--gpu 0] [--starts 5] [--json out.json]

On the GPU machine: `python benchmarks/candidate_start.py --backend cuda --gpu 0` (a CUDA candidate
creates its context after the fork, so the context's set-up stays in both ways' figures).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from cuda_agent.env.config import EvalConfig  # noqa: E402
from cuda_agent.env.infra.isolation import box_of, start_worker  # noqa: E402
from cuda_agent.env.infra.sandbox import sandbox_prefix  # noqa: E402
from cuda_agent.env.infra.zygote import ENV  # noqa: E402
from cuda_agent.env.run.worker_run import job_root  # noqa: E402


def one_start(backend: str, gpu: int | None, zygote: bool) -> dict:
    os.environ[ENV] = "1" if zygote else "0"
    job = Path(tempfile.mkdtemp(prefix="cuda-agent-job-", dir=job_root()))
    try:
        box = box_of(job)
        box.mkdir(parents=True)
        wrap = sandbox_prefix(EvalConfig(backend=backend), box)
        began = time.perf_counter()
        worker = start_worker("candidate", job, backend, gpu, wrap)
        worker.wait_ready()
        wall = time.perf_counter() - began
        cpu = worker.cpu_seconds()
        notes = list(worker.notes)
        worker.kill()
        return {"wall_s": wall, "cpu_s": cpu, "notes": notes}
    finally:
        shutil.rmtree(job, ignore_errors=True)


def summary(starts: list[dict]) -> dict:
    walls = [s["wall_s"] for s in starts]
    cpus = [s["cpu_s"] for s in starts if s["cpu_s"] is not None]
    return {"starts": len(starts), "wall_median_s": statistics.median(walls), "wall_min_s": min(walls),
            "wall_max_s": max(walls), "cpu_median_s": statistics.median(cpus) if cpus else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--gpu", type=int, default=None)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    gpu = args.gpu if args.backend == "cuda" else None

    first = one_start(args.backend, gpu, zygote=True)   # the zygote starts: its import, once
    if first["notes"]:
        sys.exit(f"the zygote is unavailable here: {first['notes']}")
    runs: dict[str, list[dict]] = {"fresh": [], "zygote": []}
    for i in range(args.starts):
        order = ("fresh", "zygote") if i % 2 == 0 else ("zygote", "fresh")
        for way in order:
            runs[way].append(one_start(args.backend, gpu, zygote=way == "zygote"))
    report = {"backend": args.backend, "zygote_first_start_wall_s": first["wall_s"],
              **{way: summary(starts) for way, starts in runs.items()}}
    print(f"backend {args.backend}: the zygote's first start (its import included) {first['wall_s']:.3f} s")
    for way in ("fresh", "zygote"):
        s = report[way]
        cpu = f"{s['cpu_median_s']:.3f}" if s["cpu_median_s"] is not None else "n/a"
        print(f"  {way:6s}: wall median {s['wall_median_s']:.3f} s (min {s['wall_min_s']:.3f}, "
              f"max {s['wall_max_s']:.3f}), candidate CPU median {cpu} s, {s['starts']} starts")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
