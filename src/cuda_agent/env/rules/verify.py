"""Comparing a candidate's outputs with the reference's.

- `compare_outputs`: whole outputs (structure, exact shape and dtype, dtype-aware tolerances, NaN/Inf
  only where the reference has them).
- `take_samples` / `compare_samples`: every timed call's output is checked too, at positions drawn
  after the call returned (the candidate cannot know them while it computes); only the sampled
  values travel to the judge.
- `Dependence`: whether outputs follow the inputs the way the reference's do (strict protocol).

Tolerances: `atol + rtol * |ref|` per element, raised to a floor for half-precision dtypes. In the
strict protocol the absolute part follows the output's magnitude (its RMS): it shrinks below 1, so
`1 / dim` does not pass for a softmax over 65536 columns, and grows on structured input sets with
larger outputs, so an honest kernel's float32 cancellation is judged as on the task's own draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from cuda_agent.env.rules import registry as rules

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
    rms = float(_norm(ref)) / ref.numel() ** 0.5
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


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Every tensor inside (nested) lists, tuples and dicts, in a fixed order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    if isinstance(value, dict):
        return [t for k in value for t in tensors_in(value[k])]
    return []


def is_dense(t: torch.Tensor) -> bool:
    """Whether every element has its own place in memory and no place is skipped (any dimension
    order): false for broadcast (stride 0) and overlapping views."""
    dims = sorted((stride, size) for size, stride in zip(t.shape, t.stride()) if size > 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
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
    if isinstance(value, (bool, int, float)):
        return [value]
    if isinstance(value, (list, tuple)):
        return [s for v in value for s in scalars_in(v)]
    if isinstance(value, dict):
        return [s for v in value.values() for s in scalars_in(v)]
    return []


def compare_outputs(ref: Any, out: Any, tol: Tolerance, where: str = "output", _seen: list | None = None) -> Comparison:
    """Compare a candidate's output with the reference's, element by element in containers."""
    seen = _seen if _seen is not None else [0]   # tensors visited so far, in tensors_in order
    if isinstance(ref, torch.Tensor):
        seen[0] += 1
        if not isinstance(out, torch.Tensor):
            return Comparison(False, float("inf"), f"{where}: expected a tensor, got {type(out).__name__}")
        return _compare_tensors(ref, out, tol, where, index=seen[0] - 1)
    if isinstance(ref, (list, tuple)):
        if not isinstance(out, (list, tuple)) or len(out) != len(ref):
            got = f"{type(out).__name__} of length {len(out)}" if isinstance(out, (list, tuple)) else type(out).__name__
            return Comparison(False, float("inf"), f"{where}: expected {type(ref).__name__} of length {len(ref)}, got {got}")
        return _all([compare_outputs(r, o, tol, f"{where}[{i}]", seen) for i, (r, o) in enumerate(zip(ref, out))])
    if isinstance(ref, dict):
        if not isinstance(out, dict) or set(out) != set(ref):
            return Comparison(False, float("inf"), f"{where}: expected a dict with keys {sorted(map(str, ref))}")
        return _all([compare_outputs(ref[k], out[k], tol, f"{where}[{k!r}]", seen) for k in ref])
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


def _all(parts) -> Comparison:
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


def _compare_tensors(ref: torch.Tensor, out: torch.Tensor, tol: Tolerance, where: str,
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
    idx = tuple(int(i) for i in torch.nonzero(over)[0])
    return Comparison(False, max_err,
                      f"{where}: {n_over} of {r.numel()} elements outside atol={atol:.3g}, rtol={rtol:g} "
                      f"(max abs error {max_err:.4g}; first at index {list(idx)}: got {float(o[idx]):.6g}, "
                      f"expected {float(r[idx]):.6g})")


def _compare_finite(r: torch.Tensor, o: torch.Tensor, atol: float, rtol: float, where: str,
                    fp32: bool) -> Comparison | None:
    """The comparison when every value of both is finite (a finite largest difference says so: NaN
    and Inf make it NaN or Inf), in a few passes without the masks; None sends the caller to the
    general path, which handles non-finite values. Same verdicts, numbers and messages."""
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


# -- samples of an output (every call) ---------------------------------------------------------------


def take_samples(out: Any, count: int = SAMPLES_PER_TENSOR) -> dict:
    """Values of `out` at random positions drawn now, after the call returned (candidate side).

    Read on the current stream, with no synchronisation first: work a kernel left running on another
    stream has not landed yet and shows up as wrong (NaN-poisoned) values. Positions and values
    travel packed (`pack_samples`): as JSON lists, encoding and decoding them cost more than the
    kernels they check."""
    tensors = []
    for t in tensors_in(out):
        n = t.numel()
        real = t.layout == torch.strided and not t.is_meta
        entry = {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                 "strides": list(t.stride()) if real else [], "dense": is_dense(t) if real else True}
        if n and real:
            positions = random_positions(n, count, t.device)   # drawn now: unknown to the call that just ran
            values = t.detach().reshape(-1)[positions]
            if values.is_complex():
                values = torch.view_as_real(values)
            kind = torch.float64 if values.is_floating_point() else torch.int64
            both = torch.cat([positions.to(kind), values.to(kind).reshape(-1)]).cpu()   # one copy back
            entry["positions"] = pack_samples(both[:positions.numel()].to(torch.int64))
            entry["values"] = pack_samples(both[positions.numel():])
        tensors.append(entry)
    return {"structure": structure(out), "tensors": tensors, "scalars": scalars_in(out)}


def random_positions(n: int, count: int, device: torch.device) -> torch.Tensor:
    """Every position of `n` elements when there are at most `count`, else `count` of them drawn from
    a seed made now: nothing that ran before can know them. One generator per device, made once
    (making one costs more than drawing from it), seeded afresh each time."""
    import secrets

    if n <= count:
        return torch.arange(n, device=device)
    key = str(device)
    if key not in _GENERATORS:
        _GENERATORS[key] = torch.Generator(device=device)
    generator = _GENERATORS[key].manual_seed(secrets.randbits(62))
    return torch.randint(0, n, (count,), generator=generator, device=device)


_GENERATORS: dict = {}


_PACKED = {torch.int64: "<i8", torch.float64: "<f8"}   # little-endian on the wire


def pack_samples(values: torch.Tensor) -> str:
    """A CPU int64 or float64 tensor as base64 of its little-endian bytes."""
    import base64

    return base64.b64encode(values.contiguous().numpy().astype(_PACKED[values.dtype], copy=False).tobytes()
                            ).decode("ascii")


def unpack_samples(text: Any, dtype: torch.dtype) -> torch.Tensor:
    """`pack_samples`' inverse; ValueError for anything it cannot have written."""
    import base64
    import binascii

    import numpy

    if not isinstance(text, str):
        raise ValueError("not packed samples")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ValueError("not packed samples") from None
    if len(raw) % 8:
        raise ValueError("packed samples of a partial element")
    return torch.from_numpy(numpy.frombuffer(raw, dtype=_PACKED[dtype]).astype(_PACKED[dtype][1:]))


