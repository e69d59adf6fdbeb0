"""The CUDA-graph baseline, in the judge: the reference's eager forward captured once in a CUDA graph
(torch.cuda.graphs), then replayed on fresh draws copied into the captured inputs, each replay timed
beside an eager call on the same draw, as the other baselines are (time_once, the same hold and L2
flush). A graph launches the whole forward at once, so it shows what eager PyTorch gives up to the
host's launches. Reported beside eager and torch.compile; the reward never reads it."""

from __future__ import annotations

from contextlib import nullcontext

import torch

from cuda_agent.env.measure import timing
from cuda_agent.env.measure.hold import Timer, call_times
from cuda_agent.env.rules.verify import tensors_in
from cuda_agent.env.workers.draws import draw_inputs

WARMUP = 3   # eager calls on a side stream before the capture (cuBLAS handles, the allocator's blocks)
# Inputs up to this size are drawn inside one exclusive hold over every timed call: each hold taken
# waits behind the other evaluations' timed calls on the device, and twenty such waits were seconds.
# Larger draws take long enough that they go outside it, each call its own hold.
ONE_HOLD_BYTES = 64 << 20


def capture(model, inputs: list, device) -> tuple["torch.cuda.CUDAGraph", object]:
    """`model(*inputs)` captured in a CUDA graph: (the graph, its output, rewritten by each replay)."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(WARMUP):
            model(*inputs)
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = model(*inputs)
    return graph, out


def copy_inputs(static: list, fresh: list) -> None:
    """A draw's values into the captured inputs (a graph reads the addresses it was captured with)."""
    ours, theirs = tensors_in(static), tensors_in(fresh)
    if len(ours) != len(theirs) or any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(ours, theirs)):
        raise ValueError("the inputs' shapes change from draw to draw")
    for a, b in zip(ours, theirs):
        a.copy_(b)


def _why(exc: Exception) -> str:
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:160]}"


def time_graph(judge, calls: int) -> dict:
    """`GraphTimed`'s fields: each call's graph and eager times (hold.call_times of device and host
    measures), or why the reference could not be captured or replayed."""
    device = judge.device
    if device.type != "cuda":
        return {"error": "CUDA graphs need a GPU"}
    seed = judge.cfg.seed + 104_729   # draws of its own, beside the evaluation's
    graph = None
    try:
        with torch.no_grad(), judge._device(shared=True, label="graph.capture"):
            static = draw_inputs(judge.module, seed, device)
            graph, out = capture(judge.model, static, device)
    except Exception as exc:
        return {"error": f"capture failed ({_why(exc)})"}
    timers = {"graph": Timer(judge.timers["eager"].hold), "eager": Timer(judge.timers["eager"].hold)}
    measured = {"graph": ([], []), "eager": ([], [])}

    def replay():
        graph.replay()
        return out

    one_hold = sum(t.numel() * t.element_size() for t in tensors_in(static)) <= ONE_HOLD_BYTES

    def held(shared: bool, label: str):
        return nullcontext() if one_hold else judge._device(shared=shared, label=label)

    try:
        with torch.no_grad(), judge._device(shared=False, label="graph.timed") if one_hold else nullcontext():
            for n in range(calls):
                with held(True, "graph.draw"):
                    fresh = draw_inputs(judge.module, seed + 1 + n, device)
                    copy_inputs(static, fresh)
                with held(False, "graph.timed"):
                    for name, fn, args in (("eager", judge.model, fresh), ("graph", replay, [])):
                        hold = timers[name].active_hold()
                        ms, host_ms, _, _ = timing.time_once(fn, args, device, judge.flush,
                                                             settle_s=judge.cfg.settle_ms / 1e3, hold=hold)
                        timers[name].note(hold)
                        measured[name][0].append(ms)
                        measured[name][1].append(host_ms)
                del fresh
    except Exception as exc:
        return {"error": f"replay failed ({_why(exc)})"}
    finally:
        graph = out = None
        torch.cuda.empty_cache()   # the graph's private memory pool, back before anything else runs
    return {"graph_ms": call_times(*measured["graph"]), "eager_ms": call_times(*measured["eager"])}
