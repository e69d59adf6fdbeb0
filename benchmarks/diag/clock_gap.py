"""Why an honest CUDA call's wall time exceeds an empty call's by more than its kernel (GPU diagnostic).
Runs row_sum (128 MB input) and the example elementwise with per-call traces (CUDA_AGENT_TRACE_CALLS=1)
and the clock check off, and prints the traces' medians by step."""
import os, re, statistics, sys
from pathlib import Path
os.environ["CUDA_AGENT_TRACE_CALLS"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from cuda_agent.env import EvalConfig, evaluate
from cuda_agent.tasks import load_task
from tests.env.helpers import example_task
from tests.gpu.helpers import workspace, SOLUTIONS
from cuda_agent.tasks import load_solution
from tests.env.helpers import EXAMPLES

cases = [("row_sum", load_task(SOLUTIONS / "row_sum" / "task.py"), workspace("row_sum")),
         ("elementwise", example_task(), load_solution(EXAMPLES / "solution_cuda"))]
for name, task, sol in cases:
    r = evaluate(task, sol, EvalConfig(backend="cuda", clock_check=False, cache_dir=os.environ["CUDA_AGENT_CACHE"]))
    rows = {"null": {}, "real": {}}
    for line in r.log.splitlines():
        m = re.match(r"call trace (null|real) (.*)", line)
        if m:
            for k, v in re.findall(r"(\w+)=([\d.]+)", m.group(2)):
                rows[m.group(1)].setdefault(k, []).append(float(v))
    print(name, "correct", r.correct, r.error and r.error.message[:200])
    for kind, steps in rows.items():
        print(f"  {kind:4s} n={len(steps.get('total', []))} " +
              " ".join(f"{k}={statistics.median(v):.3f}" for k, v in steps.items()))
