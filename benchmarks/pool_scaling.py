"""Evaluations per second at 1, 2, ... devices: the same jobs through one EvalPool over the first N GPUs
(and through the Ray service, one actor per GPU, where Ray is installed), alternated, with the ratio to one.

    python benchmarks/pool_scaling.py [--counts 1,2,4] [--evals 12] [--rounds 2] [--json out.json]
    python benchmarks/pool_scaling.py --backend cpu --counts 1,2 --evals 1 --quick   # the logic, on CPU slots

Jobs: the four honest kernels of benchmarks/timing_fidelity.py (elementwise at two sizes, hinge loss,
a cuBLAS SGEMM), in turn; on the CPU backend the embedded example's CPU solution. Every evaluation is
the full default one (builds and baselines cached by a warm-up evaluation of each kernel first). For
each device count N (default: 1, 2, 4, ... up to every visible GPU, and all of them), a fresh pool
over the first N devices (`per_device` in flight each, spare worker pairs, the pool's default of a
harness process per GPU from two on), primed with one untimed round (spares started, imports warm), then
`--evals` x N evaluations at once, timed. Rounds alternate the order (1, 2, 4, then 4, 2, 1) so a drift
of the machine does not favour one count. Each row: evaluations/s, per device, the ratio to the mean
of the one-device rows and that ratio over N (target at least 0.9), the host's busy cores over the
run (/proc/stat) and this process's CPU over the wall, an evaluation's own time and its phases
(with CUDA_AGENT_TRACE_CALLS=1 also the workers' start-up, `trace.startup.*`); `--roles` adds the CPU
seconds per evaluation of each kind of process (benchmarks/diag/pool_host_cost.py samples them).
`--budget-s` stops starting measurements once that much time has passed (what was left is printed).
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
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))   # tests.* (the fidelity kernels' workspaces) and benchmarks.*

from cuda_agent.env import EvalConfig, EvalPool  # noqa: E402
from cuda_agent.env.infra import judges, spares  # noqa: E402
from cuda_agent.env.infra.pool import PER_DEVICE, visible_gpus  # noqa: E402

SAMPLER = HERE / "diag" / "pool_host_cost.py"
RAY_MISSING = "skipped: Ray is not installed here (pip install 'cuda-agent[ray]')"


def default_counts(devices: int) -> list[int]:
    """1, 2, 4, ... below `devices`, and `devices` itself."""
    counts, n = [], 1
    while n < devices:
        counts.append(n)
        n *= 2
    return counts + [devices]


def round_orders(counts: list[int], rounds: int) -> list[list[int]]:
    """The counts in each round: ascending, then descending, and so on."""
    ordered = sorted(set(counts))
    return [ordered if r % 2 == 0 else ordered[::-1] for r in range(rounds)]


def jobs_for(kernels: list, count: int, evals: int) -> list:
    """`evals` x `count` (task, solution) jobs, the kernels in turn (every count gets the same mix)."""
    return [kernels[i % len(kernels)][1:] for i in range(evals * count)]


def summarise(rows: list[dict]) -> dict:
    """Per mode and device count: the rates measured, their mean, the ratio of the mean to the mean of
    the one-device rows, and that ratio over the count (the target is at least 0.9)."""
    out: dict = {}
    for mode in sorted({r["mode"] for r in rows}):
        mine = [r for r in rows if r["mode"] == mode]
        one = [r["evals_per_s"] for r in mine if r["devices"] == 1]
        base = statistics.fmean(one) if one else None
        for row in mine:   # each row against the one-device mean of its mode
            row["ratio_vs_1"] = round(row["evals_per_s"] / base, 2) if base else None
            row["efficiency"] = round(row["evals_per_s"] / base / row["devices"], 2) if base else None
        out[mode] = {}
        for count in sorted({r["devices"] for r in mine}):
            rates = [r["evals_per_s"] for r in mine if r["devices"] == count]
            mean = statistics.fmean(rates)
            out[mode][count] = {"evals_per_s": [round(x, 3) for x in rates], "mean": round(mean, 3),
                                "ratio_vs_1": round(mean / base, 2) if base else None,
                                "efficiency": round(mean / base / count, 2) if base else None}
    return out


def slowest(results: list, own: list[float], n: int = 3) -> list[dict]:
    """The `n` slowest evaluations: their own time, their largest phases (with CUDA_AGENT_TRACE_CALLS=1 the
    traced steps too) and the start of their warnings (a retried start says so): where a run's tail went."""
    order = sorted(range(len(results)), key=lambda i: -own[i])[:n]
    out = []
    for i in order:
        phases = sorted(results[i].phase_seconds.items(), key=lambda kv: -kv[1])[:6]
        out.append({"own_s": round(own[i], 2), "task": results[i].task,
                    "phases": {k: round(v, 2) for k, v in phases},
                    "warnings": [w[:120] for w in results[i].warnings[:2]]})
    return out


