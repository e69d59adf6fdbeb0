"""Argument recipes: how to fill an operator's parameters, keyed by parameter *name*.

The catalog finds operators and their parameters by introspection; these recipes know, once per name,
what `kernel_size` or `num_groups` mean. A required parameter without a recipe makes its operator
unbuildable (listed as excluded, with the name). An argument is a small JSON-friendly list, so a task
can be rebuilt at another scale:

    ["lit", value]              a literal (int, float, bool, str, None, list)
    ["dim", i]                  size of dimension i of the link's input
    ["tail", k]                 the last k sizes of the input (normalized_shape)
    ["divisor", i, cap]         the largest divisor of dimension i that is <= cap
    ["batch_flat"]              (input.shape[0], -1)
    ["tensor", rule, n, role, init]
                                an extra tensor whose shape follows `rule` (see tensor_shape);
                                role "input" (drawn by get_inputs), "param" (nn.Parameter) or
                                "buffer" (running statistics: no gradient);
                                init "randn" or "pos" (uniform in [0.5, 1.5): variances)

Rescaling changes only the batch dimension, so what depends on the rank (dims, permutations) is drawn
once as a literal, and what depends on sizes is derived.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

Arg = list  # see module docstring

# Sizes the recipes may pick for output widths (out_channels, out_features, ...).
TINY_SIZES = (8, 16, 32)
GPU_SIZES = (64, 128, 256, 512)


@dataclass
class Param:
    name: str
    type: str            # normalised: tensor, tensor?, int, int[], float, scalar, bool, str, other
    required: bool
    kwarg_only: bool = False


def normalise_type(text: str) -> str:
    """Map a schema or annotation type string onto the few kinds the recipes distinguish."""
    t = text.replace("torch.", "").replace(" ", "")
    optional = t.startswith("Optional[") or "|None" in t or "None|" in t or t.endswith("?")
    if "Tensor" in t and not t.startswith(("List[Tensor", "list[Tensor", "tuple[Tensor")):
        return "tensor?" if optional else "tensor"
    if t.startswith(("List[int]", "list[int]", "int[")) or "tuple[int" in t or "BroadcastingList" in t:
        return "int[]"
    for kind in ("bool", "int", "float", "str"):
        if t in (kind, f"Optional[{kind}]") or t.startswith(kind + "|"):
            return kind
    if t in ("number", "Scalar", "Optional[number]"):
        return "scalar"
    return "other"


def _choice(rng: random.Random, values):
    return values[rng.randrange(len(values))]


def _nonbatch_dim(shape, rng):
    return rng.randrange(1, len(shape)) if len(shape) > 1 else 0


def _size(ctx):
    return ["lit", _choice(ctx.rng, ctx.sizes)]


@dataclass
class Ctx:
    shape: tuple            # the link's input shape
    rng: random.Random
    sizes: tuple            # out-width choices
    op: str                 # qualified op name, for name-dependent tensor rules
    probe: bool             # True while the catalog probes: fixed, safe choices


# name -> f(ctx) -> Arg | None (None: leave the parameter out)
RECIPES: dict[str, Callable[[Ctx], Arg | None]] = {}


def _register(names: str, fn):
    for name in names.split():
        RECIPES[name] = fn


_register("in_channels num_features num_channels channels", lambda c: ["dim", 1])
_register("in_features input_size embed_dim d_model in1_features in2_features", lambda c: ["dim", -1])
_register("normalized_shape",
          lambda c: ["tail", 2 if (not c.probe and len(c.shape) >= 3 and c.rng.random() < 0.3) else 1])
_register("out_channels out_features hidden_size", _size)
_register("kernel_size", lambda c: ["lit", 3 if c.probe else _choice(c.rng, (1, 3, 3, 3, 5))])
_register("stride", lambda c: ["lit", 2 if c.probe else _choice(c.rng, (1, 2))])
_register("padding", lambda c: ["lit", 1 if c.probe else _choice(c.rng, (0, 1, 2))])
_register("dilation", lambda c: ["lit", _choice(c.rng, (1, 2))])
_register("groups", lambda c: ["lit", _choice(c.rng, (1, 2, 4))])
_register("num_groups", lambda c: ["divisor", 1, 4])
_register("num_heads nhead", lambda c: ["divisor", -1, 4])
_register("dim", lambda c: ["lit", _nonbatch_dim(c.shape, c.rng)])
_register("keepdim", lambda c: ["lit", bool(c.rng.random() < 0.5)])
_register("negative_slope", lambda c: ["lit", _choice(c.rng, (0.01, 0.1, 0.2))])
_register("alpha", lambda c: ["lit", _choice(c.rng, (0.5, 1.0, 1.5))])
_register("beta", lambda c: ["lit", _choice(c.rng, (0.5, 1.0, 2.0))])
_register("lambd", lambda c: ["lit", _choice(c.rng, (0.25, 0.5))])
_register("threshold", lambda c: ["lit", _choice(c.rng, (0.1, 0.5))])
_register("value", lambda c: ["lit", _choice(c.rng, (0.0, 1.0))])
_register("min_val", lambda c: ["lit", -1.0])
_register("max_val", lambda c: ["lit", 1.0])
_register("min", lambda c: ["lit", _choice(c.rng, (-1.0, -0.5))])
_register("max", lambda c: ["lit", _choice(c.rng, (0.5, 1.0))])
_register("upscale_factor downscale_factor", lambda c: ["lit", 2])
_register("scale_factor", lambda c: ["lit", 2.0])
_register("output_size", lambda c: ["lit", _choice(c.rng, (1, 2, 4))])
_register("shape", lambda c: ["batch_flat"])
_register("chunks sections", lambda c: ["lit", 2])
_register("k", lambda c: ["lit", 2])
_register("diagonal offset", lambda c: ["lit", _choice(c.rng, (0, 1))])
_register("reduction", lambda c: ["lit", _choice(c.rng, ("mean", "sum", "none"))])
_register("approximate", lambda c: ["lit", _choice(c.rng, ("none", "tanh"))])
_register("pad", lambda c: ["lit", [1, 1] if len(c.shape) < 3 else [1, 1, 1, 1]])
_register("dropout dropout_p", lambda c: ["lit", 0.0])     # modules with a dropout knob stay deterministic
_register("eps", lambda c: ["lit", 1e-5])


def _dims(c):
    rest = list(range(1, len(c.shape)))
    c.rng.shuffle(rest)
    return ["lit", [0] + rest]


_register("dims", _dims)
_register("dim0", lambda c: ["lit", 1 if len(c.shape) >= 3 else 0])
_register("dim1", lambda c: ["lit", len(c.shape) - 1])


def _exponent(c):
    return ["lit", _choice(c.rng, (2.0, 3.0))]


# Parameters that are optional in the signature but needed in practice (interpolate without a
# size or scale fails; clamp needs a bound; dropout knobs must be 0).
ALWAYS = {"scale_factor", "dropout", "dropout_p", "min"}
# Optional parameters worth varying (the rest keep their defaults).
VARY = {"stride", "padding", "dilation", "groups", "bias", "keepdim", "approximate", "reduction",
        "negative_slope", "alpha", "beta", "lambd", "affine", "elementwise_affine", "dim", "mode",
        "align_corners", "batch_first", "bidirectional", "max", "normalized_shape", "ceil_mode",
        "count_include_pad", "track_running_stats", "log_target", "margin", "p"}
# Never set (mutate inputs or change the result type).
NEVER = {"inplace", "out", "dtype", "device", "layout", "memory_format", "requires_grad",
         "return_indices", "generator", "_stacklevel", "pin_memory", "_random_samples"}

# Tensor parameters that become learnable parameters (weights) rather than drawn inputs.
STATE_TENSORS = {"weight", "bias", "running_mean", "running_var", "weight_ih", "weight_hh"}


def tensor_rules(op: str, name: str) -> tuple[str, ...]:
    """Shape hypotheses for an extra tensor, most plausible first; the catalog keeps those that
    pass a meta-tensor probe, so the order only says which to prefer."""
    lower = op.lower()
    if name == "weight" and "conv_transpose" in lower:
        return ("convtw",)
    if name == "weight" and "conv" in lower:
        return ("convw",)
    if name == "weight" and ("linear" in lower or "bilinear" in lower):
        return ("linw",)
    if name in ("running_mean", "running_var", "weight", "bias"):
        return ("chan", "last", "scalar")
    if any(k in lower for k in ("mm", "matmul", "mv", "dot", "inner", "outer", "ger", "kron",
                                "tensordot", "cdist", "einsum", "chain")):
        return ("matT", "sq", "last", "same")
    return ("same", "bcast_chan", "last", "scalar")


def tensor_shape(rule: str, shape: tuple, n: int) -> tuple:
    """Concrete shape of an extra tensor for the given link input shape."""
    s = tuple(shape)
    if rule == "same":
        return s
    if rule == "bcast_chan":
        return (s[1],) + (1,) * (len(s) - 2) if len(s) >= 2 else s
    if rule == "chan":
        return (s[1],) if len(s) >= 2 else s
    if rule == "last":
        return (s[-1],)
    if rule == "scalar":
        return ()
    if rule == "matT":
        return s[:-2] + (s[-1], n) if len(s) >= 2 else (s[-1], n)
    if rule == "sq":
        return s[:-2] + (s[-1], s[-1]) if len(s) >= 2 else s
    if rule == "linw":
        return (n, s[-1])
    if rule == "convw":
        return (n, s[1]) + (3,) * (len(s) - 2)
    if rule == "convtw":
        return (s[1], n) + (3,) * (len(s) - 2)
    raise ValueError(f"unknown tensor rule {rule}")


def sample_param(p: Param, ctx: Ctx, rules: tuple[str, ...] | None = None) -> Arg | None:
    """An Arg for parameter `p`, or None to leave it out. Raises KeyError if it is required and
    no recipe knows it."""
    if p.name in NEVER:
        if p.required:
            raise KeyError(p.name)
        return None
    if p.type in ("tensor", "tensor?"):
        if not p.required:
            return None      # optional tensors (masks, weights of norms) keep their defaults
        candidates = rules or tensor_rules(ctx.op, p.name)
        rule = candidates[0] if (ctx.probe or ctx.rng.random() < 0.7) else _choice(ctx.rng, list(candidates))
        role = "buffer" if p.name.startswith("running_") else "param" if p.name in STATE_TENSORS else "input"
        init = "pos" if "var" in p.name else "randn"   # variances must be positive
        return ["tensor", rule, _choice(ctx.rng, ctx.sizes), role, init]
    if p.name == "exponent":
        return _exponent(ctx) if p.type in ("scalar", "float") else None
    recipe = RECIPES.get(p.name)
    if p.required:
        if recipe is not None:
            return recipe(ctx)
        if p.type == "bool":
            return ["lit", False]
        if p.type in ("scalar", "float"):
            return ["lit", _choice(ctx.rng, (0.5, 2.0))]
        raise KeyError(p.name)
    if recipe is None:
        return None
    if p.name in ALWAYS:
        return recipe(ctx)
    if p.name in VARY and not ctx.probe and ctx.rng.random() < 0.35:
        if p.type == "bool":
            return ["lit", bool(ctx.rng.random() < 0.5)]
        return recipe(ctx)
    return None


def resolve(arg: Arg, shape: tuple) -> Any:
    """A non-tensor Arg's concrete value for a link with this input shape."""
    kind = arg[0]
    if kind == "lit":
        return tuple(arg[1]) if isinstance(arg[1], list) else arg[1]
    if kind == "dim":
        return int(shape[arg[1]])
    if kind == "tail":
        return tuple(int(d) for d in shape[-arg[1]:])
    if kind == "divisor":
        size, cap = int(shape[arg[1]]), arg[2]
        return max(d for d in range(1, min(size, cap) + 1) if size % d == 0)
    if kind == "batch_flat":
        return (int(shape[0]), -1)
    raise ValueError(f"not a plain argument: {arg}")

