"""The runtime filters, run per task in a worker process (`workers.py`). In order, each drops the task
with a recorded reason (thresholds in `FilterConfig`, table in docs/synthesis.md): `eager_error`;
`runtime_below_window` / `runtime_above_window` (eager median outside the window after up to
`max_rescales` batch rescalings, time taken as linear in the batch; `oom` when the task does not fit
at its base size, `runtime_above_window` when a rescaled one does not: found without building it
where its weights and inputs, measured on the meta device, exceed the memory it would be built in);
`nondeterministic`; `nonfinite_output`; `constant_output` (the mean over draws matches every
draw within the verifier's tolerance, so a constant would pass) and `low_variation` (too few output
elements vary beyond it); `compile_error` / `compile_mismatch` (torch.compile fails, or differs from
eager beyond the tolerance). Survivors get `eager_ms` and `compile_ms` from `time_callable`.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import time
import traceback
import warnings
from dataclasses import asdict, dataclass
from functools import lru_cache

import torch

from cuda_agent.tasks import load_task_module


@dataclass
class FilterConfig:
    backend: str = "cpu"
    device_index: int = 0
    window_ms: tuple = (0.1, 10.0)
    max_rescales: int = 4
    max_batch: int = 4096
    draws: int = 3                  # input draws for the variation test
    atol: float = 1e-2              # the verifier's tolerances
    rtol: float = 1e-2
    min_varying_fraction: float = 0.01
    compile: bool = True
    warmup: int = 3
    iters: int = 20
    timing_budget_s: float = 10.0
    seed: int = 0
    threads: int = 1                # torch threads per CPU worker
    sharing: int = 1                # filter workers sharing one device (recorded with each time)
    catalog_path: str = ""

    to_dict = asdict


DEVICE_BUSY = "device_busy"   # out of memory while other processes held the device: tried again later


class Drop(Exception):
    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason)
        self.reason, self.detail = reason, detail


def timed_on(device: torch.device, sharing: int) -> dict:
    """Where a task's times were taken (a build's parts may run on different machines)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = f"CPU ({platform.machine()})"
    return {"device": name, "torch": torch.__version__, "sharing": sharing}


@lru_cache(maxsize=4)
def _catalog_ops(path: str):
    from cuda_agent.synth.catalog import Catalog

    with open(path) as f:
        return Catalog.from_dict(json.load(f)).by_name()


def _device(cfg: FilterConfig) -> torch.device:
    return torch.device(f"cuda:{cfg.device_index}" if cfg.backend == "cuda" else "cpu")


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _build(code: str, ident: str, cfg: FilterConfig, device):
    module = load_task_module(code, f"cuda_agent_synth_{ident.replace('-', '_')}")
    torch.manual_seed(cfg.seed)
    model = module.Model(*module.get_init_inputs()).to(device)
    return module, model


def _draw(module, seed: int, device):
    torch.manual_seed(seed)
    return [t.to(device) if isinstance(t, torch.Tensor) else t for t in module.get_inputs()]


def _output(out) -> torch.Tensor:
    if isinstance(out, (tuple, list)):
        out = out[0]
    if not isinstance(out, torch.Tensor):
        raise Drop("eager_error", f"forward returned {type(out).__name__}, not a tensor")
    return out.detach().float()


def _time(fn, inputs, device, cfg) -> float:
    from cuda_agent.env.measure.timing import time_callable

    timing = time_callable(fn, [inputs], device, warmup=cfg.warmup, iters=cfg.iters,
                           flush_l2=device.type == "cuda", budget_s=cfg.timing_budget_s)
    return float(timing.median_ms)


