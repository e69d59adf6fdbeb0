"""How a synthesis filter worker's memory grows over the tasks it runs (diagnosis of `crashed` workers).

Runs the filter pool's job (`cuda_agent.synth.filters.run_filters`, what each `ProcessPool` worker
runs) for N candidates one after another in this one process, with the environment the pipeline
gives its workers (one torch thread on cpu, `TORCHINDUCTOR_COMPILE_THREADS`), and prints after each
task: its outcome, the process's resident memory (VmRSS) and the change since the previous task, the
high-water mark during the task (VmHWM, reset before it), Python's object count, the host's
MemAvailable and Shmem, and the size of torch.compile's cache folder. Then: the RSS after the first
and the last task, the growth per task (least squares over the tasks after the first, so the
first task's one-off imports and inductor start-up are left out) and the largest step.

The candidates are composed as the pipeline composes them (chain lengths 1-5 in the published mix,
the backend's base shapes), or read from a run's `work/candidates.jsonl` (`--candidates`: on the
GPU machine, the build's own candidates, its catalog beside them).

    python benchmarks/diag/worker_memory.py --backend cpu --tasks 40
    python benchmarks/diag/worker_memory.py --backend cuda --tasks 60 --candidates candidates.jsonl  # a run's, catalog beside it
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))


def _folder_mb(path: Path) -> float:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return round(total / 2**20, 1)


def _filesystem(path: Path) -> str:
    """The mount type holding `path` (tmpfs counts against memory, not disk)."""
    best, kind = "", "?"
    for line in Path("/proc/mounts").read_text().splitlines():
        _dev, mount, fstype = line.split()[:3]
        if str(path).startswith(mount) and len(mount) > len(best):
            best, kind = mount, fstype
    return kind


def composed_candidates(catalog, backend: str, count: int, seed: int) -> list[dict]:
    from cuda_agent.synth.compose import PROFILES, ComposeError, compose_chain
    from cuda_agent.synth.pipeline import DEFAULT_MIX

    profile = PROFILES["gpu" if backend == "cuda" else "tiny"]
    lengths = [c for c in DEFAULT_MIX if c.isdigit()]
    weights = [DEFAULT_MIX[c] for c in lengths]
    pick = random.Random(seed)
    candidates, j = [], 0
    while len(candidates) < count and j < 20 * count:
        length = pick.choices(lengths, weights)[0]
        rng = random.Random(f"{seed}:{length}:{j}")
        j += 1
        try:
            spec = compose_chain(catalog, int(length), rng, profile)
        except ComposeError:
            continue
        candidates.append({"id": f"op{length}-{j:05d}", "class": length, "j": j, "kind": "chain",
                           "spec": spec.to_dict(), "ops": spec.ops})
    return candidates


def run_candidates(path: Path, count: int) -> list[dict]:
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in records if r.get("status") == "queued" and r.get("kind") == "chain"][:count]


def slope(values: list[float]) -> float:
    """Least-squares growth per step."""
    n = len(values)
    if n < 2:
        return 0.0
    mx, my = (n - 1) / 2, sum(values) / n
    return sum((i - mx) * (v - my) for i, v in enumerate(values)) / sum((i - mx) ** 2 for i in range(n))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--candidates", type=Path, default=None,
                        help="a run's work/candidates.jsonl (its queued chains, in order); default: compose")
    parser.add_argument("--catalog", type=Path, default=None,
                        help="catalog.json (default: beside --candidates, else built now, ~15 s)")
    parser.add_argument("--compile-threads", default="1",
                        help="TORCHINDUCTOR_COMPILE_THREADS (the pipeline's: cores // workers; 1 for 48 on 64)")
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile filter")
    parser.add_argument("--json", type=Path, default=None, help="also write the per-task rows here")
    args = parser.parse_args()

    os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = args.compile_threads   # before torch is imported
    if args.backend == "cpu":
        os.environ["OMP_NUM_THREADS"] = "1"
    import torch

    from cuda_agent.synth import memory
    from cuda_agent.synth.catalog import Catalog, build_catalog
    from cuda_agent.synth.filters import FilterConfig, run_filters
    from cuda_agent.synth.pipeline import DEFAULT_WINDOW

    catalog_path = args.catalog or (args.candidates.parent / "catalog.json" if args.candidates else None)
    if catalog_path is None:
        catalog_path = Path(f"/tmp/worker_memory_catalog_{os.getpid()}.json")
        catalog_path.write_text(json.dumps(build_catalog(include_transformers=False).to_dict()))
    catalog = Catalog.from_dict(json.loads(catalog_path.read_text()))
    candidates = (run_candidates(args.candidates, args.tasks) if args.candidates
                  else composed_candidates(catalog, args.backend, args.tasks, args.seed))
    cuda = args.backend == "cuda"
    config = FilterConfig(backend=args.backend, window_ms=DEFAULT_WINDOW[args.backend], compile=not args.no_compile,
                          warmup=10 if cuda else 3, iters=50 if cuda else 20, seed=args.seed,
                          threads=4 if cuda else 1, catalog_path=str(catalog_path)).to_dict()
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    cache = Path(cache_dir())
    print(f"{len(candidates)} candidates, backend {args.backend}, torch {torch.__version__}, "
          f"inductor cache {cache} ({_filesystem(cache)}), start RSS {memory.rss_mb()} MiB", flush=True)
    print(f"{'#':>3s} {'id':12s} {'outcome':22s} {'s':>6s} {'RSS MiB':>8s} {'change':>7s} {'peak':>7s} "
          f"{'objects':>8s} {'avail MiB':>9s} {'Shmem':>6s} {'cache MiB':>9s}", flush=True)
    rows, previous = [], memory.rss_mb()
    for i, candidate in enumerate(candidates, 1):
        reset = memory.reset_peak_rss()
        result = run_filters({"config": config, "candidate": candidate})
        rss, host = memory.rss_mb(), memory.host_memory_mb()
        row = {"task": i, "id": candidate["id"], "outcome": "passed" if result["ok"] else result["reason"],
               "seconds": result.get("seconds"), "rss_mb": rss, "change_mb": round(rss - previous, 1),
               "peak_mb": memory.peak_rss_mb() if reset else None, "objects": len(gc.get_objects()),
               "available_mb": host["MemAvailable"], "shmem_mb": host["Shmem"], "cache_mb": _folder_mb(cache)}
        rows.append(row)
        previous = rss
        print(f"{i:3d} {row['id']:12s} {row['outcome']:22s} {row['seconds']:6.1f} {rss:8.1f} "
              f"{row['change_mb']:+7.1f} {row['peak_mb'] or float('nan'):7.1f} {row['objects']:8d} "
              f"{row['available_mb']:9.0f} {row['shmem_mb']:6.0f} {row['cache_mb']:9.1f}", flush=True)
    if not rows:
        sys.exit("no candidates")
    after_first = [r["rss_mb"] for r in rows[1:]]
    summary = {
        "backend": args.backend, "torch": torch.__version__, "tasks": len(rows),
        "rss_after_first_mb": rows[0]["rss_mb"], "rss_after_last_mb": rows[-1]["rss_mb"],
        "growth_per_task_mb": round(slope(after_first), 2),
        "largest_step_mb": max(r["change_mb"] for r in rows[1:]) if len(rows) > 1 else None,
        "peak_mb": max((r["peak_mb"] or 0) for r in rows) or None,
        "objects_growth_per_task": round(slope([r["objects"] for r in rows[1:]]), 1),
        "cache_growth_per_task_mb": round(slope([r["cache_mb"] for r in rows[1:]]), 2),
        "at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    print("\n" + "\n".join(f"{k}: {v}" for k, v in summary.items()))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