class ForgedSamples(ValueError):
    """Samples the harness's own sampler cannot have produced: the candidate's process changed it."""


def decode_samples(samples: Any) -> list | None:
    """Each sampled tensor's record decoded ahead of the reference, as its own dtype says (the judge
    does this before it holds the device): (positions, values, lowest, highest position), or None for
    an unreadable one (`_sampled` raises when it matters); None for a record that is not one."""
    if not isinstance(samples, dict) or not isinstance(samples.get("tensors"), list):
        return None
    decoded = []
    for entry in samples["tensors"]:
        try:
            name = entry["dtype"]
            dtype = getattr(torch, name) if isinstance(name, str) and name.isidentifier() else None
            if not isinstance(dtype, torch.dtype):
                raise TypeError(name)
            decoded.append(_decode(entry, dtype.is_floating_point or dtype.is_complex, dtype.is_complex))
        except (KeyError, TypeError, ValueError, RuntimeError, OverflowError):
            decoded.append(None)
    return decoded


def _decode(entry: dict, floating: bool, complex_: bool) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    positions = unpack_samples(entry["positions"], torch.int64)
    values = unpack_samples(entry["values"], torch.float64 if floating else torch.int64)
    if complex_:
        values = values.reshape(-1, 2)
    low, high = (int(positions.min()), int(positions.max())) if positions.numel() else (0, -1)
    return positions, values, low, high