def _fit_window(candidate: dict, catalog_ops, cfg: FilterConfig, device) -> tuple[str, int, float, int]:
    """Rescale the batch until eager time lands in the window: (code, batch, eager_ms, rescales)."""
    from cuda_agent.synth.compose import base_batch, render_candidate

    lo, hi = cfg.window_ms
    batch = base_batch(candidate)
    ident = candidate["id"]
    note = ""
    for attempt in range(cfg.max_rescales + 1):
        try:
            code = render_candidate(candidate, catalog_ops, batch if attempt else None)
        except Exception as exc:  # noqa: BLE001 - a link whose shapes tie the batch to another dim
            if attempt == 0:
                raise Drop("eager_error", _short(exc)) from None
            note = f"; batch {batch} does not fit the chain ({_short(exc)[:80]})"
            break
        too_large = _too_large(code, ident, device)
        if too_large:
            if attempt == 0:
                raise Drop("oom", too_large)
            raise Drop("runtime_above_window", f"{too_large} at batch {batch}")
        try:
            module, model = _build(code, ident, cfg, device)
            inputs = _draw(module, cfg.seed, device)
            with torch.no_grad():
                _output(model(*inputs))
            ms = _time(model, inputs, device, cfg)
        except Drop:
            raise
        except torch.OutOfMemoryError:
            if _others_hold_the_device(device):
                raise Drop(DEVICE_BUSY, _busy_detail(device)) from None
            if attempt == 0:
                raise Drop("oom", "does not fit at its base size") from None
            raise Drop("runtime_above_window", f"out of memory at batch {batch}") from None
        except Exception as exc:  # noqa: BLE001 - the task's own failure
            raise Drop("eager_error", _short(exc)) from None
        if lo <= ms <= hi:
            return code, batch, ms, attempt
        if not batch:
            break     # not rescalable
        target = 2 * lo if ms < lo else hi / 2
        new = int(min(cfg.max_batch, max(1, round(batch * target / max(ms, 1e-6)))))
        if new == batch:
            break
        del model, module
        batch = new
    raise Drop("runtime_below_window" if ms < lo else "runtime_above_window",
               f"{ms:.4g} ms, window {lo}-{hi} ms{note}")


def _too_large(code: str, ident: str, device: torch.device) -> str | None:
    """Why the task cannot be built here, or None: its weights and one input set (measured on the
    meta device, nothing allocated) exceed the host's memory, where the model and inputs are made
    first, or the GPU's. Built anyway, it would fill the host until the kernel killed the worker."""
    from cuda_agent.synth.memory import memory_limit_mb
    from cuda_agent.tasks import Task
    from cuda_agent.tasks.footprint import measure_footprint

    footprint = measure_footprint(Task(ident, code))
    if footprint is None:
        return None
    need = footprint.input_bytes + (footprint.param_bytes or 0)
    host_mb = memory_limit_mb()
    rooms = [(host_mb * 2**20, "the host's memory")] if host_mb else []
    if device.type == "cuda":
        rooms.append((torch.cuda.get_device_properties(device).total_memory, "the GPU's memory"))
    for room, where in rooms:
        if need > room:
            return f"weights and inputs need {need / 2**30:.3g} GiB, more than {where} ({room / 2**30:.3g} GiB)"
    return None


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def _check_outputs(module, model, cfg: FilterConfig, device) -> dict:
    """Determinism, finiteness and variation across input draws (thresholds in `FilterConfig`)."""
    outs = []
    with torch.no_grad():
        first = _draw(module, cfg.seed, device)
        a = _output(model(*first))
        b = _output(model(*first))
        if a.shape != b.shape or not torch.equal(torch.nan_to_num(a), torch.nan_to_num(b)):
            raise Drop("nondeterministic", "two calls on the same inputs differ")
        outs.append(a)
        for k in range(1, cfg.draws):
            outs.append(_output(model(*_draw(module, cfg.seed + k, device))))
    for k, out in enumerate(outs):
        if not torch.isfinite(out).all():
            raise Drop("nonfinite_output", f"NaN/Inf for input draw {k}")
    if any(o.shape != outs[0].shape for o in outs):
        return {"output_shape": list(outs[0].shape), "varying_fraction": 1.0}
    stack = torch.stack(outs)
    mean = stack.mean(0)
    tol = cfg.atol + cfg.rtol * mean.abs()
    differs = (stack - mean).abs() > tol           # per draw, per element
    if not differs.any():
        raise Drop("constant_output", "the mean over draws matches every draw within tolerance")
    varying = differs.any(0).float().mean().item()
    if varying < cfg.min_varying_fraction:
        raise Drop("low_variation", f"only {varying:.2%} of output elements vary beyond tolerance")
    return {"output_shape": list(outs[0].shape), "varying_fraction": round(varying, 4)}


