"""Input sets: the task's own draws, and structured variants built from them.

The task's `get_inputs()` draws i.i.d. values (often N(0, 1), sometimes only non-negative). Kernels
can be right on that distribution alone and wrong elsewhere: an identity passes ReLU on `rand`
inputs, a softmax without the max subtraction passes N(0, 1) rows, and a reduction over every 32nd
element lands within tolerance of the mean of i.i.d. values. The strict protocol therefore adds
structured sets, each built from one of the task's own draws so that shapes, dtypes and integer
inputs (indices, labels) stay valid; only floating-point tensors change:

- `spikes`:   a few elements at random positions carry most of the tensor's mass (approximations
              that read a sample of the input, or only part of it, miss them);
- `negate`:   signs flipped (kernels right only on non-negative inputs);
- `ramp`:     scaled by a ramp from -2 to 2 along the last dimension (position-dependent values);
- `scale_up`: scaled by 100 (numerically fragile kernels: exp without the max subtraction, ...);
- `aligned`:  each tensor's own values, rearranged: its largest ones at the same few random positions
              in every input of its size, the rest shuffled. Each tensor is still a draw of the
              task's distribution (a permutation of i.i.d. values), but a product or a loss of the
              inputs now sits in those few positions: an estimate from a sample of the elements, or
              one that checks whether its inputs look like the task's draws, misses it.

A set on which the reference itself fails or gives non-finite values is skipped by the judge.
Both workers build a set from (seed, transform) alone, so the candidate and the judge see the same
values without exchanging them.
"""

from __future__ import annotations

import math

import torch

TRANSFORMS = ("spikes", "negate", "ramp", "scale_up", "aligned")


def draw_inputs(module, seed: int, device: torch.device, transform: str | None = None) -> list:
    """The task's `get_inputs()` under `seed`, created directly on the device (and transformed)."""
    from cuda_agent.env.measure import timing

    torch.manual_seed(seed)
    with torch.device(device):
        inputs = module.get_inputs()
    if not isinstance(inputs, (list, tuple)):
        raise TypeError(f"get_inputs() must return a list, got {type(inputs).__name__}")
    inputs = list(timing.to_device(inputs, device))
    if transform:
        inputs = structured(inputs, transform, seed)
    return inputs


def structured(inputs: list, transform: str, seed: int) -> list:
    """`inputs` with every floating-point tensor changed by `transform` (deterministic in `seed`)."""
    if transform not in TRANSFORMS:
        raise ValueError(f"unknown input transform {transform!r}")
    out = []
    for index, value in enumerate(inputs):
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel():
            if transform == "aligned":   # inputs of one size share their top positions, not their shuffles
                value = _aligned(value, seed * 1009 + value.numel(), seed * 7919 + index)
            else:
                value = _TRANSFORM[transform](value, seed * 1009 + index)
        out.append(value)
    return out


def has_float_inputs(inputs: list) -> bool:
    return any(isinstance(v, torch.Tensor) and v.is_floating_point() and v.numel() for v in inputs)


def _generator(x: torch.Tensor, seed: int) -> torch.Generator:
    return torch.Generator(device=x.device).manual_seed(seed & ((1 << 63) - 1))


def _spikes(x: torch.Tensor, seed: int) -> torch.Tensor:
    # k positive spikes that together outweigh everything else: an estimate from a subsample of the
    # elements sees Binomial(k, fraction) of them, far off the true value unless it happens to see
    # exactly k * fraction. k is drawn too (1 to 64): with a fixed 64, an every-32nd-element estimate
    # saw exactly 2 of them about one time in four and passed.
    n = x.numel()
    generator = _generator(x, seed)
    k = 1 + int(torch.randint(0, max(1, min(64, n // 16)), (1,), generator=generator, device=x.device))
    flat = x.detach().reshape(-1).clone()
    # the norms reduce without a temporary the input's size (abs() made one: 6 GiB on a large task)
    scale = float(torch.linalg.vector_norm(flat, 1, dtype=_at_least_float(flat))) / n or 1.0
    magnitude = scale * n / k
    finfo = torch.finfo(x.dtype)
    magnitude = min(magnitude, finfo.max / 16)
    positions = torch.randint(0, n, (k,), generator=generator, device=x.device)
    flat[positions] = magnitude
    return flat.reshape(x.shape)


def _at_least_float(x: torch.Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)


def _negate(x: torch.Tensor, seed: int) -> torch.Tensor:
    return -x


def _ramp(x: torch.Tensor, seed: int) -> torch.Tensor:
    size = x.shape[-1] if x.dim() else 1
    ramp = torch.linspace(-2.0, 2.0, size, device=x.device, dtype=x.dtype)
    return x * ramp


def _scale_up(x: torch.Tensor, seed: int) -> torch.Tensor:
    largest = float(torch.linalg.vector_norm(x.detach(), math.inf, dtype=_at_least_float(x)))
    factor = min(100.0, torch.finfo(x.dtype).max / max(largest, 1e-30) / 16)
    return x * (factor if math.isfinite(factor) else 1.0)


LIGHT_ALIGNED_ELEMENTS = 1 << 26   # above this, `_aligned` swaps instead of sorting and shuffling (memory)


def _aligned(x: torch.Tensor, seed: int, shuffle_seed: int | None = None) -> torch.Tensor:
    n = x.numel()
    k = max(1, n // 1024)
    if n > LIGHT_ALIGNED_ELEMENTS:
        return _aligned_by_swaps(x, k, seed)
    order = torch.randperm(n, generator=_generator(x, seed), device=x.device)
    top, rest = order[:k], order[k:]   # the positions of the largest values, and the others
    values = x.detach().reshape(-1)
    ranked = torch.argsort(values, descending=True, stable=True)
    shuffle = _generator(x, seed if shuffle_seed is None else shuffle_seed)
    shuffled = ranked[k:][torch.randperm(n - k, generator=shuffle, device=x.device)]
    flat = torch.empty_like(values)
    flat[top] = values[ranked[:k]]
    flat[rest] = values[shuffled]
    return flat.reshape(x.shape)


_TRANSFORM = {"spikes": _spikes, "negate": _negate, "ramp": _ramp, "scale_up": _scale_up, "aligned": _aligned}


def _aligned_by_swaps(x: torch.Tensor, k: int, seed: int) -> torch.Tensor:
    """`_aligned` for a large tensor, in one copy of it: its k largest values swapped with the values at
    up to k random positions (the same in every input of its size; those that collide are dropped), the
    rest left in place (a draw's values are i.i.d.: their order says nothing). A full sort and shuffle
    of 1.6 G elements took several times the input in int64 indices and ran a GPU out of memory."""
    values = x.detach().reshape(-1)
    top_values, top_at = torch.topk(values, k)
    wanted = torch.unique(torch.randint(0, values.numel(), (k,), generator=_generator(x, seed), device=x.device))
    targets = wanted[~torch.isin(wanted, top_at)]
    m = targets.numel()
    flat = values.clone()
    flat[top_at[:m]] = values[targets]      # topk's order is sorted: the m largest move, each index once
    flat[targets] = top_values[:m]
    return flat.reshape(x.shape)

