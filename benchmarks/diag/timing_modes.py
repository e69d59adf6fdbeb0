"""Where the spread of kernel times between evaluations comes from (GPU diagnostic).

Times each task's eager reference (real CUDA kernels of the sizes the fidelity benchmark uses) in
one process under several timing methods, each repeated REPS times with the repetitions of all
methods interleaved (so slow drift hits every method alike), and prints per method the spread
(max - min) / median of the repetitions' medians, and the per-call spread within a repetition.
The last column repeats the harness's own method in fresh processes (a new CUDA context and new
memory addresses per repetition, as each evaluation has):

  kernelbench   one input set, no flush; start event, call, end event, synchronize (KernelBench)
  flush         + L2 flush and a device sync before the start event (the harness's time_once)
  flush-nosync  flush, then start event without waiting for it (Triton's do_bench)
  fresh         + fresh inputs drawn on the GPU before each call
  poison        + the harness's 2 GiB NaN fill before each call (guard.poison_allocator)
  gap           + 5 ms of host idle before each call (the harness's IPC between calls)
  settleX       the harness's time_once with settle_s = X ms (fresh inputs, poisoned allocator, sync,
                X ms idle, flush, sync, events)
  process       `flush` in a fresh process per repetition

    python benchmarks/diag/timing_modes.py [--modes kernelbench,flush,settle1,settle5] [--no-process]
"""
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cuda_agent.env.measure import timing  # noqa: E402
from cuda_agent.env.workers.draws import draw_inputs  # noqa: E402
from cuda_agent.env.rules.guard import poison_allocator  # noqa: E402
from cuda_agent.tasks import load_task  # noqa: E402
from cuda_agent.tasks.task import load_task_module  # noqa: E402

FIDELITY = ROOT / "benchmarks" / "fidelity"
TASKS = {"elementwise-small": ROOT / "src" / "cuda_agent" / "examples" / "bias_relu" / "model.py", "bias-relu-8192": FIDELITY / "bias_relu_large.py",
         "hinge-64M": FIDELITY / "hinge_large.py", "sgemm-2048": FIDELITY / "sgemm_2048.py"}
CALLS = 100
REPS = int(os.environ.get("REPS", 5))
DEVICE = torch.device("cuda")


def setup(path: Path):
    task = load_task(path)
    module = load_task_module(task.code, "diag_task")
    torch.manual_seed(0)
    model = module.Model(*module.get_init_inputs()).to(DEVICE).eval()
    return module, model


def one_rep(mode: str, module, model, flush) -> list[float]:
    fixed = draw_inputs(module, 1, DEVICE)
    samples = []
    with torch.no_grad():
        for i in range(10 + CALLS):
            harness_like = mode in ("fresh", "poison", "gap") or mode.startswith("settle")
            inputs = draw_inputs(module, 100 + i, DEVICE) if harness_like else fixed
            if mode in ("poison", "gap") or mode.startswith("settle"):
                poison_allocator(DEVICE)
            if mode == "gap":
                timing.device_synchronize(DEVICE)
                time.sleep(0.005)
            if mode in ("kernelbench", "flush-nosync"):   # events around the call, no sync before it
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                if mode == "flush-nosync":
                    flush()
                start.record()
                model(*inputs)
                end.record()
                torch.cuda.synchronize()
                ms = start.elapsed_time(end)
            elif mode.startswith("settle"):
                ms, _, _ = timing.time_once(model, inputs, DEVICE, flush, settle_s=float(mode[6:]) / 1e3)
            else:
                ms, _, _ = timing.time_once(model, inputs, DEVICE, flush)
            if i >= 10:
                samples.append(ms)
    return samples


def spread(values):
    return (max(values) - min(values)) / statistics.median(values)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--child":   # one `flush` repetition in this process
        module, model = setup(TASKS[sys.argv[2]])
        print(statistics.median(one_rep("flush", module, model, timing.L2Flusher(DEVICE, True))))
        return
    modes = ["kernelbench", "flush", "flush-nosync", "fresh", "poison", "gap"]
    if "--modes" in sys.argv:
        modes = sys.argv[sys.argv.index("--modes") + 1].split(",")
    in_processes = "--no-process" not in sys.argv
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; {REPS} repetitions of {CALLS} calls")
    print(f"{'task':18s} " + " ".join(f"{m:>20s}" for m in modes + ["process"] * in_processes))
    for name, path in TASKS.items():
        module, model = setup(path)
        flush = timing.L2Flusher(DEVICE, True)
        medians = {m: [] for m in modes}
        within = {m: [] for m in modes}
        for _ in range(REPS):
            for mode in modes:
                samples = one_rep(mode, module, model, flush)
                medians[mode].append(statistics.median(samples))
                q1, _, q3 = statistics.quantiles(samples, n=4)
                within[mode].append((q3 - q1) / statistics.median(samples))
        cells = [f"{statistics.median(medians[m]):.4f} {100 * spread(medians[m]):4.1f}%/{100 * statistics.median(within[m]):4.1f}%"
                 for m in modes]
        if in_processes:
            procs = [float(subprocess.run([sys.executable, __file__, "--child", name], capture_output=True, text=True,
                                          check=True).stdout.split()[-1]) for _ in range(REPS)]
            cells.append(f"{statistics.median(procs):.4f} {100 * spread(procs):4.1f}%")
        print(f"{name:18s} " + " ".join(f"{c:>20s}" for c in cells), flush=True)
    print("cells: median ms, spread of the repetitions' medians / per-call interquartile range over the median")


if __name__ == "__main__":
    main()