def _sampled(entry: Any, ref: torch.Tensor, count: int, where: str,
             decoded: tuple | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
    """One tensor's (positions, values) as `take_samples` reports them, on the CPU; None when its shape
    or dtype is wrong (the output's own fault, reported by the comparison) or it is empty. Anything
    else than min(numel, count) positions inside the output with one value each (a complex value as
    two) raises ForgedSamples. `decoded`: the entry as `decode_samples` read it (its dtype then is the
    reference's, checked here first)."""
    if not isinstance(entry, dict) or entry.get("shape") != list(ref.shape) or \
            entry.get("dtype") != str(ref.dtype).replace("torch.", ""):
        if not isinstance(entry, dict) or not isinstance(entry.get("shape"), list):
            raise ForgedSamples(f"{where}: no sample record")
        return None
    n = ref.numel()
    if n == 0:
        return None
    try:
        positions, values, low, high = decoded or _decode(entry, ref.is_floating_point() or ref.is_complex(),
                                                          ref.is_complex())
    except (KeyError, TypeError, ValueError, RuntimeError, OverflowError):
        raise ForgedSamples(f"{where}: no readable samples of a non-empty output") from None
    expected = (min(n, count),) + ((2,) if ref.is_complex() else ())
    if positions.shape != expected[:1] or values.shape != expected:
        raise ForgedSamples(f"{where}: {positions.numel()} sampled positions with {values.numel()} values, "
                            f"the harness takes {min(n, count)}")
    if low < 0 or high >= n:
        raise ForgedSamples(f"{where}: sampled positions outside the output's {n} elements")
    return positions, values


def compare_samples(ref: Any, samples: dict, tol: Tolerance, count: int = SAMPLES_PER_TENSOR) -> Comparison:
    """Judge side: the candidate's sampled values against the reference output at the same positions.
    Raises ForgedSamples for samples the harness's sampler cannot have taken (too few, none, outside
    the output): the candidate's process replaced it, and the comparison would check nothing."""
    return compare_sampled(sample_reference(ref, samples, tol, count), samples)


@dataclass
class _SampledTensor:
    """What comparing samples needs of one reference tensor, on the CPU."""
    shape: list
    dtype: torch.dtype
    numel: int
    dense: bool
    limits: tuple[float, float] = (0.0, 0.0)             # (atol, rtol) for it (Tolerance.for_scale)
    sample: tuple[torch.Tensor, torch.Tensor] | None = None   # the candidate's (positions, values)
    expected: torch.Tensor | None = None                # the reference's values at those positions


@dataclass
class SampledReference:
    """The reference read where the candidate's output was sampled (`sample_reference`): the device's
    part of `compare_samples`, done while the reference's device is held; `compare_sampled` needs none."""
    structure: Any
    tensors: list[_SampledTensor]
    scalars: list = field(default_factory=list)      # the reference's Python numbers (scalars_in)
    tol: "Tolerance | None" = None


def sample_reference(ref: Any, samples: dict, tol: Tolerance, count: int = SAMPLES_PER_TENSOR) -> SampledReference:
    """The reference's values at the candidate's sampled positions and its tolerances, on the CPU.
    Raises ForgedSamples (as `compare_samples`) for a sample record the harness cannot have made."""
    pending = start_sample_reference(ref, samples, tol, count)
    return pending.finish()


def start_sample_reference(ref: Any, samples: dict, tol: Tolerance, count: int = SAMPLES_PER_TENSOR,
                           decoded: list | None = None) -> "PendingReference":
    """`sample_reference` with its device work launched and not waited for: the values and the scales
    land in pinned host memory, and a batch of calls waits for the device once, in `finish`, instead of
    three times per call (it checks the record, and raises ForgedSamples, at once). `decoded`: the
    record as `decode_samples` read it ahead (the device is then held for less)."""
    if not isinstance(samples, dict) or not isinstance(samples.get("tensors"), list):
        raise ForgedSamples("no sample record")
    shape = structure(ref)
    if samples.get("structure") != shape:
        return PendingReference(shape, [], tol, scalars_in(ref))
    references = tensors_in(ref)
    if len(samples["tensors"]) != len(references):
        raise ForgedSamples(f"samples of {len(samples['tensors'])} output tensors, the output has {len(references)}")
    ahead = decoded if decoded is not None and len(decoded) == len(references) else [None] * len(references)
    taken = [_sampled(entry, r, count, f"output[{i}]", ahead[i])
             for i, (r, entry) in enumerate(zip(references, samples["tensors"]))]   # all checked before any use
    parts = []
    for r, sample in zip(references, taken):
        view = _SampledTensor(list(r.shape), r.dtype, r.numel(), is_dense(r) if r.numel() else True, sample=sample)
        norm = None
        if sample is not None:
            positions = sample[0].pin_memory() if r.is_cuda else sample[0]
            expected = r.detach().reshape(-1)[positions.to(r.device, non_blocking=True)]
            view.expected = _to_host(torch.view_as_real(expected) if expected.is_complex() else expected)
            if tol.relative_to_scale and (r.is_floating_point() or r.is_complex()) and r.numel():
                norm = _to_host(_norm(r))
        parts.append((view, r, norm))
    return PendingReference(shape, parts, tol, scalars_in(ref))


def _to_host(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` on the CPU, made without waiting for it on a GPU (valid once the device is synchronised)."""
    if not t.is_cuda:
        return t.clone()
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    return host.copy_(t, non_blocking=True)


def _norm(ref: torch.Tensor) -> torch.Tensor:
    """`output_scale`'s norm (its fast path), on the reference's device, not waited for."""
    values = ref.detach().reshape(-1)
    if ref.is_complex():
        values = values.abs()
    return torch.linalg.vector_norm(values, dtype=torch.float64 if values.dtype == torch.float64 else torch.float32)


class PendingReference:
    """A `start_sample_reference` on its way; `finish` gives the SampledReference."""

    def __init__(self, shape: Any, parts: list, tol: Tolerance, scalars: list | None = None):
        self.shape, self.parts, self.tol, self.scalars = shape, parts, tol, scalars or []
        device = next((r.device for _, r, _ in parts if r.is_cuda), None)
        self.done = torch.cuda.Event() if device is not None else None
        if self.done is not None:
            self.done.record(torch.cuda.current_stream(device))
        self._fast_scales: list[float | None] | None = None

    def _scales(self) -> list[float | None]:
        """Each tensor's output_scale where its fast path holds (None where the device must compute it),
        read once the device's work landed."""
        if self._fast_scales is None:
            if self.done is not None:
                self.done.synchronize()
            self._fast_scales = []
            for view, r, norm in self.parts:
                rms = 1.0 if norm is None else float(norm) / view.numel ** 0.5
                self._fast_scales.append(None if not math.isfinite(rms) else rms if rms > 0 else 1.0)
        return self._fast_scales

    def needs_device(self) -> bool:
        """Whether `finish` will compute on the device (a reference with NaN or Inf values): rare."""
        return any(scale is None for scale in self._scales())

    def finish(self) -> SampledReference:
        tensors = []
        for i, ((view, r, _), scale) in enumerate(zip(self.parts, self._scales())):
            if view.sample is not None:
                view.limits = self.tol.for_scale(r.dtype, output_scale(r) if scale is None else scale, i)
            tensors.append(view)
        self.parts = []   # the reference's tensors are no longer needed here
        return SampledReference(self.shape, tensors, self.scalars, self.tol)


def compared_whole(reference: SampledReference, count: int = SAMPLES_PER_TENSOR) -> bool:
    """Whether a sampled comparison read every element of the output (small outputs, numbers)."""
    return all(t.numel <= count for t in reference.tensors) and bool(reference.tensors or reference.scalars)


def compare_sampled(reference: SampledReference, samples: dict) -> Comparison:
    """`compare_samples`' verdict from a `sample_reference` of the same samples, on the CPU."""
    if samples.get("structure") != reference.structure:
        return Comparison(False, float("inf"),
                          f"output structure {samples.get('structure')}, expected {reference.structure}")
    parts = []
    for i, (r, entry) in enumerate(zip(reference.tensors, samples["tensors"])):
        where = f"output[{i}]" if len(reference.tensors) > 1 else "output"
        if entry["shape"] != r.shape:
            parts.append(Comparison(False, float("inf"), f"{where}: shape {tuple(entry['shape'])}, expected {tuple(r.shape)}"))
            continue
        if entry["dtype"] != str(r.dtype).replace("torch.", ""):
            parts.append(Comparison(False, float("inf"), f"{where}: dtype {entry['dtype']}, expected {r.dtype}"))
            continue
        if not entry.get("dense", True) and r.numel and r.dense:
            parts.append(Comparison(False, float("inf"), f"{where}: an overlapping or broadcast (stride 0) view with "
                                                         f"strides {entry.get('strides')}; the reference returns a "
                                                         "dense tensor: return one computed by your kernels",
                                    rule=rules.OUTPUT_LAYOUT.name))
            continue
        if r.sample is None:
            continue
        got = r.sample[1].to(r.expected.dtype).reshape(r.expected.shape)
        parts.append(_compare_tensors(r.expected, got, Tolerance(), where, limits=r.limits, index=i))
    parts += _compare_scalars(reference, samples.get("scalars"))
    if not parts and (reference.scalars or any(r.numel for r in reference.tensors)):
        return Comparison(False, float("inf"), "nothing of the output was compared: no samples of it")
    return _all(parts)


def _compare_scalars(reference: SampledReference, scalars: Any) -> list[Comparison]:
    """The output's Python numbers against the reference's, every one (they travel whole)."""
    if not reference.scalars:
        return []
    if not isinstance(scalars, list) or len(scalars) != len(reference.scalars):
        return [Comparison(False, float("inf"), f"output numbers {scalars!r:.80}, expected {len(reference.scalars)}")]
    tol = reference.tol or Tolerance()
    parts = []
    for i, (ref, out) in enumerate(zip(reference.scalars, scalars)):
        where = f"number {i} of the output" if len(scalars) > 1 else "output"
        if isinstance(ref, bool) or isinstance(ref, int) and not isinstance(out, float):
            ok = type(out) in (bool, int) and out == ref
            parts.append(Comparison(ok, 0.0 if ok else float("inf"), "" if ok else f"{where}: expected {ref}, got {out!r:.40}"))
            continue
        if not isinstance(out, (int, float)) or isinstance(out, bool):
            parts.append(Comparison(False, float("inf"), f"{where}: expected a number, got {out!r:.40}"))
            continue
        err = abs(float(out) - float(ref))
        both_special = not math.isfinite(ref) and (out == ref or math.isnan(ref) and math.isnan(out))
        ok = both_special or math.isfinite(err) and err <= tol.atol + tol.rtol * abs(float(ref))
        parts.append(Comparison(ok, 0.0 if both_special else err, "" if ok else f"{where}: expected {ref}, got {out}"))
    return parts




# -- outputs that follow their inputs (strict) --------------------------------------------------------


def _as_tensors(value: Any) -> list[torch.Tensor]:
    """The output's tensors, or its Python numbers as one tensor when it has no tensor."""
    tensors = tensors_in(value)
    if tensors:
        return tensors
    numbers = [float(v) for v in scalars_in(value)]
    return [torch.tensor(numbers, dtype=torch.float64)] if numbers else []


class Dependence:
    """Collects, per verification input set, the reference's and the candidate's values at fixed
    positions, and judges whether the candidate's outputs move with the inputs like the reference's.

    A candidate whose outputs stay put while the reference's move (a constant answer that lies
    within tolerance because the task's output barely varies), or whose error is not small against
    the reference's own spread across the sets, is rejected (rule `input-independent`)."""

    MAX_ERROR_SHARE = 0.5   # error over the reference's spread, median across sets

    def __init__(self, count: int = SAMPLES_PER_TENSOR, seed: int = 0):
        self.count, self.seed = count, seed
        self.positions: torch.Tensor | None = None
        self.refs: list[torch.Tensor] = []
        self.cands: list[torch.Tensor] = []
        self.later: list[float] = []

    def add(self, ref: Any, cand: Any) -> None:
        r, c = _as_tensors(ref), _as_tensors(cand)
        if not r or not c or r[0].shape != c[0].shape or not r[0].is_floating_point() or r[0].numel() == 0:
            return
        flat_r, flat_c = r[0].detach().reshape(-1), c[0].detach().to(r[0].device).reshape(-1)
        if self.positions is None:
            n = flat_r.numel()
            gen = torch.Generator(device="cpu").manual_seed(self.seed)
            self.positions = (torch.arange(n) if n <= self.count else torch.randint(0, n, (self.count,), generator=gen))
        pos = self.positions.to(flat_r.device)
        self.refs.append(flat_r[pos].to(torch.float64).cpu())
        self.cands.append(flat_c[pos].to(torch.float64).cpu())

    def add_later(self, error: float) -> None:
        """The largest error of a later call (timed, warm-up or spot) whose output was compared whole:
        judged against the same spread as verification's (`later_verdict`)."""
        self.later.append(error)

    def later_verdict(self) -> str | None:
        """Whether the later calls' errors stay small against the reference's spread across the
        verification sets: an estimate that is honest for verification and approximate afterwards (an
        error within tolerance, but as large as the output's own variation) is rejected."""
        spreads = self._spreads()
        if not spreads or not self.later:
            return None
        spread = sorted(spreads)[len(spreads) // 2]
        shares = sorted(error / spread for error in self.later)
        median = shares[len(shares) // 2]
        if median > self.MAX_ERROR_SHARE:
            return (f"after verification the output's error is {median:.0%} of how much the reference's output "
                    "changes between input sets: an estimate, not the result (compute it exactly on every call)")
        return None

    def _spreads(self) -> list[float]:
        n = len(self.refs)
        if n < 2:
            return []
        spreads = [max(float((self.refs[i] - self.refs[j]).abs().nan_to_num(0).max()) for j in range(n) if j != i)
                   for i in range(n)]
        return [s for s in spreads if s > 0]

    def verdict(self) -> str | None:
        """None when the candidate follows its inputs, else the message for the agent."""
        n = len(self.refs)
        if n < 2:
            return None
        shares = []
        cand_moves = False
        for i in range(n):
            spread = max(float((self.refs[i] - self.refs[j]).abs().nan_to_num(0).max()) for j in range(n) if j != i)
            if spread <= 0:
                continue
            error = float((self.cands[i] - self.refs[i]).abs().nan_to_num(0).max())
            shares.append(error / spread)
            cand_moves |= any(not torch.equal(self.cands[i], self.cands[j]) for j in range(n) if j != i)
        if not shares:
            return None   # the reference's own outputs do not move either: nothing to judge
        if not cand_moves:
            return ("the output is the same for every input set while the reference's changes: it does not "
                    "depend on the inputs (a constant answer that happens to lie within tolerance?)")
        shares.sort()
        median = shares[len(shares) // 2]
        if median > self.MAX_ERROR_SHARE:
            return (f"the output's error is {median:.0%} of how much the reference's output changes between "
                    "input sets: it does not follow the inputs the way the reference does (compute the actual "
                    "result; an estimate or an input-independent value is not accepted)")
        return None