def _busy_cores() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole host so far, from /proc/stat."""
    with open("/proc/stat") as fh:
        values = [int(v) for v in fh.readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / tick, sum(values[:8]) / tick


def measure(target, mode: str, count: int, jobs: list, roles: bool) -> dict:
    """Evaluate `jobs` at once through `target` (a pool or the service); one row."""
    sampler, sampled = None, Path(f"/tmp/pool-scaling-roles-{os.getpid()}.json")
    if roles:
        sampler = subprocess.Popen([sys.executable, str(SAMPLER), "--sample", str(os.getpid()), str(sampled)])
        time.sleep(0.3)
    busy0, total0 = _busy_cores()
    cpu0, start = time.process_time(), time.monotonic()
    results = asyncio.run(target.evaluate_many(jobs))
    wall = time.monotonic() - start
    cpu = time.process_time() - cpu0
    busy1, total1 = _busy_cores()
    own = [sum(v for k, v in r.phase_seconds.items() if not k.startswith("trace.")) for r in results]
    bad = [r for r in results if not r.correct]
    row = {"mode": mode, "devices": count, "evals": len(results), "correct": len(results) - len(bad),
           "seconds": round(wall, 2), "evals_per_s": round(len(results) / wall, 3),
           "per_device": round(len(results) / wall / count, 3),
           "host_busy_cores": round((busy1 - busy0) / wall, 1),
           "host_cores": round((total1 - total0) / wall),
           "harness_cpu_per_wall": round(cpu / wall, 2),
           "eval_s": {"mean": round(statistics.fmean(own), 2), "median": round(statistics.median(own), 2),
                      "max": round(max(own), 2), "in_flight_mean": round(sum(own) / wall, 2)},
           "phase_median_s": {k: round(statistics.median(r.phase_seconds.get(k, 0.0) for r in results), 3)
                              for k in sorted({k for r in results for k in r.phase_seconds})},
           "slowest": slowest(results, own)}
    if bad:
        first = bad[0].error
        row["first_error"] = f"{first.phase}: {first.message[:300]}" if first else "?"
    if sampler is not None:
        time.sleep(0.3)
        sampler.terminate()
        sampler.wait()
        seen = json.loads(sampled.read_text())
        sampled.unlink()
        row["cpu_s_per_eval"] = {role: round(s / len(results), 3) for role, s in sorted(seen["cpu_s"].items())}
        row["thread_cpu_s_per_eval"] = {role: {name: round(s / len(results), 3) for name, s in
                                               sorted(per.items(), key=lambda kv: -kv[1])[:8]}
                                        for role, per in seen.get("threads", {}).items()}
    return row


def report(row: dict) -> None:
    own = row["eval_s"]
    print(f"{row['mode']:7} {row['devices']} device(s): {row['evals']:3} evals in {row['seconds']:6.1f} s  "
          f"{row['evals_per_s']:5.2f}/s  {row['per_device']:5.2f}/s per device  {row['correct']}/{row['evals']} "
          f"correct; host {row['host_busy_cores']} of {row['host_cores']} cores busy, harness CPU/wall "
          f"{row['harness_cpu_per_wall']}; an evaluation {own['mean']} s mean, {own['max']} s max, "
          f"{own['in_flight_mean']} in flight" + (f"  {row['first_error']}" if "first_error" in row else ""),
          flush=True)
    print("        phases (median s): " + ", ".join(f"{k} {v}" for k, v in row["phase_median_s"].items()),
          flush=True)
    for slow in row.get("slowest", []):
        print(f"        slow: {slow['own_s']} s {slow['task']}: " + ", ".join(f"{k} {v}" for k, v in slow["phases"].items())
              + "".join(f" | {w}" for w in slow["warnings"]), flush=True)
    if "cpu_s_per_eval" in row:
        print("        CPU s per evaluation: " + ", ".join(f"{k} {v}" for k, v in row["cpu_s_per_eval"].items()),
              flush=True)
    for role, per in row.get("thread_cpu_s_per_eval", {}).items():
        print(f"        {role} threads (CPU s per evaluation): " + ", ".join(f"{k} {v}" for k, v in per.items()),
              flush=True)


def load_kernels(backend: str) -> list:
    """(label, task, solution) of the jobs."""
    if backend == "cuda":
        from benchmarks.timing_fidelity import kernels

        return kernels(None)
    from cuda_agent.tasks import load_solution
    from tests.env.helpers import EXAMPLES, example_task

    return [("bias_relu (CPU)", example_task(), load_solution(EXAMPLES / "solution_cpu"))]


def make_pool(config: EvalConfig, backend: str, devices: list, count: int, per_device: int) -> EvalPool:
    if backend == "cuda":
        return EvalPool(config, gpus=devices[:count], per_device=per_device)
    return EvalPool(config, cpu_slots=count, per_device=per_device)


def start_ray(backend: str, devices: int):
    """Ray, started here for the service's actors (None with the reason when it cannot be)."""
    try:
        import ray
    except ImportError:
        return None, RAY_MISSING
    if not ray.is_initialized():
        ray.init(num_cpus=os.cpu_count(), num_gpus=devices if backend == "cuda" else 0,
                 include_dashboard=False, log_to_driver=False)
    return ray, None


