"""The edit loop's unchanged-workspace call: a protected command on files that did not change since
the last one answers from its record (agent/run_records.py) instead of evaluating again.

Measured in one run, on the embedded bias+ReLU task's workspace solution, alternating so that both
sides see the same machine:
  evaluated   `./verify` (or `./profile`) after a one-byte edit of model_new.py: a real evaluation
  answered    the same command again on the unchanged files: answered from its record
  tool        the same pair through `Workspace.run` in process (the tools' in-memory records)

    python benchmarks/unchanged_workspace.py [--backend cpu] [--repeats 3] [--profile] [--cache-dir DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from cuda_agent.agent.workspace import Workspace
from cuda_agent.env.config import EvalConfig
from cuda_agent.tasks import load_solution, load_task

EXAMPLE = Path(__file__).resolve().parents[1] / "src" / "cuda_agent" / "examples" / "bias_relu"
NOTE = "answered from its record"


def script(ws: Workspace, command: str) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run([str(ws.root / command)], cwd=ws.root, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"./{command} failed:\n{proc.stdout}{proc.stderr}")
    return seconds, proc.stdout


def touch(ws: Workspace) -> None:
    """A one-byte edit (a trailing newline more): other files, so the next command evaluates."""
    with open(ws.root / "model_new.py", "a") as fh:
        fh.write("\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="measure ./profile too")
    parser.add_argument("--cache-dir", type=Path, default=None, help="build cache (default: EvalConfig's)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    task = load_task(EXAMPLE / "model.py")
    solution = load_solution(EXAMPLE / ("solution_cuda" if args.backend == "cuda" else "solution_cpu"))
    rows: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="unchanged-ws-") as tmp:
        ws = Workspace.create(task, Path(tmp) / "ws", eval_config=EvalConfig(backend=args.backend, **(
            {"cache_dir": args.cache_dir} if args.cache_dir else {})))
        solution.write(ws.root)
        script(ws, "verify")   # builds and warms the caches: not counted
        commands = ["verify"] + (["profile"] if args.profile else [])
        for i in range(args.repeats):
            for command in commands:
                touch(ws)
                evaluated, out = script(ws, command)
                assert NOTE not in out, out
                answered, out = script(ws, command)
                assert NOTE in out, out
                rows.setdefault(f"./{command} evaluated", []).append(evaluated)
                rows.setdefault(f"./{command} answered", []).append(answered)
                touch(ws)
                start = time.perf_counter()
                outcome = ws.run(command)
                rows.setdefault(f"{command} tool evaluated", []).append(time.perf_counter() - start)
                start = time.perf_counter()
                again = ws.run(command)
                rows.setdefault(f"{command} tool answered", []).append(time.perf_counter() - start)
                assert outcome.answered_by is None and again.answered_by == command
                print(f"repeat {i + 1}: ./{command} {evaluated:.2f} s evaluated, {answered:.3f} s answered; "
                      f"tool {rows[f'{command} tool evaluated'][-1]:.2f} s, "
                      f"{rows[f'{command} tool answered'][-1] * 1e3:.1f} ms", flush=True)
    summary = {name: {"median_s": statistics.median(v), "runs": v} for name, v in rows.items()}
    print(f"\n{'call':28} median")
    for name, row in summary.items():
        print(f"{name:28} {row['median_s']:.3f} s")
    if args.json:
        args.json.write_text(json.dumps({"backend": args.backend, "rows": summary}, indent=1))


if __name__ == "__main__":
    main()
