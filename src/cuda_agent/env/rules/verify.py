"""Comparing a candidate's outputs with the reference's.

- `compare_outputs`: whole outputs (structure, exact shape and dtype, dtype-aware tolerances, NaN/Inf
  only where the reference has them).
- samples.py: every timed call's output is checked too, at positions drawn after the call returned
  (the candidate cannot know them while it computes); only the sampled values travel to the judge.
- dependence.py: whether outputs follow the inputs the way the reference's do (strict protocol).

Tolerances: `atol + rtol * |ref|` per element, raised to a floor for half-precision dtypes. In the
strict protocol the absolute part follows the output's magnitude (its RMS): it shrinks below 1, so
`1 / dim` does not pass for a softmax over 65536 columns, and grows on structured input sets with
larger outputs, so an honest kernel's float32 cancellation is judged as on the task's own draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch


# The tightest tolerance that makes sense for a dtype: a half-precision result can't be held to
# float32's tolerance. User tolerances are raised to these floors, never lowered.
_TOLERANCE_FLOOR = {
    torch.float16: 1e-3,
    torch.bfloat16: 8e-3,
}

# Float32 arithmetic in another order lands far below this; bf16/fp16 (or TF32) inside lands above.
FP32_PRECISION_WARNING = 1e-4
SAMPLES_PER_TENSOR = 2048


@dataclass(frozen=True)
class Tolerance:
    atol: float = 1e-2
    rtol: float = 1e-2
    relative_to_scale: bool = False     # strict protocol: atol follows the output's magnitude
    base_scales: tuple = ()             # the reference's output scales on the task's own first draw

    def for_tensor(self, ref: torch.Tensor, index: int = 0) -> tuple[float, float]:
        return self.for_scale(ref.dtype, output_scale(ref) if self.relative_to_scale else 1.0, index)

    def for_scale(self, dtype: torch.dtype, scale: float, index: int = 0) -> tuple[float, float]:
        """(atol, rtol) for a reference tensor of `dtype` whose `output_scale` is `scale`."""
        floor = _TOLERANCE_FLOOR.get(dtype, 0.0)
        atol, rtol = max(self.atol, floor), max(self.rtol, floor)
        if self.relative_to_scale:
            base = self.base_scales[index] if index < len(self.base_scales) else scale
            atol *= min(1.0, base) * max(1.0, scale / base)
        return atol, rtol

    def with_base(self, reference: Any) -> "Tolerance":
        from dataclasses import replace

        return replace(self, base_scales=tuple(output_scale(t) for t in tensors_in(reference)))


def output_scale(ref: torch.Tensor) -> float:
    """RMS of the finite values (1.0 for empty or all-zero outputs)."""
    if not (ref.is_floating_point() or ref.is_complex()) or ref.numel() == 0:
        return 1.0
    # One fused pass (the judge computes this on every call): a non-finite value makes the norm
    # non-finite, and only then are the finite values picked out (a copy and, on a GPU, a sync).
    rms = float(norm_of(ref)) / ref.numel() ** 0.5
    if not math.isfinite(rms):
        values = ref.detach().reshape(-1)
        values = values.abs() if ref.is_complex() else values
        values = values[torch.isfinite(values)]
        if values.numel() == 0:
            return 1.0
        rms = float(values.to(torch.float64).pow(2).mean().sqrt())
    return rms if rms > 0 else 1.0


@dataclass
class Comparison:
    ok: bool
    max_abs_error: float
    message: str = ""
    fp32_relative_error: float = 0.0  # of float32 outputs, relative to the output's largest value
    nonfinite: bool = False           # the candidate gave NaN/Inf where the reference is finite
    rule: str | None = None           # a failure with a rule of its own (e.g. output-layout)
    worst: tuple = ()                 # a pass of floating outputs: (error, allowed) at the element
                                      # that used the largest share of its allowance


def _leaves(value: Any, kind: type | tuple[type, ...]) -> list:
    """Every value of `kind` inside (nested) lists, tuples and dicts, in a fixed order."""
    if isinstance(value, kind):
        return [value]
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v, kind)]
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v, kind)]
    return []


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Every tensor inside (nested) lists, tuples and dicts, in a fixed order."""
    return _leaves(value, torch.Tensor)