def save(path: Path | None, args, devices, counts, per_device, kernels, rows, modes, service_note, skipped) -> None:
    """The JSON so far (after every measurement: a run cut short keeps what it measured)."""
    if path is None:
        return
    service = "measured" if "service" in modes else service_note or "off"
    path.write_text(json.dumps({"backend": args.backend, "devices": len(devices), "counts": counts,
                                "per_device": per_device, "evals_per_device": args.evals,
                                "kernels": [k[0] for k in kernels], "rows": rows, "summary": summarise(rows),
                                "service": service, "skipped": skipped}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--counts", default=None, help="device counts, e.g. 1,2,4 (default: 1, 2, 4, ... and all)")
    parser.add_argument("--devices", type=int, default=None,
                        help="how many devices there are (CPU: slots; default 2; GPU: the visible ones)")
    parser.add_argument("--evals", type=int, default=12, help="evaluations per device per measurement")
    parser.add_argument("--per-device", type=int, default=None, help="in flight per device (the pool's default)")
    parser.add_argument("--rounds", type=int, default=2, help="measurements per count, the order alternated")
    parser.add_argument("--service", default="auto", choices=["auto", "off", "only"],
                        help="also the Ray service, one actor per device (auto: where Ray is installed; "
                             "only: the service alone, no pool)")
    parser.add_argument("--roles", action="store_true", help="CPU seconds per evaluation by kind of process")
    parser.add_argument("--quick", action="store_true",
                        help="short evaluations (no torch.compile baseline, few timed calls): the script's logic")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--budget-s", type=float, default=420.0,
                        help="start no measurement after this many seconds (the rest is listed as skipped)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    began = time.monotonic()

    if args.backend == "cuda":
        devices = visible_gpus()
        if not devices:
            raise SystemExit("no GPU visible: this measures the CUDA pool (--backend cpu for CPU slots)")
    else:
        devices = [None] * (args.devices or 2)
    counts = [int(c) for c in args.counts.split(",")] if args.counts else default_counts(len(devices))
    counts = [c for c in counts if 1 <= c <= len(devices)]
    settings: dict = dict(backend=args.backend, clock_check=os.environ.get("CLOCK_CHECK", "1") != "0")
    if args.cache_dir:
        settings["cache_dir"] = args.cache_dir
    if args.quick:
        settings.update(compile_baseline=False, warmup=2, iters=5, num_correct_trials=3)
    config = EvalConfig(**settings)
    per_device = args.per_device or PER_DEVICE.get(args.backend, 1)
    config = replace(config, prewarm=per_device)
    kernels = load_kernels(args.backend)

    # every kernel at once on the first device: builds, and the torch.compile baselines stored
    warm_pool = make_pool(config, args.backend, devices, 1, len(kernels))
    warm = asyncio.run(warm_pool.evaluate_many([k[1:] for k in kernels]))
    for (label, _, _), result in zip(kernels, warm):
        print(f"warm-up {label}: {'correct' if result.correct else 'FAILED ' + str(result.error)}, "
              f"kernel {result.kernel_ms} ms", flush=True)
    spares.discard_all()
    judges.discard_all()   # (CUDA_AGENT_PERSISTENT_JUDGE=1) each count starts with none kept
    if not all(result.correct for result in warm):
        raise SystemExit("a warm-up evaluation failed: nothing measured")

    modes = [] if args.service == "only" else ["pool"]
    service_note = None
    ray = None
    if args.service != "off":
        ray, service_note = start_ray(args.backend, len(devices))
        if ray is not None:
            modes.append("service")
        else:
            print(f"service: {service_note}", flush=True)
    if not modes:
        raise SystemExit(f"--service only, and no service: {service_note}")

    rows, skipped = [], []
    for order in round_orders(counts, args.rounds):
        for count in order:
            for mode in modes:
                if time.monotonic() - began > args.budget_s:
                    skipped.append(f"{mode} at {count}")
                    continue
                jobs = jobs_for(kernels, count, args.evals)
                if mode == "pool":
                    target = make_pool(config, args.backend, devices, count, per_device)
                else:
                    from cuda_agent.env.infra.service import EvalService

                    target = EvalService("local", config, actors=count, per_device=per_device,
                                         cache_dir=str(config.cache_dir))
                print(f"{mode} {count}: started at {time.monotonic() - began:.0f} s, priming", flush=True)
                try:
                    asyncio.run(target.evaluate_many(jobs[:per_device * count]))   # primed: spares, imports
                    print(f"{mode} {count}: primed at {time.monotonic() - began:.0f} s, measuring", flush=True)
                    row = measure(target, mode, count, jobs, args.roles)
                finally:
                    if mode == "pool":
                        target.close()
                        spares.discard_all()   # one device's pool runs in this process: its spares go too
                        judges.discard_all()   # and its kept judges
                    else:
                        target.shutdown()
                print(f"{mode} {count}: ended at {time.monotonic() - began:.0f} s", flush=True)
                rows.append(row)
                report(row)
                save(args.json, args, devices, counts, per_device, kernels, rows, modes, service_note, skipped)
    summary = summarise(rows)
    print("\nmode     devices  evaluations/s (each round)  mean   x vs 1   x / devices (target >= 0.9)")
    for mode, by_count in summary.items():
        for count, s in by_count.items():
            print(f"{mode:8} {count:7}  {', '.join(f'{x:.2f}' for x in s['evals_per_s']):26}  {s['mean']:5.2f}  "
                  f"{s['ratio_vs_1']!s:>6}   {s['efficiency']!s:>5}", flush=True)
    if service_note:
        print(f"service: {service_note}")
    if skipped:
        print(f"skipped (past --budget-s {args.budget_s:g} s): {', '.join(skipped)}")
    if ray is not None:
        ray.shutdown()
    save(args.json, args, devices, counts, per_device, kernels, rows, modes, service_note, skipped)


if __name__ == "__main__":
    main()
