"""What an evaluation through EvalPool costs the host, process by process, and what overlaps (diagnosis).

Runs N evaluations of the embedded bias_relu example through one `EvalPool` (CPU backend by default:
no GPU needed) and reports, per evaluation: the wall time, the CPU seconds of this harness process
(its event loop and evaluation threads), of each device's harness process (`processes`), of the fork
server, of the judges, of the sandboxed candidates (bwrap and the worker), and of anything else below
it (builds); the phases' medians (EvalResult.phase_seconds); and how far the evaluations overlapped
(the mean number in flight, from their start and end times). The CPU of the processes below this one
is sampled from /proc by a separate process (10 times a second), so the sampling costs this one nothing.

    python benchmarks/diag/pool_host_cost.py [--backend cpu] [--slots 2] [--evals 6] [--processes]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

EXAMPLE = ROOT / "src" / "cuda_agent" / "examples" / "bias_relu"
TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: str) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK


def _threads(pid: str) -> dict[str, float]:
    """CPU seconds of each thread of a process, keyed "main" (the process's first thread) or by the
    thread's name, threads of one name summed."""
    found: dict[str, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                text = fh.read()
        except OSError:
            continue
        name = "main" if tid == pid else text[text.index("(") + 1:text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        found[name] = found.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / TICK
    return found


def _cmdline(pid) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _role(pid: str, parent: int) -> str:
    text = _cmdline(pid)
    if "infra.forkserver" in text:   # a judge is a fork of the server: the same command line
        return "judge" if "infra.forkserver" in _cmdline(parent) else "fork server"
    if "bwrap" in text.split(" ", 1)[0]:
        return "sandbox"
    if "workers candidate" in text:
        return "candidate"
    if "workers judge" in text:
        return "judge"
    if "multiprocessing" in text:
        return "device host"
    if text.startswith("ray::DeviceEvaluator"):   # the service's actor: its GPU's harness
        return "Ray actor"
    if "ray" in text:
        return "Ray's own"
    return "other"


def sample(root: int, out: Path, interval: float = 0.1) -> None:
    """In its own process: the most CPU seconds seen of every process below `root` since the sampling
    began (for those already there, less what they had used then), with its role
    (written to `out` as JSON when `root` ends or a SIGTERM arrives)."""
    import signal

    seen: dict[str, tuple[str, float]] = {}
    threads: dict[str, tuple[str, dict[str, float]]] = {}   # candidates' and judges': CPU by thread
    threads_before: dict[str, dict[str, float]] = {}
    before: dict[str, float] | None = None   # what the processes there at the start had used already
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not stop and os.path.exists(f"/proc/{root}"):
        parents = {}
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                got = _stat(pid)
                if got:
                    parents[pid] = got
        below = {str(root)}
        changed = True
        while changed:   # the descendants of root
            changed = False
            for pid, (parent, _) in parents.items():
                if pid not in below and str(parent) in below:
                    below.add(pid)
                    changed = True
        below.discard(str(root))
        below.discard(str(os.getpid()))
        if before is None:
            before = {pid: parents[pid][1] for pid in below}
        for pid in below:
            role = seen[pid][0] if pid in seen else _role(pid, parents[pid][0])
            used = parents[pid][1] - (before or {}).get(pid, 0.0)
            seen[pid] = (role, max(used, seen.get(pid, ("", 0.0))[1]))
            if role in ("candidate", "judge"):
                now = _threads(pid)
                if pid in (before or {}):   # a process there already: what its threads used since
                    was = threads_before.setdefault(pid, now)
                    now = {k: v - was.get(k, 0.0) for k, v in now.items()}
                if now:
                    kept = threads.get(pid, (role, {}))[1]
                    threads[pid] = (role, {k: max(v, kept.get(k, 0.0)) for k, v in {**kept, **now}.items()})
        time.sleep(interval)
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for role, cpu in seen.values():
        totals[role] = totals.get(role, 0.0) + cpu
        counts[role] = counts.get(role, 0) + 1
    by_thread: dict[str, dict[str, float]] = {}
    for role, per in threads.values():
        into = by_thread.setdefault(role, {})
        for name, cpu in per.items():
            into[name] = round(into.get(name, 0.0) + cpu, 3)
    out.write_text(json.dumps({"cpu_s": totals, "processes": counts, "threads": by_thread}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--slots", type=int, default=2, help="devices: CPU slots, or the first N GPUs")
    parser.add_argument("--per-device", type=int, default=1)
    parser.add_argument("--evals", type=int, default=6)
    parser.add_argument("--processes", action="store_true", help="a harness process per device")
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--no-compile", action="store_true", help="no torch.compile baseline (CPU: its re-timing "
                        "under load dominates)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--sample", nargs=2, metavar=("PID", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sample:
        sample(int(args.sample[0]), Path(args.sample[1]))
        return

    from cuda_agent.env import EvalConfig, EvalPool
    from cuda_agent.tasks import load_solution, load_task

    settings = dict(backend=args.backend, prewarm=True, compile_baseline=not args.no_compile)
    if args.cache_dir:
        settings["cache_dir"] = Path(args.cache_dir)
    config = EvalConfig(**settings)
    gpus = list(range(args.slots)) if args.backend == "cuda" else None
    pool = EvalPool(config, gpus=gpus, cpu_slots=args.slots, per_device=args.per_device,
                    processes=args.processes)
    task = load_task(EXAMPLE / "model.py")
    solution = load_solution(EXAMPLE / ("solution_cuda" if args.backend == "cuda" else "solution_cpu"))
    warm = asyncio.run(pool.evaluate_many([(task, solution)] * pool.capacity))   # builds, baselines, spares
    if not all(r.correct for r in warm):
        raise SystemExit(f"warm-up failed: {[r.error for r in warm]}")

    async def run_all():
        return await pool.evaluate_many([(task, solution)] * args.evals)

    sampled = Path(f"/tmp/pool-host-cost-{os.getpid()}.json")
    sampler = subprocess.Popen([sys.executable, __file__, "--sample", str(os.getpid()), str(sampled)])
    time.sleep(0.3)
    before = sum(_stat(str(os.getpid()))[1:])   # this process, every thread (the sampler is another process)
    start = time.monotonic()
    results = asyncio.run(run_all())
    wall = time.monotonic() - start
    own = sum(_stat(str(os.getpid()))[1:]) - before
    time.sleep(0.3)
    sampler.terminate()
    sampler.wait()
    below = json.loads(sampled.read_text())
    sampled.unlink()
    pool.close()

    n = len(results)
    own_times = [sum(v for k, v in r.phase_seconds.items() if not k.startswith("trace.")) for r in results]
    report = {
        "backend": args.backend, "devices": args.slots, "per_device": args.per_device, "processes": args.processes,
        "evals": n, "correct": sum(r.correct for r in results), "wall_s": round(wall, 2),
        "evals_per_s": round(n / wall, 3), "in_flight_mean": round(sum(own_times) / wall, 2),
        "eval_s_median": round(statistics.median(own_times), 2),
        "cpu_s_per_eval": {"harness (this process)": round(own / n, 3),
                           **{role: round(cpu / n, 3) for role, cpu in sorted(below["cpu_s"].items())}},
        "processes_seen": below["processes"],
        "phase_median_s": {k: round(statistics.median(r.phase_seconds.get(k, 0.0) for r in results), 3)
                           for k in sorted({k for r in results for k in r.phase_seconds})},
    }
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
