"""One command's wall time at 1, 2, 4, ... GPUs: `cuda-agent baseline`, `cuda-agent bench` (the
hand-written solutions) or the Ops-6K synthesis, each run afresh on the first N GPUs of this machine.

    python benchmarks/runs_scaling.py baseline --kernelbench .kb [--tasks level2/1-40] [--counts 1,2,4]
    python benchmarks/runs_scaling.py bench --kernelbench .kb [--counts 1,2,4]
    python benchmarks/runs_scaling.py synth --kernelbench .kb --seconds 120 [--state data/ops6k/build.tar.xz] [--ray]

baseline and bench do a fixed amount of work (the tasks; baseline with --force, so each run measures
them all) and report tasks per second; one untimed run on every GPU first builds and caches what the
timed runs would otherwise pay for once (extensions, torch.compile's caches; for synth a short run,
`--prime-seconds`: Triton's own helpers are built at a machine's first compile). synth runs for a fixed
time with 12 workers per GPU (`--ray`: through a local Ray cluster, one evaluation actor per GPU, as the
Ops-6K build ran), each run a new build (seed 1, not the Ops-6K build's 0) started from the saved
state's operator catalog alone, so every run composes and filters new tasks from the first minute
whether or not Ops-6K is complete; it reports tasks kept per hour, over the whole run and after its
start-up (its first filter result). Each row: the rate, the ratio to one GPU, and that ratio over N
(the issue's target: at least 0.9).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "benchmarks" / "kernelbench_solutions"
LARGE = {"level1/19", "level1/20", "level1/21", "level1/22", "level1/23", "level1/24", "level1/25", "level1/26",
         "level1/29", "level1/32", "level1/36", "level1/38", "level1/39", "level1/47"}
WORKERS_PER_GPU = 12
SYNTH_SEED = 1          # not the Ops-6K build's seed: each run composes tasks of its own
CATALOG = "work/catalog.json"


def solution_tasks() -> list[str]:
    """The hand-written solutions' tasks, less the 6-8 GiB ones (one at a time per GPU: they measure
    memory admission, not scaling)."""
    found = sorted(f"{level.name}/{task.name}" for level in SOLUTIONS.glob("level*") for task in level.iterdir())
    return [key for key in found if key not in LARGE]


def gpu_list(count: int) -> str:
    return ",".join(str(i) for i in range(count))


def command(kind: str, count: int, out: Path, args) -> tuple[list[str], dict]:
    """The command line and the environment changes for one run on the first `count` GPUs."""
    cli = [sys.executable, "-m", "cuda_agent.cli"]
    if kind == "baseline":
        return [*cli, "baseline", "--tasks", args.tasks, "--gpus", gpu_list(count), "--out", str(out), "--force",
                "--kernelbench", args.kernelbench], {}
    if kind == "bench":
        return [*cli, "bench", "--solutions", str(SOLUTIONS), "--tasks", ",".join(solution_tasks()),
                "--gpus", gpu_list(count), "--out", str(out), "--kernelbench", args.kernelbench], {}
    cmd = [sys.executable, str(ROOT / "benchmarks" / "synth_gpu.py"), "--num", "6000", "--out", str(out),
           "--seed", str(SYNTH_SEED), "--budget-seconds", str(args.seconds), "--workers", str(WORKERS_PER_GPU * count),
           "--kernelbench", args.kernelbench]
    if getattr(args, "ray", False):
        cmd += ["--ray", "local"]
    return cmd, {"CUDA_VISIBLE_DEVICES": gpu_list(count)}


def results_of(out: Path) -> list[dict]:
    results = out / "work" / "results.jsonl"
    if not results.exists():
        return []
    return [json.loads(line) for line in results.read_text().splitlines() if line.strip()]


def passed_tasks(out: Path) -> int:
    return sum(1 for result in results_of(out) if result.get("ok"))


def steady(results: list[dict], began: float, ended: float) -> dict:
    """This run's start-up (until its first filter result) and its rate of tasks kept after that: a
    build of thousands of tasks pays the start-up once."""
    mine = sorted((r for r in results if r.get("at", 0) >= began), key=lambda r: r["at"])
    if len(mine) < 2:
        return {}
    first = mine[0]["at"]
    kept = sum(1 for r in mine[1:] if r.get("ok"))
    return {"startup_s": round(first - began, 1), "steady_rate": round(kept / max(ended - first, 1e-9) * 3600, 1)}


def task_times(kind: str, out: Path, wall: float, began: float | None = None, ended: float | None = None) -> dict:
    """baseline and bench: the run's longest task (a run of few tasks on many GPUs cannot end before it),
    where its time went, and how many tasks were in flight on average (their seconds over the run's wall time); with the
    run's `began` and `ended` (time.time()), the seconds before its first task started and after its
    last one finished (the command's own start-up and end)."""
    db = out / "bench.sqlite"
    if kind == "synth" or not db.exists():
        return {}
    table, record = ("baselines", "steps") if kind == "baseline" else ("attempts", "result")
    with sqlite3.connect(db) as con:
        rows = con.execute(f"SELECT task_key, seconds, {record}, finished FROM {table} "
                           "WHERE seconds IS NOT NULL").fetchall()
    if not rows:
        return {}
    task, longest, result, _ = max(rows, key=lambda r: r[1])
    times = {"longest_s": round(longest, 1), "longest_task": task,
             "in_flight": round(sum(r[1] for r in rows) / max(wall, 1e-9), 2)}
    # where the longest task's time went: an evaluation's phases (compile includes the workers' set-up), or
    # a baseline's steps (start, compile, timing, of which wait: for the device's lock)
    phases = (json.loads(result) if kind == "baseline" else json.loads(result).get("phase_seconds")) if result else None
    if phases:
        times["longest_phases"] = {name: round(s, 1) for name, s in phases.items() if s >= 0.05}
    spans = [(end - seconds, end) for _, seconds, _, end in rows if end is not None]
    if spans and began is not None and ended is not None:
        times["first_task_s"] = round(min(start for start, _ in spans) - began, 1)
        times["after_last_s"] = round(ended - max(end for _, end in spans), 1)
    return times


def prepare(kind: str, out: Path, state: Path | None) -> int:
    """A fresh run folder (synth: holding only the operator catalog of `state`, so the run skips the
    crawl and starts a build of its own); the tasks already kept there."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if kind == "synth" and state is not None and state.exists():
        with tarfile.open(state) as tar:
            catalog = [m for m in tar.getmembers() if m.name.removeprefix("./") == CATALOG]
            tar.extractall(out, members=catalog, filter="data")
    return passed_tasks(out) if kind == "synth" else 0


def run_once(kind: str, count: int, out: Path, args) -> dict:
    before = prepare(kind, out, args.state)
    cmd, env = command(kind, count, out, args)
    start, began = time.monotonic(), time.time()
    done = subprocess.run(cmd, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall, ended = time.monotonic() - start, time.time()
    (out.parent / f"{kind}-{count}.log").write_text(done.stdout)
    row = {"kind": kind, "gpus": count, "wall_s": round(wall, 1), "exit": done.returncode}
    if kind == "synth":
        row["tasks"] = passed_tasks(out) - before
        row["rate"] = round(row["tasks"] / wall * 3600, 1)   # tasks kept per hour
        row.update(steady(results_of(out), began, time.time()))
    else:
        row["tasks"] = len(solution_tasks()) if kind == "bench" else None
        row["rate"] = round(1.0 / wall, 5)                   # runs per second: the same work at every count
        row.update(task_times(kind, out, wall, began, ended))
    return row


def with_ratios(rows: list[dict]) -> list[dict]:
    """Each row with its rate over the one-GPU rows' mean and that ratio over its GPUs."""
    ones = [r["rate"] for r in rows if r["gpus"] == 1 and r["rate"]]
    base = sum(ones) / len(ones) if ones else None
    for row in rows:
        row["x_vs_1"] = round(row["rate"] / base, 2) if base else None
        row["x_per_gpu"] = round(row["x_vs_1"] / row["gpus"], 2) if base else None
    steady_ones = [r["steady_rate"] for r in rows if r["gpus"] == 1 and r.get("steady_rate")]
    if steady_ones:   # synth: the same ratios once the workers are running
        steady_base = sum(steady_ones) / len(steady_ones)
        for row in rows:
            if row.get("steady_rate"):
                row["steady_x_per_gpu"] = round(row["steady_rate"] / steady_base / row["gpus"], 2)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["baseline", "bench", "synth"])
    parser.add_argument("--counts", default="1,2,4")
    parser.add_argument("--tasks", default="level2/1-40", help="baseline's tasks")
    parser.add_argument("--kernelbench", default=os.environ.get("CUDA_AGENT_KERNELBENCH", str(ROOT.parent / "shared" / "kernelbench")))
    parser.add_argument("--seconds", type=float, default=120.0, help="synth: each run's time")
    parser.add_argument("--state", type=Path, default=ROOT / "data" / "ops6k" / "build.tar.xz",
                        help="synth: the saved build whose operator catalog each run starts from")
    parser.add_argument("--ray", action="store_true", help="synth: through a local Ray cluster (one actor per GPU)")
    parser.add_argument("--no-prime", dest="prime", action="store_false")
    parser.add_argument("--prime-seconds", type=float, default=45.0, help="synth: the untimed first run's time")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    root = Path(tempfile.mkdtemp(prefix=f"runs-scaling-{args.kind}-"))
    if args.prime:
        prime_args = argparse.Namespace(**{**vars(args), "seconds": args.prime_seconds})
        primed = run_once(args.kind, max(counts), root / "prime", prime_args)
        print(f"primed on {max(counts)} GPU(s) in {primed['wall_s']} s (exit {primed['exit']}), not counted", flush=True)
    rows = []
    for count in counts:
        rows.append(run_once(args.kind, count, root / f"run-{count}", args))
        print(json.dumps(rows[-1]), flush=True)
    unit = "tasks kept per hour" if args.kind == "synth" else "runs per second (the same work)"
    print(f"\n{args.kind}: {unit}")
    for row in with_ratios(rows):
        print(f"  {row['gpus']} GPU(s): wall {row['wall_s']} s, rate {row['rate']}, x vs 1 {row['x_vs_1']}, "
              f"x / GPUs {row['x_per_gpu']} (target >= 0.9), exit {row['exit']}")
        if row.get("longest_s"):
            phases = ", ".join(f"{name} {s} s" for name, s in row.get("longest_phases", {}).items())
            print(f"    longest task {row['longest_task']} {row['longest_s']} s{f' ({phases})' if phases else ''}, "
                  f"{row['in_flight']} tasks in flight on average")
            if "first_task_s" in row:
                print(f"    first task started after {row['first_task_s']} s, the command ended "
                      f"{row['after_last_s']} s after its last task")
        if row.get("steady_rate"):
            print(f"    after its start-up of {row['startup_s']} s: {row['steady_rate']} tasks kept per hour, "
                  f"x / GPUs {row.get('steady_x_per_gpu')}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