def _check_compile(module, model, cfg: FilterConfig, device) -> float | None:
    import torch._dynamo

    inputs = _draw(module, cfg.seed, device)
    try:
        compiled = torch.compile(model)
        with torch.no_grad():
            out_c = _output(compiled(*inputs))
            _sync(device)
    except Exception as exc:  # noqa: BLE001
        raise Drop("compile_error", _short(exc)) from None
    with torch.no_grad():
        out_e = _output(model(*inputs))
    if out_c.shape != out_e.shape or not torch.allclose(out_c, out_e, atol=cfg.atol, rtol=cfg.rtol):
        err = (out_c - out_e).abs().max().item() if out_c.shape == out_e.shape else float("nan")
        raise Drop("compile_mismatch", f"max abs difference {err:.3g}")
    try:
        return _time(compiled, inputs, device, cfg)
    finally:
        torch._dynamo.reset()


def _others_hold_the_device(device: torch.device, share: float = 0.1) -> bool:
    """Whether other processes hold more than `share` of the GPU (workers share one): an out-of-memory
    error is then theirs as much as the task's, and the task is tried again rather than dropped."""
    if device.type != "cuda":
        return False
    free, total = torch.cuda.mem_get_info(device)
    others = total - free - torch.cuda.memory_reserved(device)
    return others > share * total


def _busy_detail(device: torch.device) -> str:
    free, total = torch.cuda.mem_get_info(device)
    return f"out of memory with {free / 2**30:.1f} of {total / 2**30:.1f} GiB free (other workers held the rest)"


def run_filters(job: dict) -> dict:
    """Worker entry point: one candidate in, one plain-dict verdict out (never raises)."""
    cfg = FilterConfig(**{**job["config"], "window_ms": tuple(job["config"]["window_ms"])})
    candidate = job["candidate"]
    t0 = time.perf_counter()
    torch.set_num_threads(max(1, cfg.threads))
    device = _device(cfg)
    result = {"id": candidate["id"], "ok": False, "reason": "", "detail": "", "pid": os.getpid()}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            catalog_ops = _catalog_ops(cfg.catalog_path) if candidate["kind"] == "chain" else None
            code, batch, eager_ms, rescales = _fit_window(candidate, catalog_ops, cfg, device)
            module, model = _build(code, candidate["id"], cfg, device)
            result.update(_check_outputs(module, model, cfg, device))
            compile_ms = _check_compile(module, model, cfg, device) if cfg.compile else None
        result.update(ok=True, code=code, batch=batch, eager_ms=round(eager_ms, 5),
                      compile_ms=None if compile_ms is None else round(compile_ms, 5), rescales=rescales,
                      **timed_on(device, cfg.sharing))
    except Drop as drop:
        result.update(reason=drop.reason, detail=drop.detail)
    except torch.OutOfMemoryError as exc:   # past the base-size fit: the device was full, or the task is
        busy = _others_hold_the_device(device)
        result.update(reason=DEVICE_BUSY if busy else "oom", detail=_busy_detail(device) if busy else _short(exc))
    except Exception as exc:  # noqa: BLE001 - a bug of ours, recorded rather than fatal
        result.update(reason="internal_error", detail=_short(exc) + "\n" + traceback.format_exc()[-800:])
    finally:
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    result["seconds"] = round(time.perf_counter() - t0, 3)
    return result
