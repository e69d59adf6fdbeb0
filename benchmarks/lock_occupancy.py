"""How busy a device's lock was, and who kept it: the lock log of a run (CUDA_AGENT_LOCK_LOG=FILE).

    CUDA_AGENT_LOCK_LOG=/tmp/lock.log python benchmarks/pool_throughput.py ...
    python benchmarks/lock_occupancy.py /tmp/lock.log [--json out.json]

Only timed work holds the lock alone; the rest of the evaluations' device work holds it shared
(locks.py). When evaluations queue for the lock, its busy time per evaluation sets the rate, so this
splits the run's wall time into held alone, held shared (by anyone), handed over (free while someone
waited: wake-ups of the next holder) and idle, and lists each kind of hold (its label) with its count
and durations.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cuda_agent.env.infra.lock_log import by_label, occupancy, read_log


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    holds = read_log(args.log)
    report = {"occupancy": occupancy(holds), "holds": by_label(holds)}
    print(json.dumps(report["occupancy"]))
    print(f"{'label':34} {'mode':6} {'holds':>6} {'held med ms':>11} {'held s':>8} {'wait med ms':>11} {'wait s':>8}")
    for row in report["holds"]:
        print(f"{row['label']:34} {row['mode']:6} {row['holds']:6d} {row['held_median_ms']:11.3f} "
              f"{row['held_total_s']:8.3f} {row['wait_median_ms']:11.3f} {row['wait_total_s']:8.3f}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
