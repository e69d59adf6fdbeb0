"""How much of the harness's own work stays in a CPU kernel's time: the embedded example's plain loop
evaluated again and again, with the empty calls reading the inputs and writing the output's bytes
(workers/touch.py, "touch") and without ("bare", as before that change), alternated in one process.

For each evaluation: the kernel's median as scored (its process's CPU time per call, measured from outside,
less the empty calls' median), the solution's own clock around its forward (the rounds' `own`, never
scored), what is left of the harness's work (kernel - own), eager's median and the speedup.

    python benchmarks/cpu_overhead_left.py --cache-dir DIR [--pairs 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

os.environ["CUDA_AGENT_LOG_ROUNDS"] = "1"   # every timed call's measures, read back from the result's log

sys.path.insert(0, str(Path(__file__).resolve().parent))
from turnaround import EXAMPLE, workspace_edit  # noqa: E402

from cuda_agent.env import EvalConfig, evaluate  # noqa: E402
from cuda_agent.env.run import rounds  # noqa: E402
from cuda_agent.tasks import load_task  # noqa: E402


def logged_rounds(result) -> dict:
    line = next(line for line in (result.log or "").splitlines() if line.startswith("rounds "))
    return json.loads(line[len("rounds "):])


def one(task, config, touch: bool) -> dict:
    saved = rounds.CallRounds._touch_bytes
    if not touch:   # the empty calls as before: nothing read or written
        rounds.CallRounds._touch_bytes = lambda self, call: 0
    try:
        result = evaluate(task, workspace_edit("cpu", 0), config)
    finally:
        rounds.CallRounds._touch_bytes = saved
    if not result.correct:
        raise SystemExit(f"the example failed: {result.error}")
    own = statistics.median(r["own"] for r in logged_rounds(result)["rounds"])
    return {"kernel": result.kernel_ms, "own": own, "left": result.kernel_ms - own, "eager": result.eager_ms,
            "speedup": result.speedup_vs_eager, "reward": result.reward}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache-dir", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=4)
    args = parser.parse_args()
    task = load_task(EXAMPLE / "model.py")
    config = EvalConfig(backend="cpu", cache_dir=args.cache_dir, prewarm=True)
    evaluate(task, workspace_edit("cpu", 0), config)   # builds and baselines cached, a spare pair started
    seen: dict[str, list[dict]] = {"bare": [], "touch": []}
    for pair in range(args.pairs):
        for name in ("bare", "touch") if pair % 2 == 0 else ("touch", "bare"):
            row = one(task, config, name == "touch")
            seen[name].append(row)
            print(f"{name:5} kernel {row['kernel']:.3f} ms, own {row['own']:.3f} ms, left {row['left']:+.3f} ms, "
                  f"eager {row['eager']:.3f} ms, speedup {row['speedup']:.2f}x, reward {row['reward']}", flush=True)
    for name, rows in seen.items():
        rewarded = sum(r["reward"] >= 2 for r in rows)
        print(f"{name}: median left {statistics.median(r['left'] for r in rows):+.3f} ms, median speedup "
              f"{statistics.median(r['speedup'] for r in rows):.2f}x, speed rewards {rewarded}/{len(rows)}")


if __name__ == "__main__":
    main()
