"""What made timed calls slow under load, from pool_throughput's logs (runs anywhere, reads files).

    CUDA_AGENT_LOG_ROUNDS=1 python benchmarks/pool_throughput.py ... --logs DIR --lock-log LOCK
    python benchmarks/rounds_report.py DIR/*.rounds.jsonl [--lock-log LOCK] [--replay 0.75]

Per file (one mode): the timed calls' device times, the share more than 5 % above the fastest, the
evaluations' medians' spread, and the host's time to queue the forward beside them (how often it was
the longer: hold.call_times counts a floor of it, not each call's own); with the lock log, the share
of slow calls among those sent while some worker was setting up its device (its CUDA context and
first kernels, done without the lock) and among the others. `--replay PERCENT` runs the kernel side
of the stop rule over each evaluation's logged calls again (measures.precise_enough: the median of
hold.call_times within PERCENT, and the host floor too where it decides; the speedups' part left out)
and gives the medians' spread where each would have stopped, and where the floor's own check were
left out.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from cuda_agent.env.run.scoring import round_times, side_measures
from cuda_agent.env.measure.hold import call_times, floor_precise
from cuda_agent.env.infra.lock_log import read_log
from cuda_agent.env.measure.stats import median_precision, spread

SLOW = 1.05


def _overlaps(start: float, end: float, windows: list[tuple[float, float]]) -> bool:
    return any(a < end and start < b for a, b in windows)


def setup_windows(lock_log: Path) -> list[tuple[float, float]]:
    """When workers were setting up their devices (the lock log's O lines)."""
    return [(h["got"], h["released"]) for h in read_log(lock_log, outside=True)]


def _spread(values: list[float]) -> float:
    return round(spread(values), 4)


def replay(rounds: list[dict], precision: float, min_calls: int = 30, floor_check: bool = True) -> float:
    """The median an evaluation would have reported had its timing stopped by the kernel side's rule."""
    device, host = side_measures(rounds, "kernel")
    for n in range(min_calls, len(rounds) + 1):
        if median_precision(call_times(device[:n], host[:n])) <= precision and \
                (not floor_check or floor_precise(device[:n], host[:n], precision)):
            break
    return statistics.median(call_times(device[:n], host[:n]))


def report(path: Path, windows: list[tuple[float, float]] | None, precision: float | None = None) -> dict:
    evaluations = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rounds = [r for e in evaluations for r in e["rounds"]]
    fastest = min(r["kernel"] for r in rounds)
    slow = [r for r in rounds if r["kernel"] > SLOW * fastest]
    # each evaluation's median as it reports it (hold.call_times: device time, host floor)
    medians = [statistics.median(round_times(e["rounds"], "kernel")) for e in evaluations]
    row = {"mode": path.name.removesuffix(".rounds.jsonl"), "evaluations": len(evaluations), "calls": len(rounds),
           "fastest_ms": round(fastest, 4), "median_ms": round(statistics.median(r["kernel"] for r in rounds), 4),
           "slow_share": round(len(slow) / len(rounds), 3),
           "medians_spread": _spread(medians)}
    held = [r for r in rounds if r.get("kernel_host") is not None]
    if held:   # the host's time to queue each forward beside the device's (the kernel time counts both)
        row["host_ms_median"] = round(statistics.median(r["kernel_host"] for r in held), 4)
        row["host_over_device_share"] = round(sum(r["kernel_host"] > r["kernel"] for r in held) / len(held), 3)
    if windows is not None and all(r.get("sent") is not None for r in rounds):
        during = [r for r in rounds if _overlaps(r["sent"], r["sent"] + r["wall"] / 1e3, windows)]
        apart = [r for r in rounds if r not in during]
        for name, part in (("during_setup", during), ("apart", apart)):
            row[name] = {"calls": len(part),
                         "slow_share": round(sum(r["kernel"] > SLOW * fastest for r in part) / len(part), 3)
                         if part else None}
    if precision is not None:
        row["replayed_spread"] = _spread([replay(e["rounds"], precision) for e in evaluations])
        row["replayed_spread_without_floor_check"] = _spread([replay(e["rounds"], precision, floor_check=False)
                                                              for e in evaluations])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=Path, nargs="+", help="*.rounds.jsonl files (pool_throughput --logs)")
    parser.add_argument("--lock-log", type=Path, default=None)
    parser.add_argument("--replay", type=float, default=None, metavar="PERCENT",
                        help="replay the kernel side of the stop rule at this precision")
    args = parser.parse_args()
    windows = setup_windows(args.lock_log) if args.lock_log else None
    for path in args.rounds:
        print(json.dumps(report(path, windows, args.replay / 100 if args.replay else None)))


if __name__ == "__main__":
    main()
