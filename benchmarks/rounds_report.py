"""What made timed calls slow under load, from pool_throughput's logs (runs anywhere, reads files).

    CUDA_AGENT_LOG_ROUNDS=1 python benchmarks/pool_throughput.py ... --logs DIR --lock-log LOCK
    python benchmarks/rounds_report.py DIR/*.rounds.jsonl [--lock-log LOCK]

Per file (one mode): the timed calls, the share more than 5 % above the fastest, and of those how
many the device decided and how many the host did (a held call counts the larger of the device's
time and the host's time to queue the forward: hold.py); with the lock log, the share of slow calls
among those sent while some worker was setting up its device (its CUDA context and first kernels,
done without the lock) and among the others.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

SLOW = 1.05


def _overlaps(start: float, end: float, windows: list[tuple[float, float]]) -> bool:
    return any(a < end and start < b for a, b in windows)


def report(path: Path, windows: list[tuple[float, float]] | None) -> dict:
    evaluations = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rounds = [r for e in evaluations for r in e["rounds"]]
    fastest = min(r["kernel"] for r in rounds)
    slow = [r for r in rounds if r["kernel"] > SLOW * fastest]
    medians = [statistics.median(r["kernel"] for r in e["rounds"]) for e in evaluations]
    row = {"mode": path.name.removesuffix(".rounds.jsonl"), "evaluations": len(evaluations), "calls": len(rounds),
           "fastest_ms": round(fastest, 4), "median_ms": round(statistics.median(r["kernel"] for r in rounds), 4),
           "slow_share": round(len(slow) / len(rounds), 3),
           "medians_spread": round((max(medians) - min(medians)) / statistics.median(medians), 4)}
    split = [r for r in slow if r.get("split")]
    if split:   # which side set the slow calls' time
        row["slow_by_host"] = round(sum(r["split"][1] > r["split"][0] for r in split) / len(split), 3)
        row["device_ms_median"] = round(statistics.median(r["split"][0] for r in rounds if r.get("split")), 4)
        row["host_ms_median"] = round(statistics.median(r["split"][1] for r in rounds if r.get("split")), 4)
    if windows is not None and all(r.get("sent") for r in rounds):
        during = [r for r in rounds if _overlaps(r["sent"], r["sent"] + r["wall"] / 1e3, windows)]
        apart = [r for r in rounds if r not in during]
        for name, part in (("during_setup", during), ("apart", apart)):
            row[name] = {"calls": len(part),
                         "slow_share": round(sum(r["kernel"] > SLOW * fastest for r in part) / len(part), 3)
                         if part else None}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=Path, nargs="+", help="*.rounds.jsonl files (pool_throughput --logs)")
    parser.add_argument("--lock-log", type=Path, default=None)
    args = parser.parse_args()
    windows = None
    if args.lock_log:
        from cuda_agent.env.lock_log import read_log

        windows = [(h["got"], h["released"]) for h in read_log(args.lock_log, outside=True)]
    for path in args.rounds:
        print(json.dumps(report(path, windows)))


if __name__ == "__main__":
    main()
