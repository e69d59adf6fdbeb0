"""The CPU backend's timings of the embedded example, evaluation after evaluation: the reward, which
baseline the torch.compile time came from (paired, stored or re-timed), the eager, compile and kernel
medians, and the judge's own eager times per batch (its trace: the verification calls' batches of one
or two against the full batches of the timed calls) with the minor page faults inside its timed runs.

    python benchmarks/cpu_eager_probe.py --cache-dir DIR [--runs 3] [--config "dict(guard=False)"]

The first run of a fresh DIR times torch.compile paired; the later ones should take the stored time.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from pathlib import Path

os.environ["CUDA_AGENT_TRACE_CALLS"] = "1"   # the judge's batch lines, read back from the log

sys.path.insert(0, str(Path(__file__).resolve().parent))
from turnaround import EXAMPLE, workspace_edit  # noqa: E402

from cuda_agent.env import EvalConfig, evaluate  # noqa: E402
from cuda_agent.tasks import load_task  # noqa: E402

BATCH = re.compile(r"judge batch trace n=(\d+) .*?(?:minor faults=(\d+) )?eager_ms (.*)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cache-dir", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--config", default="dict()", help="more EvalConfig fields, as a Python dict")
    args = parser.parse_args()
    config = EvalConfig(backend="cpu", cache_dir=args.cache_dir, prewarm=True,
                        **{"compile_baseline": True, **eval(args.config)})
    task = load_task(EXAMPLE / "model.py")
    for run in range(args.runs):
        r = evaluate(task, workspace_edit("cpu", 1), config)
        small, full, faults = [], [], []
        for n, fault, times in BATCH.findall(r.log):
            (small if int(n) <= 2 else full).extend(float(t) for t in times.split())
            faults.append(int(fault) if fault else None)
        med = lambda v: statistics.median(v) if v else float("nan")   # noqa: E731
        print(f"run {run}: reward={r.reward} source={r.baseline_source} eager_ms={r.eager_ms:.3f} "
              f"compile_ms={r.compile_ms:.3f} kernel_ms={r.kernel_ms:.3f} | judge eager median: batches of "
              f"1-2 {med(small):.3f} ({len(small)}), full {med(full):.3f} ({len(full)}) | faults per batch "
              f"{faults}", flush=True)


if __name__ == "__main__":
    main()
