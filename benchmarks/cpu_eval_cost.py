"""What one CPU evaluation costs, the code of this checkout against an older source tree.

Each side runs in processes of its own (PYTHONPATH at its `src`): a child process loads the task and the
solution, evaluates it `--evals` times in a row (the first pays what a process pays once, e.g. reading a
library's symbol table; the later ones are what an evaluation costs a long-lived harness such as a pool)
and reports, per evaluation, its wall time, the harness process's CPU time (all of its threads), the
result's phases, its speedup against eager and the empty calls' medians (the candidate's and its twin's). The parent adds the CPU time of the child's whole process tree (the judge, the candidate
and their sandboxes included, imports too). The two sides alternate pair by pair (old, new, then new,
old, ...), so a load that comes and goes on the machine falls on both alike. One unmeasured run per side
first fills the build cache. Tasks: the embedded example (running_mean with its CPU solution) and
KernelBench level1/19 (ReLU) scaled by `--scale`, solved by a plain C++ loop.

For the new side, where the modules exist, the harness's own steps are timed by wrapping them in the
child: the calibrating calls, `outside.own_memory`, the op sampling's set-up, start and finish (of
which symbolization and the symbol tables' reading), and the drain thread. Each is its wall and its
thread's CPU time summed over the evaluation.

    python benchmarks/cpu_eval_cost.py --old-src OLD/src [--new-src NEW/src] [--pairs 5] [--evals 2]
                                       [--scale 0.03125] [--tasks example,relu] [--kernelbench DIR]
                                       [--json out.json]

Make the old tree with e.g. `git archive <commit> src | tar -x -C OLD`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KERNELBENCH = ROOT.parent / "shared" / "kernelbench"

RELU_MODEL_NEW = '''import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.relu(x)
'''
RELU_KERNEL = '''#include <torch/extension.h>

torch::Tensor relu(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32 && x.is_contiguous(),
                "a contiguous float32 CPU tensor is expected");
    auto out = torch::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* o = out.data_ptr<float>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = in[i] > 0.f ? in[i] : 0.f;
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("relu", &relu); }
'''

# -- the child: evaluations in one process -------------------------------------------------------


# the steps timed on the new side (install_probes), in the order the table lists them
PROBES = ("calibration calls", "twin calls", "own_memory (maps)", "sampling set-up", "sampling start", "sampling finish",
          "of which symbolize", "of which symbol tables", "drain thread")


class Probes:
    """Wall and thread-CPU seconds of wrapped functions, summed per name."""

    def __init__(self):
        self.seconds: dict[str, list[float]] = {}

    def wrap(self, owner, attribute: str, name: str) -> None:
        original = getattr(owner, attribute)

        def timed(*args, **kwargs):
            wall, cpu = time.perf_counter(), time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                total = self.seconds.setdefault(name, [0.0, 0.0, 0])
                total[0] += time.perf_counter() - wall
                total[1] += time.thread_time() - cpu
                total[2] += 1

        setattr(owner, attribute, timed)

    def take(self) -> dict:
        taken = {name: {"wall_s": round(w, 4), "cpu_s": round(c, 4), "calls": n}
                 for name, (w, c, n) in self.seconds.items()}
        self.seconds = {}
        return taken


def install_probes(probes: Probes) -> None:
    """The harness steps the newer code added, where this source tree has them."""
    import importlib

    def module(name):
        try:
            return importlib.import_module(name)
        except ImportError:
            return None

    calibration = module("cuda_agent.env.run.calibration")
    if calibration is not None:
        probes.wrap(calibration.Calibration, "_calibrate", "calibration calls")
    twin = module("cuda_agent.env.run.twin")
    if twin is not None:
        probes.wrap(twin.Twin, "_twin_call", "twin calls")
    outside = module("cuda_agent.env.measure.outside")
    if outside is not None and hasattr(outside, "own_memory"):
        probes.wrap(outside, "own_memory", "own_memory (maps)")
    op_samples = module("cuda_agent.env.rules.op_samples")
    if op_samples is not None:
        probes.wrap(op_samples.OpSampling, "__init__", "sampling set-up")
        probes.wrap(op_samples.OpSampling, "start", "sampling start")
        probes.wrap(op_samples.OpSampling, "finish", "sampling finish")
        probes.wrap(op_samples.OpSampling, "_drain_while_running", "drain thread")
    symbolize = module("cuda_agent.env.measure.symbolize")
    if symbolize is not None:
        probes.wrap(symbolize.Symbolizer, "resolve", "of which symbolize")
        probes.wrap(symbolize.ElfSymbols, "__init__", "of which symbol tables")


def load(task_name: str, scale: float, kernelbench: Path):
    from dataclasses import replace

    from cuda_agent.tasks import Solution, load_solution, load_task

    if task_name == "example":
        folder = ROOT / "src" / "cuda_agent" / "examples" / "running_mean"
        task = replace(load_task(str(folder / "model.py")), name="examples/running_mean")
        return task, load_solution(folder / "solution_cpu")
    if task_name == "relu":
        from cuda_agent.tasks.scale import scale_task

        task = scale_task(load_task("level1/19", kernelbench), scale).task
        return task, Solution({"model_new.py": RELU_MODEL_NEW, "kernels/relu.cpp": RELU_KERNEL})
    raise SystemExit(f"unknown task {task_name}")


def overheads(log: str) -> dict:
    """The empty calls' median CPU ms in the evaluation's logged rounds (CUDA_AGENT_LOG_ROUNDS=1): the
    candidate's own and, where there is one, its twin's."""
    line = next((l for l in reversed(log.splitlines()) if l.startswith("rounds ")), None)
    if line is None:
        return {}
    logged = json.loads(line[len("rounds "):])
    return {key: median(logged[key]) for key in ("null_walls", "twin_walls", "calibrated") if logged.get(key)}


def child(task_name: str, evals: int, scale: float, kernelbench: Path) -> None:
    from cuda_agent.env.config import EvalConfig
    from cuda_agent.env.run.evaluation import evaluate

    probes = Probes()
    install_probes(probes)
    task, solution = load(task_name, scale, kernelbench)
    config = EvalConfig(backend="cpu")
    records = []
    for _ in range(evals):
        wall, cpu = time.perf_counter(), time.process_time()
        result = evaluate(task, solution, config)
        records.append({"wall_s": time.perf_counter() - wall, "harness_cpu_s": time.process_time() - cpu,
                        "correct": result.correct, "error": result.error and str(result.error)[:300],
                        "phases": {k: v for k, v in result.phase_seconds.items() if "." not in k},
                        "timed_calls": getattr(result.timings.get("kernel"), "iters", None),
                        "speedup": result.speedup_vs_eager, "reward": result.reward,
                        "overhead_ms": overheads(result.log), "probes": probes.take()})
    print("CHILD " + json.dumps(records))


# -- the parent: the two sides alternated -------------------------------------------------------


def run_side(src: Path, task_name: str, evals: int, scale: float, kernelbench: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "CUDA_AGENT_LOG_ROUNDS": "1"}
    env.pop("CUDA_AGENT_TRACE_CALLS", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", task_name, "--evals", str(evals),
                           "--scale", str(scale),
                           "--kernelbench", str(kernelbench)], env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next((l for l in done.stdout.splitlines() if l.startswith("CHILD ")), None)
    if done.returncode != 0 or line is None:
        raise SystemExit(f"{src} {task_name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    records = json.loads(line[len("CHILD "):])
    for record in records:
        if not record["correct"]:
            raise SystemExit(f"{src} {task_name}: not correct: {record['error']}")
    tree = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return {"records": records, "tree_cpu_s": tree, "process_wall_s": wall}


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(task_name: str, runs: dict[str, list[dict]], evals: int) -> list[str]:
    lines = [f"{task_name}: median of {len(runs['new'])} runs per side (each run {evals} evaluation(s) in one process)",
             f"  {'measure':52s} {'old':>9s} {'new':>9s} {'new/old':>8s}"]

    def row(name: str, pick) -> None:
        old, new = median([pick(r) for r in runs["old"]]), median([pick(r) for r in runs["new"]])
        ratio = new / old if old else float("nan")
        lines.append(f"  {name:52s} {old:9.3f} {new:9.3f} {ratio:8.2f}")

    for index in range(evals):
        which = "1st" if index == 0 else f"{index + 1}th" if index > 2 else ("2nd", "3rd")[index - 1]
        row(f"{which} evaluation: wall s", lambda r: r["records"][index]["wall_s"])
        # the baselines phase re-times torch.compile where the stored time no longer agrees (a load that
        # came and went): seconds that have nothing to do with either side's code
        row(f"{which} evaluation: wall s less baselines", lambda r: r["records"][index]["wall_s"] -
            r["records"][index]["phases"].get("baselines", 0.0))
        row(f"{which} evaluation: harness process CPU s", lambda r: r["records"][index]["harness_cpu_s"])
        for phase in ("compile", "verify", "profile", "baselines"):
            row(f"  {phase} phase wall s", lambda r: r["records"][index]["phases"].get(phase, 0.0))
        row(f"{which} evaluation: speedup vs eager", lambda r: r["records"][index].get("speedup") or float("nan"))
        for key in ("null_walls", "twin_walls"):
            row(f"  empty calls' median ms ({key})", lambda r: r["records"][index].get("overhead_ms", {}).get(key, float("nan")))
    row("process tree CPU s (all evaluations, imports)", lambda r: r["tree_cpu_s"])
    row("child process wall s", lambda r: r["process_wall_s"])
    calls = [r["records"][-1]["timed_calls"] for r in runs["old"] + runs["new"]]
    lines.append(f"  timed calls (last evaluation), old/new: {[r['records'][-1]['timed_calls'] for r in runs['old']]} / "
                 f"{[r['records'][-1]['timed_calls'] for r in runs['new']]}" if any(calls) else "")
    names = [name for name in PROBES if any(name in record["probes"] for r in runs["new"] for record in r["records"])]
    if names:
        lines.append("  new side's harness steps, per evaluation (median wall s, thread CPU s, calls):")
        for index in range(evals):
            for name in names:
                got = [r["records"][index]["probes"].get(name, {}) for r in runs["new"]]
                wall, cpu, calls = (median([g.get(key, 0.0) for g in got]) for key in ("wall_s", "cpu_s", "calls"))
                lines.append(f"    evaluation {index + 1} {name:26s} {wall:8.4f} {cpu:8.4f} {calls:6.0f}")
    return [line for line in lines if line]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old-src", type=Path, help="the older source tree's src folder")
    parser.add_argument("--new-src", type=Path, default=ROOT / "src", help="the newer one (default: this checkout's)")
    parser.add_argument("--kernelbench", type=Path, default=KERNELBENCH, help="KernelBench's folder (level1/...)")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--evals", type=int, default=2, help="evaluations per process")
    parser.add_argument("--scale", type=float, default=0.03125, help="level1/19's scale")
    parser.add_argument("--tasks", default="example,relu")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.evals, args.scale, args.kernelbench)
    if args.old_src is None:
        parser.error("--old-src is required")
    sides = {"old": args.old_src.resolve(), "new": args.new_src.resolve()}
    out: dict[str, dict] = {}
    for task_name in args.tasks.split(","):
        for side, src in sides.items():   # fills the build cache, not measured
            run_side(src, task_name, 1, args.scale, args.kernelbench)
        runs: dict[str, list[dict]] = {"old": [], "new": []}
        for pair in range(args.pairs):
            order = ("old", "new") if pair % 2 == 0 else ("new", "old")
            for side in order:
                runs[side].append(run_side(sides[side], task_name, args.evals, args.scale, args.kernelbench))
            print(f"{task_name} pair {pair + 1}: " + ", ".join(
                f"{side} {runs[side][-1]['records'][-1]['wall_s']:.2f} s" for side in order), flush=True)
        print("\n".join(table(task_name, runs, args.evals)), flush=True)
        out[task_name] = runs
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
