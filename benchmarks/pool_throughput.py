"""Evaluations per second through EvalPool: the serial path against pipelining (GPU machine).

    python benchmarks/pool_throughput.py [--evals 36] [--per-device 3] [--modes concurrent] [--json out.json]
    CUDA_AGENT_TRACE_CALLS=1 python benchmarks/pool_throughput.py ... --logs DIR   # where each round waits
    CUDA_AGENT_LOG_ROUNDS=1 python benchmarks/pool_throughput.py ... --logs DIR    # every timed call's times
    python benchmarks/pool_throughput.py ... --lock-log FILE   # how busy the device's lock was, and with what

For each kernel, honest and with its build and baselines cached by a warm-up evaluation first:
  small   relu(x + bias) on 8192 x 4096 floats, about 0.1 ms (pool_throughput/elementwise/, solved by the
          embedded example's CUDA solution)
  large   a 2816^3 float32 GEMM through cuBLAS, about 1 ms (the task in pool_throughput/gemm/, solved
          by the level1/1 solution in kernelbench_solutions/)
and for each way of submitting N evaluations on GPU 0 (--evals, default 36):
  serial       one at a time, per_device=1, no spare workers: the baseline (what the pool did before);
               --serial-evals of them (default 12: one at a time, there is no start or end to amortise)
  back-to-back one at a time, pipelined pool with spare workers (an agent waiting for each result)
  concurrent   all N at once, pipelined pool (`per_device` in flight, their timed calls serialised)
  N GPUs       N x --evals evaluations at once over the first N GPUs (--gpu-counts, default 2; when present):
               evaluations per second per GPU, a harness process per GPU; 'N GPUs, one process' the same
               with every GPU's evaluations in this one process (the pool before it had a process per GPU)
Every evaluation is the full default one (strict protocol, eager paired, torch.compile from the store;
timed calls until the medians are known within --precision percent (default 0.75), at most 100;
--precision 0 times all 100, as before that option). Each pipelined pool runs one untimed round of
evaluations first (--no-prime: measured from a cold pool), so a mode measures a pool in its steady
state, as a long RL run or benchmark sees it; N = 36 for the same reason: at 3 in flight the first
evaluations start together (all in their compile phase, the device idle) and the last ones finish
alone: over 12 evaluations the pool's 3 slots were busy 2.57 on average, over 36 2.99 (an H100,
twelfth session). The target: at least 1.0 evaluation per second per GPU for cached sub-millisecond
kernels, concurrently. Prints a table (and writes JSON) with each mode's ratio to the serial baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import re
import statistics
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

import cuda_agent
from cuda_agent.env import EvalConfig, EvalPool
from cuda_agent.env.infra.pool import visible_gpus
from cuda_agent.env.measure.stats import spread
from cuda_agent.tasks import load_solution, load_task

HERE = Path(__file__).resolve().parent
EXAMPLE_CUDA = Path(cuda_agent.__file__).resolve().parent / "examples" / "bias_relu" / "solution_cuda"
KERNELS = {   # the small task is the embedded example's at a larger size, solved by its CUDA solution
    "small": (HERE / "pool_throughput" / "elementwise" / "model.py", EXAMPLE_CUDA),
    "large": (HERE / "pool_throughput" / "gemm" / "model.py", HERE / "kernelbench_solutions" / "level1" / "1"),
}

# CLOCK_CHECK=0 turns the clock cross-check off (it changes no timing, only whether a run is rejected)
_CLOCK_CHECK = os.environ.get("CLOCK_CHECK", "1") != "0"


async def submit(pool: EvalPool, jobs: list, concurrent: bool) -> tuple[float, list]:
    start = time.perf_counter()
    if concurrent:
        results = await pool.evaluate_many(jobs)
    else:
        results = [await pool.evaluate(task, solution) for task, solution in jobs]
    return time.perf_counter() - start, results


def measure(name: str, mode: str, pool: EvalPool, jobs: list, concurrent: bool, gpus: int,
            logs: Path | None = None, lock_log: Path | None = None) -> dict:
    began, cpu_before = time.monotonic(), time.process_time()
    seconds, results = asyncio.run(submit(pool, jobs, concurrent))
    ended, harness_cpu = time.monotonic(), time.process_time() - cpu_before
    if logs:   # the workers' per-call traces (CUDA_AGENT_TRACE_CALLS=1) of the middle evaluation
        logs.mkdir(parents=True, exist_ok=True)
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{name}-{mode}").strip("_")   # plain names: they travel
        (logs / f"{stem}.log").write_text(results[len(results) // 2].log or "")
        # every evaluation's timed calls (CUDA_AGENT_LOG_ROUNDS=1), one JSON line each
        rounds = [line[len("rounds "):] for r in results for line in (r.log or "").splitlines()
                  if line.startswith("rounds ")]
        if rounds:
            with open(logs / f"{stem}.rounds.jsonl", "a") as out:
                out.write("\n".join(rounds) + "\n")
    bad = [r for r in results if not r.correct]
    row = {"kernel": name, "mode": mode, "evals": len(jobs), "gpus": gpus, "seconds": round(seconds, 2),
           "evals_per_s": round(len(jobs) / seconds, 3), "per_gpu": round(len(jobs) / seconds / gpus, 3),
           "correct": len(results) - len(bad),
           # this process's CPU over the wall: near 1.0 the evaluations it hosts wait on its interpreter
           "harness_cpu_per_wall": round(harness_cpu / seconds, 2),
           "timed_calls": statistics.median(r.timings["kernel"].iters for r in results if "kernel" in r.timings)
           if any("kernel" in r.timings for r in results) else None,
           "kernel_ms": round(sorted(r.kernel_ms for r in results if r.kernel_ms)[len(results) // 2], 4)
           if not bad else None}
    # an evaluation's own time (its phases) against the wall: in flight at once on average; below the
    # pool's slots when evaluations wait between one another (scheduling, set-up outside the phases)
    own = [sum(v for k, v in r.phase_seconds.items() if not k.startswith("trace.")) for r in results]
    # fidelity under this load: how far the evaluations' medians lie apart ((max - min) / median)
    for key, values in (("kernel_spread", [r.kernel_ms for r in results if r.kernel_ms]),
                        ("speedup_spread", [r.speedup_vs_eager for r in results if r.speedup_vs_eager])):
        row[key] = round(spread(values), 4) if len(values) >= 2 else None
    row["eval_s"] = {"mean": round(statistics.fmean(own), 3), "median": round(statistics.median(own), 3),
                     "max": round(max(own), 3), "in_flight_mean": round(sum(own) / seconds, 2)}
    phases = sorted({k for r in results for k in r.phase_seconds})   # where an evaluation's time went
    row["phase_median_s"] = {k: round(statistics.median(r.phase_seconds.get(k, 0.0) for r in results), 3)
                             for k in phases}
    if lock_log and lock_log.exists():   # the holds of this mode's window (lock_occupancy.py)
        from cuda_agent.env.infra.lock_log import by_label, occupancy, read_log

        holds = [h for h in read_log(lock_log) if began <= h["got"] and h["released"] <= ended]
        split = occupancy(holds)
        busy = split.get("exclusive_s", 0) + split.get("shared_s", 0)
        row["lock"] = {**split, "per_eval_busy_s": round(busy / len(jobs), 3), "top": by_label(holds)[:8]}
    if bad:
        row["first_error"] = f"{bad[0].error.phase}: {bad[0].error.message[:300]}" if bad[0].error else "?"
    return row


def _setting_value(text: str):
    """A --compare value as Python reads it (30, 0.5, True, None), else the text itself."""
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _percent(fraction: float | None) -> str:
    return "-" if fraction is None else f"{fraction * 100:.1f} %"


def report(name: str, mode: str, row: dict) -> None:
    print(f"{name:6} {mode:13} {row['evals']:3} evals {row['seconds']:7.1f} s  {row['evals_per_s']:6.2f}/s  "
          f"{row['per_gpu']:6.2f}/s per GPU  x{row['ratio_vs_serial']:.2f} vs serial  "
          f"{row['correct']}/{row['evals']} correct, {row['timed_calls']} timed calls, spread kernel "
          f"{_percent(row['kernel_spread'])} speedup {_percent(row['speedup_spread'])}"
          + (f"  {row.get('first_error')}" if 'first_error' in row else ""), flush=True)
    print("       phases (median s): " + ", ".join(f"{k} {v}" for k, v in row["phase_median_s"].items()), flush=True)
    own = row["eval_s"]
    print(f"       an evaluation's own time: mean {own['mean']} s, median {own['median']} s, max {own['max']} s; "
          f"{own['in_flight_mean']} in flight on average", flush=True)
    if "lock" in row:
        lock = row["lock"]
        print(f"       lock: busy {lock.get('busy_fraction')} of {lock.get('wall_s')} s "
              f"(alone {lock.get('exclusive_s')}, shared {lock.get('shared_s')}, handover {lock.get('handover_s')}, "
              f"idle {lock.get('idle_s')}); {lock['per_eval_busy_s']} s busy per evaluation", flush=True)
        for hold in lock["top"]:
            print(f"         {hold['label']:28} {hold['mode']:6} {hold['holds']:5d} x {hold['held_median_ms']:8.3f} ms "
                  f"= {hold['held_total_s']:7.3f} s (waits {hold['wait_total_s']:.3f} s)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evals", type=int, default=36, help="evaluations per mode (per GPU)")
    parser.add_argument("--serial-evals", type=int, default=12, help="evaluations of the serial mode")
    parser.add_argument("--per-device", type=int, default=3, help="evaluations in flight per GPU when pipelined")
    parser.add_argument("--kernels", default="small,large")
    parser.add_argument("--modes", default="serial,back-to-back,concurrent,2 GPUs",
                        help="which ways of submitting to measure (the ratio is to the first one measured)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--logs", type=Path, default=None, help="folder for one evaluation's worker log per mode")
    parser.add_argument("--in-flight", default=None,
                        help="more concurrent runs at these evaluations in flight, e.g. 4,6 (modes 'concurrent N')")
    parser.add_argument("--lock-log", type=Path, default=None,
                        help="record the device lock's holds here and report its occupancy per mode")
    parser.add_argument("--repeat", type=int, default=1, help="measure each mode this many times")
    parser.add_argument("--precision", type=float, default=None,
                        help="EvalConfig.precision in percent (default: its default; 0: every timed call, the "
                             "schedule before it)")
    parser.add_argument("--compare", default=None, metavar="SETTING=A,B",
                        help="EvalConfig settings to compare in the same run, e.g. min_iters=30,50 (each mode is "
                             "measured for each value in turn)")
    parser.add_argument("--no-prime", dest="prime", action="store_false",
                        help="measure pipelined pools from cold (no untimed round first)")
    parser.add_argument("--gpu-counts", default="2",
                        help="GPU counts of the 'N GPUs' modes, e.g. 2,4 (each also as 'N GPUs, one process': every "
                             "GPU's evaluations in this process, where the code has a harness process per GPU)")
    parser.add_argument("--switch-interval", type=float, default=None,
                        help="the harness interpreter's thread switch interval in seconds (diagnosis: its "
                             "evaluations share one GIL; Python's default is 0.005)")
    args = parser.parse_args()
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    if args.lock_log:   # before any worker starts: they inherit it
        args.lock_log.unlink(missing_ok=True)
        os.environ["CUDA_AGENT_LOCK_LOG"] = str(args.lock_log)
    gpus = visible_gpus()
    if not gpus:
        raise SystemExit("no GPU: this benchmark measures the CUDA pool")
    base = EvalConfig(backend="cuda", clock_check=_CLOCK_CHECK)
    known = {f.name for f in fields(EvalConfig)}   # the code before (throughput_old) may lack a setting
    if args.precision is not None and "precision" in known:
        base = replace(base, precision=args.precision / 100 or None)
    settings = [None]   # (name, value) pairs to measure, or None: the config as it is
    if args.compare:
        name, _, values = args.compare.partition("=")
        if name not in known:
            raise SystemExit(f"--compare: EvalConfig has no setting {name!r}")
        settings = [(name, _setting_value(v)) for v in values.split(",")]
    rows = []
    for name in args.kernels.split(","):
        task_file, solution_dir = KERNELS[name]
        task, solution = load_task(task_file), load_solution(solution_dir)
        jobs = [(task, solution)] * args.evals
        warm = asyncio.run(EvalPool(base, gpus=gpus, per_device=1).evaluate_many([(task, solution)] * len(gpus)))
        print(f"{name}: warm-up {'correct' if all(r.correct for r in warm) else 'FAILED'}, "
              f"kernel {warm[0].kernel_ms} ms, eager {warm[0].eager_ms} ms", flush=True)
        plan = []
        for setting in settings:   # every setting's pools, measured in turn (same run, same machine state)
            config = base if setting is None else replace(base, **{setting[0]: setting[1]})
            tag = "" if setting is None else f" [{setting[0]}={setting[1]}]"
            serial = EvalPool(replace(config, prewarm=0), gpus=[0], per_device=1)
            pipelined = EvalPool(replace(config, prewarm=args.per_device), gpus=[0], per_device=args.per_device)
            plan += [("serial", tag, serial, False, 1, jobs[:args.serial_evals]),
                     ("back-to-back", tag, pipelined, False, 1, jobs),
                     ("concurrent", tag, pipelined, True, 1, jobs)]
            for extra in (args.in_flight or "").split(","):
                if extra.strip():
                    n = int(extra)
                    plan.append((f"concurrent {n}", tag, EvalPool(replace(config, prewarm=n), gpus=[0], per_device=n),
                                 True, 1, [(task, solution)] * max(args.evals, 2 * n)))
            per_process = "processes" in inspect.signature(EvalPool).parameters   # the code before may lack it
            for count in (int(n) for n in args.gpu_counts.split(",") if n.strip()):
                if count < 2 or len(gpus) < count:
                    continue
                spread_config = replace(config, prewarm=args.per_device)
                plan.append((f"{count} GPUs", tag, EvalPool(spread_config, gpus=gpus[:count], per_device=args.per_device),
                             True, count, jobs * count))
                if per_process:
                    one = EvalPool(spread_config, gpus=gpus[:count], per_device=args.per_device, processes=False)
                    plan.append((f"{count} GPUs, one process", tag, one, True, count, jobs * count))
        wanted = args.modes.split(",")
        plan = [entry for entry in plan if entry[0] in wanted or entry[0].startswith("concurrent ")
                or (" GPUs" in entry[0] and any(w.endswith("GPUs") for w in wanted))]
        serial_rate = None
        primed = set()
        for _ in range(args.repeat):
            for mode, tag, pool, concurrent, count, work in plan:
                if args.prime and pool.per_device * count > 1 and pool not in primed:   # spares started, imports warm
                    asyncio.run(pool.evaluate_many(work[:pool.per_device * count]))
                    primed.add(pool)
                row = measure(name, mode + tag, pool, work, concurrent, count, args.logs, args.lock_log)
                serial_rate = serial_rate or row["per_gpu"]   # the first mode measured (serial unless left out)
                row["ratio_vs_serial"] = round(row["per_gpu"] / serial_rate, 2)
                rows.append(row)
                report(name, mode + tag, row)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