def is_dense(t: torch.Tensor) -> bool:
    """Whether every element has its own place in memory and no place is skipped (any dimension
    order): false for broadcast (stride 0) and overlapping views."""
    return dense_strides(t.shape, t.stride())


def dense_strides(shape, strides) -> bool:
    """`is_dense` on a shape and its strides (in elements)."""
    dims = sorted((stride, size) for size, stride in zip(shape, strides) if size > 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def contiguous_strides(shape, strides) -> bool:
    """Whether a shape and its strides (in elements) are row-major (torch's `is_contiguous`: the
    strides of dimensions of size 1 do not matter)."""
    expected = 1
    for size, stride in reversed(list(zip(shape, strides))):
        if size > 1 and stride != expected:
            return False
        expected *= size
    return True


def structure(value: Any) -> Any:
    """The container shape of an output, with tensors as "T" (compared before any values)."""
    if isinstance(value, torch.Tensor):
        return "T"
    if isinstance(value, (list, tuple)):
        return [structure(v) for v in value]
    if isinstance(value, dict):
        return {str(k): structure(v) for k, v in value.items()}
    return type(value).__name__


def scalars_in(value: Any) -> list:
    """The Python numbers of an output (bool, int, float), in the order `structure` lists them: a
    call's samples carry them whole, so an output that is a number is compared on every call."""
    return _leaves(value, (bool, int, float))


def compare_outputs(ref: Any, out: Any, tol: Tolerance, where: str = "output", _seen: list | None = None) -> Comparison:
    """Compare a candidate's output with the reference's, element by element in containers."""
    seen = _seen if _seen is not None else [0]   # tensors visited so far, in tensors_in order
    if isinstance(ref, torch.Tensor):
        seen[0] += 1
        if not isinstance(out, torch.Tensor):
            return Comparison(False, float("inf"), f"{where}: expected a tensor, got {type(out).__name__}")
        return compare_tensors(ref, out, tol, where, index=seen[0] - 1)
    if isinstance(ref, (list, tuple)):
        if not isinstance(out, (list, tuple)) or len(out) != len(ref):
            got = f"{type(out).__name__} of length {len(out)}" if isinstance(out, (list, tuple)) else type(out).__name__
            return Comparison(False, float("inf"), f"{where}: expected {type(ref).__name__} of length {len(ref)}, got {got}")
        return all_of([compare_outputs(r, o, tol, f"{where}[{i}]", seen) for i, (r, o) in enumerate(zip(ref, out))])
    if isinstance(ref, dict):
        if not isinstance(out, dict) or set(out) != set(ref):
            return Comparison(False, float("inf"), f"{where}: expected a dict with keys {sorted(map(str, ref))}")
        return all_of([compare_outputs(ref[k], out[k], tol, f"{where}[{k!r}]", seen) for k in ref])
    if isinstance(ref, (int, float, bool)) or ref is None:
        if isinstance(out, torch.Tensor) and out.numel() == 1:
            out = out.item()
        if ref is None or isinstance(ref, bool):
            ok = out == ref
            return Comparison(ok, 0.0 if ok else float("inf"), "" if ok else f"{where}: expected {ref!r}, got {out!r}")
        if not isinstance(out, (int, float)):
            return Comparison(False, float("inf"), f"{where}: expected a number, got {type(out).__name__}")
        err = abs(float(out) - float(ref))
        ok = err <= tol.atol + tol.rtol * abs(float(ref))
        return Comparison(ok, err, "" if ok else f"{where}: expected {ref}, got {out}")
    return Comparison(False, float("inf"), f"{where}: cannot compare outputs of type {type(ref).__name__}")


def all_of(parts) -> Comparison:
    parts = list(parts)
    worst = max((p.max_abs_error for p in parts), default=0.0)
    failed = [p for p in parts if not p.ok]
    relative = max((p.fp32_relative_error for p in parts), default=0.0)
    nearest = max((p.worst for p in parts if p.worst), key=share, default=()) if not failed else ()
    return Comparison(not failed, worst, failed[0].message if failed else "", relative,
                      any(p.nonfinite for p in failed), failed[0].rule if failed else None, nearest)


def share(worst: tuple) -> float:
    """The share of its allowance an (error, allowed) pair used."""
    error, allowed = worst
    return error / allowed if allowed > 0 else (0.0 if error == 0 else math.inf)


def _nearest(diff: torch.Tensor, limit: torch.Tensor) -> tuple:
    """(error, allowed) where diff / limit is largest; () without a positive limit everywhere."""
    if float(limit.min()) <= 0:
        return ()
    at = int((diff / limit).argmax())
    return float(diff.reshape(-1)[at]), float(limit.reshape(-1)[at])


def compare_tensors(ref: torch.Tensor, out: torch.Tensor, tol: Tolerance, where: str,
                     limits: tuple[float, float] | None = None, index: int = 0) -> Comparison:
    """`limits`: (atol, rtol) when `ref` is a sample of the reference (`tol` then goes unused)."""
    if tuple(out.shape) != tuple(ref.shape):
        return Comparison(False, float("inf"), f"{where}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}")
    if out.dtype != ref.dtype:
        return Comparison(False, float("inf"), f"{where}: dtype {out.dtype}, expected {ref.dtype}")
    out = out.to(ref.device)
    if not (ref.dtype.is_floating_point or ref.dtype.is_complex):
        mismatched = int((out != ref).sum())
        if mismatched:
            return Comparison(False, float("inf"), f"{where}: {mismatched} of {ref.numel()} elements differ "
                                                   f"(exact match required for {ref.dtype})")
        return Comparison(True, 0.0)
    if ref.numel() == 0:
        return Comparison(True, 0.0)
    atol, rtol = limits if limits is not None else tol.for_tensor(ref, index)
    wide = torch.float64 if ref.dtype == torch.float64 else torch.float32
    r, o = ref.to(wide), out.to(wide)
    fast = _compare_finite(r, o, atol, rtol, where, ref.dtype == torch.float32)
    if fast is not None:
        return fast
    ref_finite = torch.isfinite(r)
    bad_nonfinite = int((~torch.isfinite(o) & ref_finite).sum())
    if bad_nonfinite:
        return Comparison(False, float("inf"), f"{where}: {bad_nonfinite} NaN/Inf values where the reference is finite",
                          nonfinite=True)
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
        return _outside(where, over, n_over, o, r, atol, rtol, max_err)
    relative = 0.0
    if ref.dtype == torch.float32:
        scale = float(r.abs().masked_fill(special, 0.0).max())
        relative = max_err / scale if scale > 0 else 0.0
    return Comparison(True, max_err, "", relative, worst=_nearest(diff, limit))


def _outside(where, over, n_over, o, r, atol, rtol, max_err) -> Comparison:
    return _outside_at(where, tuple(int(i) for i in torch.nonzero(over)[0]), n_over, o, r, atol, rtol, max_err)


def _outside_at(where, idx, n_over, o, r, atol, rtol, max_err) -> Comparison:
    return Comparison(False, max_err,
                      f"{where}: {n_over} of {r.numel()} elements outside atol={atol:.3g}, rtol={rtol:g} "
                      f"(max abs error {max_err:.4g}; first at index {list(idx)}: got {float(o[idx]):.6g}, "
                      f"expected {float(r[idx]):.6g})")


def _compare_finite(r: torch.Tensor, o: torch.Tensor, atol: float, rtol: float, where: str,
                    fp32: bool) -> Comparison | None:
    """The comparison when every value of both is finite (a finite largest difference says so: NaN
    and Inf make it NaN or Inf), in a few passes without the masks; None sends the caller to the
    general path, which handles non-finite values. Same verdicts, numbers and messages."""
    if r.numel() > COMPARE_CHUNK:
        return _compare_finite_chunked(r, o, atol, rtol, where, fp32)
    diff = (o - r).abs_()
    max_err = float(diff.max())
    if not math.isfinite(max_err):
        return None
    magnitude = r.abs()
    scale = float(magnitude.max()) if fp32 else 0.0   # float32 outputs: the relative error's scale
    if not math.isfinite(scale):
        return None
    limit = magnitude.mul_(rtol).add_(atol)
    over = diff > limit                                  # |o - r| > atol + rtol * |r|
    n_over = int(over.sum())
    if n_over:
        return _outside(where, over, n_over, o, r, atol, rtol, max_err)
    return Comparison(True, max_err, "", max_err / scale if scale > 0 else 0.0, worst=_nearest(diff, limit))


COMPARE_CHUNK = 1 << 26   # elements: larger outputs are compared in parts (a few of them at a time in memory)


def _compare_finite_chunked(r: torch.Tensor, o: torch.Tensor, atol: float, rtol: float, where: str,
                            fp32: bool) -> Comparison | None:
    """`_compare_finite` over COMPARE_CHUNK elements at a time, in row-major order: its temporaries
    take a part's size, not the output's (a 6 GiB output beside the reference and the candidate's
    copy). The same verdict, numbers and message: maxima, counts and the first element outside are
    combined over the parts in order, and the worst element is the first of the largest share."""
    rf, of = r.reshape(-1), o.reshape(-1)
    maxes, scales, counts, lows, shares, worst = [], [], [], [], [], []
    for start in range(0, rf.numel(), COMPARE_CHUNK):
        rc, oc = rf[start:start + COMPARE_CHUNK], of[start:start + COMPARE_CHUNK]
        diff = (oc - rc).abs_()
        limit = rc.abs()
        maxes.append(diff.max())
        if fp32:
            scales.append(limit.max())
        limit.mul_(rtol).add_(atol)
        counts.append((diff > limit).sum())
        lows.append(limit.min())
        share_ = diff / limit
        at = share_.argmax()
        shares.append(share_[at])
        worst.append(torch.stack([diff[at], limit[at]]))
    max_err = float(torch.stack(maxes).max())
    if not math.isfinite(max_err):
        return None
    scale = float(torch.stack(scales).max()) if fp32 else 0.0
    if not math.isfinite(scale):
        return None
    per_part = [int(c) for c in torch.stack(counts).cpu()]
    n_over = sum(per_part)
    if n_over:
        part = next(i for i, c in enumerate(per_part) if c)
        start = part * COMPARE_CHUNK
        rc, oc = rf[start:start + COMPARE_CHUNK], of[start:start + COMPARE_CHUNK]
        flat = start + int(torch.nonzero((oc - rc).abs_() > rc.abs().mul_(rtol).add_(atol))[0])
        idx = []
        for size in reversed(r.shape):
            idx.append(flat % size)
            flat //= size
        return _outside_at(where, tuple(reversed(idx)), n_over, o, r, atol, rtol, max_err)
    nearest = ()
    if float(torch.stack(lows).min()) > 0:
        error, allowed = worst[int(torch.stack(shares).argmax())].tolist()
        nearest = (error, allowed)
    return Comparison(True, max_err, "", max_err / scale if scale > 0 else 0.0, worst=nearest)


def norm_of(ref: torch.Tensor) -> torch.Tensor:
    """`output_scale`'s norm (its fast path; the judge's sampled reference uses it too), on the reference's device, not waited for."""
    values = ref.detach().reshape(-1)
    if ref.is_complex():
        values = values.abs()
    return torch.linalg.vector_norm(values, dtype=torch.float64 if values.dtype == torch.float64 else torch.float32)
