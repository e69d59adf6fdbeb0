"""What the harness's defences cost the host inside the candidate's timed region (diagnostic).

Loads the embedded bias_relu example's single-file solution the way the candidate's worker does
(our load_inline, the counting extension proxy) and calls its forward on a tiny input many times,
timing each call's host wall time, under:

  bare      the module's forward, extension calls not counted (COUNTER.guard unset)
  proxy     + the proxy noting kernel storages for the guard
  callback  + the native guard's RecordFunction callback installed (recording off)
  guarded   + recording switched on around the call (what every timed call of an evaluation runs)

On a GPU it also times each mode with CUDA events, so the host cost shows up as the measured
kernel time it adds. `--gap` puts between calls some of what the harness does there: `poison` (the
allocator's NaN fill), `spin` (2 ms busy on the host, as if waiting for a message without sleeping),
`sleep` (2 ms asleep, as a worker blocked on its pipe is), joined with `+`. Runs on the CPU backend
too (there the host cost is all there is).

    python benchmarks/diag/host_overhead.py [--backend cpu|cuda] [--calls 2000] [--gap poison+sleep]
"""
import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from cuda_agent.env.measure import timing  # noqa: E402
from cuda_agent.env.builds.compiler import build_extension  # noqa: E402
from cuda_agent.env.rules.guard import COUNTER, NativeGuard, build_guard, poison_allocator  # noqa: E402
from cuda_agent.env.workers.candidate import load_candidate  # noqa: E402

EXAMPLE = ROOT / "src" / "cuda_agent" / "examples" / "bias_relu"


def load(backend: str, cache: Path):
    def build(name, files, **flags):
        return build_extension(name, files, backend, cache, **{k: v for k, v in flags.items() if v}).path

    with tempfile.TemporaryDirectory() as tmp:
        solution = Path(tmp) / "solution"
        solution.mkdir()
        (solution / "model_new.py").write_text((EXAMPLE / f"solution_{backend}_inline.py").read_text())
        model_class, _ = load_candidate(solution, build)
    return model_class


def between_calls(gap: str, device: torch.device) -> None:
    parts = set(filter(None, gap.split("+")))
    if "poison" in parts:
        poison_allocator(device)
        timing.device_synchronize(device)
    if "spin" in parts:
        timing.settle(0.002)
    if "sleep" in parts:
        time.sleep(0.002)


def run_mode(mode: str, model, inputs, guard: NativeGuard, device: torch.device, calls: int, gap: str):
    COUNTER.guard = guard if mode != "bare" else None
    host, events = [], []
    with torch.no_grad():
        for i in range(calls + 20):
            between_calls(gap, device)
            fn = model
            if mode in ("callback", "guarded"):
                guard.begin(inputs)
            if mode == "guarded":
                fn = guard.watching(model)
            timing.device_synchronize(device)
            t0 = timing._perf_counter()
            ms, _, _ = timing.time_once(fn, inputs, device)
            wall = (timing._perf_counter() - t0) * 1e3
            if mode in ("callback", "guarded"):
                guard.end()
            if i >= 20:
                host.append(wall)
                events.append(ms)
    COUNTER.guard = None
    return host, events


def summary(samples):
    q = statistics.quantiles(samples, n=10)
    return f"{statistics.median(samples) * 1e3:8.1f} us (p10 {q[0] * 1e3:.1f}, p90 {q[-1] * 1e3:.1f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--gap", default="", help="between calls: poison, spin, sleep, joined with +")
    parser.add_argument("--cache", type=Path, default=ROOT / ".cache" / "diag")
    args = parser.parse_args()
    device = torch.device("cuda" if args.backend == "cuda" else "cpu")
    guard = NativeGuard(build_guard(args.cache))
    model = load(args.backend, args.cache)(16).to(device).eval()
    inputs = [torch.randn(4, 16, device=device)]
    print(f"{args.backend}: torch {torch.__version__}, {args.calls} calls per mode, tiny input (4 x 16)"
          + (f", between calls: {args.gap}" if args.gap else ", back to back"))
    for mode in ("bare", "proxy", "callback", "guarded", "bare"):
        host, events = run_mode(mode, model, inputs, guard, device, args.calls, args.gap)
        line = f"{mode:8s} host {summary(host)}"
        if device.type == "cuda":
            line += f"   events {summary(events)}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
