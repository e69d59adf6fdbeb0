"""Samples of an output: every timed call's output checked at positions drawn after the call returned
(`take_samples`, candidate side, packed for the wire), and compared with the reference's values there
(`compare_samples`, `sample_reference` / `start_sample_reference` and `compare_sampled`, judge side).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from cuda_agent.env.rules import registry as rules
from cuda_agent.env.rules.verify import (SAMPLES_PER_TENSOR, Comparison, Tolerance, all_of, compare_tensors,
                                          contiguous_strides, dense_strides, is_dense, norm_of, output_scale, scalars_in,
                                          structure, tensors_in)
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
                 "strides": list(t.stride()) if real else []}   # the judge decides the layout from these
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
            dtype = getattr(torch, name, None) if isinstance(name, str) and name.isidentifier() else None
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
    dense: bool                                          # every element in a place of its own (is_dense)
    contiguous: bool = True                              # row-major (is_contiguous)
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
        view = _SampledTensor(list(r.shape), r.dtype, r.numel(), is_dense(r) if r.numel() else True,
                              r.is_contiguous(), sample=sample)
        norm = None
        if sample is not None:
            positions = sample[0].pin_memory() if r.is_cuda else sample[0]
            expected = r.detach().reshape(-1)[positions.to(r.device, non_blocking=True)]
            view.expected = _to_host(torch.view_as_real(expected) if expected.is_complex() else expected)
            if tol.relative_to_scale and (r.is_floating_point() or r.is_complex()) and r.numel():
                norm = _to_host(norm_of(r))
        parts.append((view, r, norm))
    return PendingReference(shape, parts, tol, scalars_in(ref))


def _to_host(t: torch.Tensor) -> torch.Tensor:
    """A copy of `t` on the CPU, made without waiting for it on a GPU (valid once the device is synchronised)."""
    if not t.is_cuda:
        return t.clone()
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    return host.copy_(t, non_blocking=True)


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
        refused = layout_refused(r, entry.get("strides"), where) if r.numel else None
        if refused is not None:
            parts.append(refused)
            continue
        if r.sample is None:
            continue
        got = r.sample[1].to(r.expected.dtype).reshape(r.expected.shape)
        parts.append(compare_tensors(r.expected, got, Tolerance(), where, limits=r.limits, index=i))
    parts += _compare_scalars(reference, samples.get("scalars"))
    if not parts and (reference.scalars or any(r.numel for r in reference.tensors)):
        return Comparison(False, float("inf"), "nothing of the output was compared: no samples of it")
    return all_of(parts)


def layout_refused(r: _SampledTensor, strides: Any, where: str) -> Comparison | None:
    """The output's layout against the reference's, judged here from the strides the output was read
    through (a flag the candidate's side set is not asked): where the reference's tensor is contiguous,
    the output's must be too; where it is only dense, the output's must be dense; a broadcast reference
    leaves it free. None when the layout passes."""
    shape = r.shape
    if not (isinstance(strides, list) and len(strides) == len(shape) and all(type(s) is int for s in strides)):
        problem = f"strides {strides!r:.60} that do not describe a tensor of shape {tuple(shape)}"
    elif r.contiguous and not contiguous_strides(shape, strides):
        problem = (f"a view with strides {strides} where the reference returns a contiguous (row-major) tensor: "
                   "a view with other strides leaves the work to whoever reads it; return a contiguous tensor "
                   "your kernels wrote")
    elif r.dense and not dense_strides(shape, strides):
        problem = (f"an overlapping or broadcast (stride 0) view with strides {strides}; the reference returns "
                   "a dense tensor: return one computed by your kernels")
    else:
        return None
    return Comparison(False, float("inf"), f"{where}: {problem}", rule=rules.OUTPUT_LAYOUT.name)


def whole_layout_refused(ref: Any, strides: Any) -> Comparison | None:
    """`layout_refused` for a whole output (a verification call's, compared whole): `strides`, each
    output tensor's strides in `tensors_in` order, against the reference's tensors; None when every
    layout passes (or the counts differ: the comparison already refused that)."""
    references = tensors_in(ref)
    if not isinstance(strides, list) or len(strides) != len(references):
        return None
    for i, (r, given) in enumerate(zip(references, strides)):
        view = _SampledTensor(list(r.shape), r.dtype, r.numel(), is_dense(r) if r.numel() else True,
                              r.is_contiguous())
        refused = layout_refused(view, given, f"output[{i}]" if len(references) > 1 else "output") \
            if view.numel else None
        if refused is not None:
            return refused
    return None


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
