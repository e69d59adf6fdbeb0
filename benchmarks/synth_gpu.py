"""Run the synthesis pipeline on CUDA for a time budget and project the cost of 6,000 tasks.

    python benchmarks/synth_gpu.py --num 200 --budget-seconds 1200 --out /tmp/synth-gpu \
        --kernelbench ../shared/kernelbench

Runs `cuda-agent synth --backend cuda` (its default workers, or --workers N; several workers share
a GPU) in a child process, stops it when the budget is spent (the run is resumable: rerun to
continue), then reads the run's journals and prints the per-task cost (worker-seconds per filtered
and per written task, split by outcome), the filter workers' memory (the largest RSS after a task and
during one, from the records of this run) and the projected wall time for 6,000 written tasks on this
machine and on N such machines.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path


def pipeline_command(args) -> list[str]:
    """The `cuda-agent synth` command line this script runs."""
    cmd = [sys.executable, "-m", "cuda_agent.cli", "synth", "--num", str(args.num), "--out", str(args.out),
           "--backend", "cuda", "--seed", str(args.seed), "--no-progress"]
    if args.kernelbench:
        cmd += ["--kernelbench", str(args.kernelbench)]
    if args.workers:
        cmd += ["--workers", str(args.workers)]
    if args.window:
        cmd += ["--window", args.window]
    if args.ray:
        cmd += ["--ray", args.ray]
    if args.timeout:
        cmd += ["--timeout", str(args.timeout)]
    return cmd


def run_pipeline(args) -> float:
    cmd = pipeline_command(args)
    print("running:", " ".join(cmd), flush=True)
    start = time.monotonic()
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        proc.wait(timeout=args.budget_seconds)
    except subprocess.TimeoutExpired:
        print(f"budget of {args.budget_seconds:.0f} s spent: stopping (finished work is kept)", flush=True)
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return time.monotonic() - start


def workers_memory(results: list[dict], since: float | None = None) -> dict:
    """The filter workers' memory in the records that came back since `since` (time.time(); None: all):
    the largest RSS after a task and during one (MiB), and the task of the latter."""
    from cuda_agent.synth.workers import PEAK_FIELD, RSS_FIELD

    mine = [r for r in results if since is None or r.get("at", 0) >= since]
    after = [r[RSS_FIELD] for r in mine if r.get(RSS_FIELD) is not None]
    during = [r for r in mine if r.get(PEAK_FIELD) is not None]
    if not after and not during:
        return {}
    top = max(during, key=lambda r: r[PEAK_FIELD]) if during else None
    return {"tasks": len(after), "rss_after_task_max_mb": max(after, default=None),
            "rss_after_task_median_mb": statistics.median(after) if after else None,
            "peak_mb": top[PEAK_FIELD] if top else None, "peak_task": top["id"] if top else None}


def report(out: Path, wall_s: float, workers: int, gpus_here: int, target: int = 6000,
           machines: tuple = (8, 16), since: float | None = None) -> dict:
    work = out / "work"
    candidates = [json.loads(x) for x in (work / "candidates.jsonl").read_text().splitlines() if x.strip()]
    results = [json.loads(x) for x in (work / "results.jsonl").read_text().splitlines() if x.strip()]
    if not results:
        print("no task was filtered yet: give it a larger --budget-seconds")
        return {}
    by_reason = defaultdict(list)
    for r in results:
        by_reason["passed" if r["ok"] else r["reason"]].append(r.get("seconds", 0.0))
    busy = sum(sum(v) for v in by_reason.values())
    passed = len(by_reason["passed"])
    print(f"\n{len(candidates)} candidates composed, {len(results)} filtered, {passed} passed "
          f"({wall_s:.0f} s wall, {workers} worker(s) on {gpus_here} GPU(s))")
    print(f"{'outcome':24s} {'tasks':>6s} {'mean s':>8s} {'median s':>9s} {'total s':>9s}")
    for reason, secs in sorted(by_reason.items(), key=lambda kv: -sum(kv[1])):
        print(f"{reason:24s} {len(secs):6d} {statistics.fmean(secs):8.2f} {statistics.median(secs):9.2f} "
              f"{sum(secs):9.1f}")
    per_filtered = busy / len(results)
    per_written = busy / max(passed, 1)
    eager = [r["eager_ms"] for r in results if r["ok"]]
    compiled = [r["compile_ms"] for r in results if r["ok"] and r.get("compile_ms")]
    # a worker's time is mostly CPU (torch.compile, shape checks) with short GPU timings
    print(f"\nworker-seconds per filtered task: {per_filtered:.2f}; per written task: {per_written:.2f} "
          f"(pass rate {passed / len(results):.1%})")
    if eager:
        print(f"written tasks: eager median {statistics.median(eager):.3g} ms, "
              f"torch.compile median {statistics.median(compiled):.3g} ms" if compiled else "")
    memory = workers_memory(results, since)
    if memory:
        gib = lambda mb: f"{mb / 1024:.2f} GiB" if mb is not None else "-"  # noqa: E731
        print(f"filter workers' memory over {memory['tasks']} tasks: RSS after a task median "
              f"{gib(memory['rss_after_task_median_mb'])}, max {gib(memory['rss_after_task_max_mb'])}; "
              f"peak during a task {gib(memory['peak_mb'])} ({memory['peak_task']})")
    else:
        print("filter workers' memory: not in the records (a run from before they carried it)")
    # the observed rate is this run's: a resumed run's journals hold the earlier parts' tasks too
    passed_here = passed if since is None else sum(1 for r in results if r["ok"] and r.get("at", 0) >= since)
    rate = passed_here / wall_s if wall_s > 0 else 0.0
    if since is not None:
        print(f"this run: {passed_here} passed in {wall_s:.0f} s")
    projection = {"worker_seconds_per_written_task": per_written, "observed_tasks_per_hour": rate * 3600,
                  "workers": workers, "gpus": gpus_here, "workers_memory": memory}
    if rate:
        hours = target / rate / 3600
        projection["hours_on_this_machine"] = hours
        print(f"projected wall time for {target} tasks on this machine: {hours:.2f} h "
              "(observed rate, start-up included)")
        for n in machines:
            projection[f"hours_on_{n}_such_machines"] = hours / n
            print(f"projected wall time for {target} tasks on {n} such machines (Ray): {hours / n:.2f} h")
    return projection


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num", type=int, default=200, help="tasks to ask for")
    parser.add_argument("--budget-seconds", type=float, default=1800, help="stop the run after this long")
    parser.add_argument("--out", type=Path, default=Path("synth-gpu-run"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kernelbench", type=Path, default=None,
                        help="KernelBench folder (default $CUDA_AGENT_KERNELBENCH)")
    parser.add_argument("--workers", type=int, default=None, help="default: the pipeline's (3/4 of the cores)")
    parser.add_argument("--window", default=None, help="eager window LO,HI in ms (default 1,100)")
    parser.add_argument("--ray", default=None, metavar="ADDRESS",
                        help="filter through a Ray cluster (`local`: one started on this machine for the run)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="per-task filter timeout in seconds (default the pipeline's)")
    parser.add_argument("--report-only", action="store_true", help="only read an existing run's journals")
    args = parser.parse_args()
    import torch

    from cuda_agent.synth.pipeline import SynthConfig

    if not torch.cuda.is_available() and not args.report_only:
        sys.exit("no CUDA device: this benchmark runs the pipeline with --backend cuda")
    workers = SynthConfig(num=args.num, out=str(args.out), backend="cuda", workers=args.workers).resolved().workers
    started = None if args.report_only else time.time()
    wall = 0.0 if args.report_only else run_pipeline(args)
    if args.report_only:
        stats = args.out / "work" / "results.jsonl"
        wall = max(1.0, stats.stat().st_mtime - (args.out / "work" / "config.json").stat().st_mtime)
    projection = report(args.out, wall, workers, max(1, torch.cuda.device_count()), since=started)
    (args.out / "gpu_cost.json").write_text(json.dumps(projection, indent=2))


if __name__ == "__main__":
    main()
