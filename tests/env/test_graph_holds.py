"""The CUDA-graph baseline's holds of the device (env/workers/graphs.py), without a GPU: its timed calls
share one exclusive hold when the inputs are small, and take one each (draws outside) when they are large."""

from __future__ import annotations

import types
from contextlib import contextmanager

import torch

from cuda_agent.env.measure.hold import Timer
from cuda_agent.env.workers import graphs


class _Task:
    def __init__(self, shape):
        self.shape = shape

    def get_inputs(self):
        return [torch.randn(*self.shape)]


def _holds_of_graph_timing(monkeypatch, shape, calls=5) -> list[tuple[bool, str]]:
    taken = []

    @contextmanager
    def device(shared, label=""):
        taken.append((shared, label))
        yield None

    monkeypatch.setattr(graphs, "capture", lambda model, inputs, device: (types.SimpleNamespace(replay=lambda: None),
                                                                          inputs[0]))
    monkeypatch.setattr(graphs, "draw_inputs", lambda module, seed, device: module.get_inputs())
    monkeypatch.setattr(graphs.timing, "time_once", lambda fn, args, *a, **k: (1.0, 1.0, None, None))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    judge = types.SimpleNamespace(device=types.SimpleNamespace(type="cuda"), module=_Task(shape), model=torch.relu,
                                  cfg=types.SimpleNamespace(seed=5, settle_ms=0.0), flush=None,
                                  timers={"eager": Timer(None)}, _device=device)
    timed = graphs.time_graph(judge, calls)
    assert "error" not in timed and len(timed["graph_ms"]) == calls
    return taken


def test_small_inputs_time_every_call_in_one_exclusive_hold(monkeypatch):
    taken = _holds_of_graph_timing(monkeypatch, (256, 256))
    assert taken == [(True, "graph.capture"), (False, "graph.timed")]


def test_large_inputs_take_a_hold_per_call_and_draw_outside_it(monkeypatch):
    monkeypatch.setattr(graphs, "ONE_HOLD_BYTES", 1024)
    taken = _holds_of_graph_timing(monkeypatch, (256, 256), calls=3)
    assert taken == [(True, "graph.capture")] + [(True, "graph.draw"), (False, "graph.timed")] * 3
