"""Output comparison: structure, exact shape and dtype, dtype-aware tolerances, no NaN/Inf."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

# The tightest tolerance that makes sense for a dtype: a half-precision result can't be held to
# float32's tolerance. User tolerances are raised to these floors, never lowered.
_TOLERANCE_FLOOR = {
    torch.float16: 1e-3,
    torch.bfloat16: 8e-3,
}


@dataclass
class Comparison:
    ok: bool
    max_abs_error: float
    message: str = ""
    fp32_relative_error: float = 0.0  # of float32 outputs, relative to the output's largest value


# Float32 arithmetic in another order lands far below this; bf16/fp16 (or TF32) inside lands above.
FP32_PRECISION_WARNING = 1e-4


def tolerances(dtype: torch.dtype, atol: float, rtol: float) -> tuple[float, float]:
    floor = _TOLERANCE_FLOOR.get(dtype, 0.0)
    return max(atol, floor), max(rtol, floor)


def compare_outputs(ref: Any, out: Any, atol: float, rtol: float, where: str = "output") -> Comparison:
    """Compare a candidate's output with the reference's, element by element in containers."""
    if isinstance(ref, torch.Tensor):
        if not isinstance(out, torch.Tensor):
            return Comparison(False, float("inf"), f"{where}: expected a tensor, got {type(out).__name__}")
        return _compare_tensors(ref, out, atol, rtol, where)
    if isinstance(ref, (list, tuple)):
        if not isinstance(out, (list, tuple)) or len(out) != len(ref):
            got = f"{type(out).__name__} of length {len(out)}" if isinstance(out, (list, tuple)) else type(out).__name__
            return Comparison(False, float("inf"), f"{where}: expected {type(ref).__name__} of length {len(ref)}, got {got}")
        return _all(compare_outputs(r, o, atol, rtol, f"{where}[{i}]") for i, (r, o) in enumerate(zip(ref, out)))
    if isinstance(ref, dict):
        if not isinstance(out, dict) or set(out) != set(ref):
            return Comparison(False, float("inf"), f"{where}: expected a dict with keys {sorted(map(str, ref))}")
        return _all(compare_outputs(ref[k], out[k], atol, rtol, f"{where}[{k!r}]") for k in ref)
    if isinstance(ref, (int, float, bool)) or ref is None:
        if isinstance(out, torch.Tensor) and out.numel() == 1:
            out = out.item()
        if ref is None or isinstance(ref, bool):
            ok = out == ref
            return Comparison(ok, 0.0 if ok else float("inf"), "" if ok else f"{where}: expected {ref!r}, got {out!r}")
        if not isinstance(out, (int, float)):
            return Comparison(False, float("inf"), f"{where}: expected a number, got {type(out).__name__}")
        err = abs(float(out) - float(ref))
        ok = err <= atol + rtol * abs(float(ref))
        return Comparison(ok, err, "" if ok else f"{where}: expected {ref}, got {out}")
    return Comparison(False, float("inf"), f"{where}: cannot compare outputs of type {type(ref).__name__}")


def _all(parts) -> Comparison:
    parts = list(parts)
    worst = max((p.max_abs_error for p in parts), default=0.0)
    failed = [p for p in parts if not p.ok]
    relative = max((p.fp32_relative_error for p in parts), default=0.0)
    return Comparison(not failed, worst, failed[0].message if failed else "", relative)


def _compare_tensors(ref: torch.Tensor, out: torch.Tensor, atol: float, rtol: float, where: str) -> Comparison:
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(False, float("inf"), f"{where}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return Comparison(False, float("inf"), f"{where}: dtype {out.dtype}, expected {ref.dtype}")
    out = out.to(ref.device)
    if not (ref.dtype.is_floating_point or ref.dtype.is_complex):
        mismatched = int((out != ref).sum())
        if mismatched:
            return Comparison(False, float("inf"), f"{where}: {mismatched} of {ref.numel()} elements differ (exact match required for {ref.dtype})")
        return Comparison(True, 0.0)
    if ref.numel() == 0:
        return Comparison(True, 0.0)
    atol, rtol = tolerances(ref.dtype, atol, rtol)
    r, o = ref.to(torch.float64 if ref.dtype == torch.float64 else torch.float32), out.to(
        torch.float64 if ref.dtype == torch.float64 else torch.float32)
    ref_finite = torch.isfinite(r)
    bad_nonfinite = int((~torch.isfinite(o) & ref_finite).sum())
    if bad_nonfinite:
        return Comparison(False, float("inf"), f"{where}: {bad_nonfinite} NaN/Inf values where the reference is finite")
    # Where the reference itself is not finite, the candidate must match it exactly.
    special = ~ref_finite
    if bool(special.any()) and not torch.equal(torch.nan_to_num(r[special], nan=0.0), torch.nan_to_num(o[special], nan=0.0)):
        return Comparison(False, float("inf"), f"{where}: NaN/Inf pattern differs from the reference")
    diff = (o - r).abs().masked_fill(special, 0.0)
    max_err = float(diff.max())
    limit = atol + rtol * r.abs().masked_fill(special, 0.0)
    over = diff > limit
    n_over = int(over.sum())
    if n_over:
        idx = tuple(int(i) for i in torch.nonzero(over)[0])
        return Comparison(False, max_err,
                          f"{where}: {n_over} of {ref.numel()} elements outside atol={atol:g}, rtol={rtol:g} "
                          f"(max abs error {max_err:.4g}; first at index {list(idx)}: got {float(o[idx]):.6g}, "
                          f"expected {float(r[idx]):.6g})")
    relative = 0.0
    if ref.dtype == torch.float32:
        scale = float(r.abs().masked_fill(special, 0.0).max())
        relative = max_err / scale if scale > 0 else 0.0
    return Comparison(True, max_err, "", relative)
