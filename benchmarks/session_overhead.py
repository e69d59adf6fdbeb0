"""Per-call overhead of a KernelSession for tools that evaluate nothing (read, todo, grep).

What a step adds around the tool itself: the call's record, restoring the protected files, reading
back the workspace's result records, and for `astep` the hop to a worker thread and back. Measured
three ways, each line printed as soon as it is known:
  tool       the tool alone (`call_tool`), the floor
  step       `session.step([call])`, one session, called in a loop
  astep x1   `await session.astep([call])`, one session: the step plus the hop to a worker thread
  astep x N  N sessions as coroutines of one event loop, each stepping in a loop: how long a call
             takes from the caller's side with N in flight (mostly waiting for the others: the
             process has one interpreter lock), and the throughput; 1/throughput is the cost of a
             call when many share the process

    python benchmarks/session_overhead.py [--calls 300] [--sessions 64] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

from cuda_agent.agent import KernelSession, SessionLimits
from cuda_agent.agent.tools import call_tool
from cuda_agent.env.config import EvalConfig
from cuda_agent.tasks import load_task

TASK = Path(__file__).resolve().parents[1] / "src" / "cuda_agent" / "examples" / "bias_relu" / "model.py"
CALLS = {
    "read": {"path": "model.py"},
    "todo": {"todos": [{"content": "write the kernel", "status": "in_progress"}, {"content": "profile"}]},
    "grep": {"pattern": "def forward", "path": "model.py"},
}


def never_evaluates(task, solution, config):
    raise AssertionError("a non-evaluating tool evaluated something")


def session(root: Path) -> KernelSession:
    return KernelSession(load_task(str(TASK)), root, eval_config=EvalConfig(backend="cpu"), evaluator=never_evaluates,
                         limits=SessionLimits(max_turns=None))


def ms(samples: list[float]) -> str:
    return f"median {statistics.median(samples) * 1e3:6.3f} ms, mean {statistics.fmean(samples) * 1e3:6.3f} ms"


def timed(call: Callable[[], object], calls: int) -> list[float]:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return samples


def bare_tool(root: Path, name: str, calls: int) -> list[float]:
    s = session(root)
    s.reset()
    return timed(lambda: call_tool(s.tools, s.ctx, name, CALLS[name]), calls)


def sync_steps(root: Path, name: str, calls: int) -> list[float]:
    s = session(root)
    s.reset()
    return timed(lambda: s.step([{"name": name, "arguments": CALLS[name]}]), calls)


async def async_steps(root: Path, name: str, calls: int, sessions: int) -> tuple[list[float], float]:
    async def one(i: int) -> list[float]:
        s = session(root / f"s{i}")
        await s.areset()
        samples = []
        for _ in range(calls):
            start = time.perf_counter()
            await s.astep([{"name": name, "arguments": CALLS[name]}])
            samples.append(time.perf_counter() - start)
        return samples

    start = time.perf_counter()
    per_session = await asyncio.gather(*(one(i) for i in range(sessions)))
    wall = time.perf_counter() - start
    return [x for samples in per_session for x in samples], wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300, help="calls per measurement (and per session)")
    parser.add_argument("--sessions", type=int, default=64, help="concurrent sessions for astep")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    figures = {}
    with tempfile.TemporaryDirectory(prefix="session-overhead-") as tmp:
        root = Path(tmp)
        for name in CALLS:
            tool = bare_tool(root / f"{name}-tool", name, args.calls)
            step = sync_steps(root / f"{name}-step", name, args.calls)
            overhead = statistics.median(step) - statistics.median(tool)
            print(f"{name:5} tool       {ms(tool)}", flush=True)
            print(f"{name:5} step       {ms(step)}   overhead {overhead * 1e3:.3f} ms", flush=True)
            single, _ = asyncio.run(async_steps(root / f"{name}-async1", name, args.calls, 1))
            hop = statistics.median(single) - statistics.median(tool)
            print(f"{name:5} astep x1   {ms(single)}   overhead {hop * 1e3:.3f} ms", flush=True)
            concurrent, wall = asyncio.run(async_steps(root / f"{name}-async", name, max(1, args.calls // 4),
                                                       args.sessions))
            rate = len(concurrent) / wall
            print(f"{name:5} astep x{args.sessions:<2} {ms(concurrent)}   throughput {rate:,.0f} calls/s "
                  f"({1e3 / rate:.2f} ms a call)", flush=True)
            figures[name] = {"tool_median_ms": statistics.median(tool) * 1e3,
                             "step_median_ms": statistics.median(step) * 1e3,
                             "step_overhead_ms": overhead * 1e3,
                             "astep1_median_ms": statistics.median(single) * 1e3,
                             "astep_sessions": args.sessions,
                             "astep_median_ms": statistics.median(concurrent) * 1e3,
                             "astep_calls_per_s": rate}
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
