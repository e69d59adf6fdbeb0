"""The operator catalog, crawled by introspection from `torch.nn`, `torch.nn.functional` and `torch`.

Nothing is listed by hand: every public module class and function has its parameters read
(`inspect.signature`, or the ATen schema for builtins), filled by the name-keyed recipes of
`recipes.py`, and is probed on meta tensors of rank 1 to 5; what passes keeps the ranks it accepts,
the shape rule of each extra tensor and the ATen ops it dispatched (its family; random operators). A
tiny run on real CPU tensors then rejects operators whose output on N(0, 1) input is non-finite, not
floating point, random, or a copy. Rejections and reasons are in `Catalog.excluded` (the datasheet).
"""

from __future__ import annotations

import contextlib
import inspect
import random
import re
import types
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from cuda_agent.synth.recipes import Ctx, Param, TINY_SIZES, normalise_type, resolve, sample_param, \
    tensor_rules, tensor_shape

CATALOG_VERSION = 1
# Canonical probe shapes per rank: distinct sizes, channels divisible by 4 (pixel_shuffle, groups).
CANON = {1: (24,), 2: (4, 24), 3: (4, 8, 20), 4: (2, 8, 12, 12), 5: (2, 4, 6, 8, 8)}

_RANDOM_NAME = re.compile(r"dropout|^rand|bernoulli|binomial|multinomial|^normal$|^poisson$|gumbel|rrelu|"
                          r"^exponential|^geometric|^cauchy|^log_normal|^uniform")
# Ops whose output is uninitialised memory: what they return depends on the heap, so probing them
# would classify them differently from run to run (the crawl must be deterministic).
_UNINITIALISED = re.compile(r"^(new_)?empty(_like|_strided|_permuted)?$")
_SKIP_MODULES = {"Module", "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict",
                 "Container", "Identity"}
# ATen ops that move or copy data without computing anything.
_COPY_OPS = {"clone", "detach", "alias", "lift_fresh", "_to_copy", "copy_", "copy", "contiguous",
             "empty_like", "empty", "empty_strided", "zeros_like", "_unsafe_view", "lift_fresh_copy"}

# Families, from the file a module class lives in (torch/nn/modules/<file>.py).
_MODULE_FAMILY = {
    "conv": "conv", "linear": "linear", "activation": "activation", "pooling": "pooling",
    "batchnorm": "norm", "instancenorm": "norm", "normalization": "norm", "loss": "loss",
    "padding": "padding", "pixelshuffle": "reshape", "channelshuffle": "reshape", "fold": "reshape",
    "flatten": "reshape", "upsampling": "resample", "rnn": "rnn", "transformer": "transformer",
    "distance": "distance", "sparse": "embedding", "adaptive": "loss",
}
_MATMUL_OPS = {"mm", "bmm", "addmm", "matmul", "mv", "dot", "vdot", "inner", "baddbmm", "addbmm",
               "addmv", "addr", "outer", "ger", "kron", "tensordot", "_addmm_activation"}
_ATEN_FAMILY = [   # (pattern on an ATen op name, family), first match wins
    (r"convolution|^conv", "conv"), (r"attention", "attention"), (r"^linear$", "linear"),
    (r"pool", "pooling"), (r"norm", "norm"), (r"softmax", "activation"),
    (r"upsample|grid_sampler", "resample"), (r"^cum|logcumsumexp", "scan"), (r"pad", "padding"),
    (r"loss|entropy", "loss"), (r"dist$", "distance"), (r"linalg|^det$|inverse|cholesky|^lu|^qr$|svd",
                                                         "linalg"),
    (r"sort|kthvalue|topk|median|mode", "sort"), (r"^(sum|mean|amax|amin|prod|var|std|logsumexp|max|min|"
                                                  r"any|all|aminmax|nansum|nanmean|var_mean|std_mean)$",
                                                  "reduction"),
]


@dataclass
class OpSpec:
    name: str                       # as written in task code: nn.Conv2d, F.gelu, torch.cumsum
    kind: str                       # module | functional | torch
    family: str
    params: list[Param]             # constructor (modules) or call parameters after the input
    inputs: list[Param] = field(default_factory=list)   # extra forward() tensors (modules)
    ranks: list[int] = field(default_factory=list)      # input ranks the probe accepted
    rules: dict[str, list[str]] = field(default_factory=dict)  # extra tensor -> shape rules that work
    tuple_output: bool = False      # the op returns a tuple: the chain takes element 0
    aten: list[str] = field(default_factory=list)       # ATen ops seen while probing
    view_only: bool = False         # only reshapes/views: never a task on its own
    pointwise: bool = False         # every compute ATen op it dispatched is tagged pointwise

    @classmethod
    def from_dict(cls, d: dict) -> "OpSpec":
        d = dict(d)
        d["params"] = [Param(**p) for p in d["params"]]
        d["inputs"] = [Param(**p) for p in d.get("inputs", [])]
        return cls(**d)


@dataclass
class Catalog:
    ops: list[OpSpec]
    excluded: dict[str, str]        # op name -> why it is not in the catalog
    blocks: list[dict] = field(default_factory=list)    # transformers blocks (hf_blocks.BlockSpec)
    torch_version: str = torch.__version__
    version: int = CATALOG_VERSION

    def by_name(self) -> dict[str, OpSpec]:
        return {op.name: op for op in self.ops}

    def random_ops(self) -> list[str]:
        return sorted(n for n, why in self.excluded.items() if why.startswith("random"))

    def to_dict(self) -> dict:
        return {"version": self.version, "torch_version": self.torch_version,
                "ops": [asdict(op) for op in self.ops], "blocks": self.blocks, "excluded": self.excluded}

    @classmethod
    def from_dict(cls, d: dict) -> "Catalog":
        return cls(ops=[OpSpec.from_dict(o) for o in d["ops"]], excluded=dict(d["excluded"]),
                   blocks=list(d.get("blocks", [])), torch_version=d.get("torch_version", ""),
                   version=d.get("version", 0))


# ---------------------------------------------------------------------------------------------
# Running one operator (shared by the probe and the composer's shape check)

def resolve_callable(name: str) -> Any:
    space, _, attr = name.partition(".")
    root = {"nn": nn, "F": F, "torch": torch}[space]
    return getattr(root, attr)


def run_op(op: OpSpec, args: dict[str, list], x: torch.Tensor, seed: int = 0,
           record: TorchDispatchMode | None = None, select: bool = True) -> Any:
    """Build and apply one operator to `x` on x's device (meta tensors for shape checks).

    `args` maps parameter names to recipe Args; extra tensors get their shapes from their rule.
    `record` (a dispatch mode) watches the call only, not the construction: weight init samples.
    A tuple result is reduced to its first element unless `select` is False."""
    shape = tuple(x.shape)
    gen = torch.Generator().manual_seed(seed)

    def tensor(arg):
        size = tensor_shape(arg[1], shape, arg[2])
        if x.device.type == "meta":
            return torch.empty(size, device="meta")
        t = torch.rand(size, generator=gen) + 0.5 if arg[4] == "pos" else torch.randn(size, generator=gen)
        return t.to(x.device)

    def value(arg):
        return tensor(arg) if arg[0] == "tensor" else resolve(arg, shape)

    target = resolve_callable(op.name)
    if op.kind == "module":
        kwargs = {p.name: value(args[p.name]) for p in op.params if p.name in args}
        with torch.device(x.device):
            module = target(**kwargs)
        extras = [value(args["forward:" + p.name]) for p in op.inputs]
        with record or contextlib.nullcontext():
            out = module(x, *extras)
    else:
        kwargs = {p.name: value(args[p.name]) for p in op.params if p.name in args}
        with record or contextlib.nullcontext():
            out = target(x, **kwargs)
    if select and isinstance(out, (tuple, list)):
        out = out[0]
    return out


def sample_args(op: OpSpec, shape: tuple, rng: random.Random, sizes=TINY_SIZES, probe=False) -> dict:
    """Recipe Args for all of op's parameters (required ones always, optional ones sometimes)."""
    ctx = Ctx(shape=tuple(shape), rng=rng, sizes=tuple(sizes), op=op.name, probe=probe)
    args = {}
    for p in op.params:
        arg = sample_param(p, ctx, tuple(op.rules.get(p.name, ())) or None)
        if arg is not None:
            args[p.name] = arg
    for p in op.inputs:
        args["forward:" + p.name] = sample_param(p, ctx, tuple(op.rules.get("forward:" + p.name, ())) or None)
    return args


# ---------------------------------------------------------------------------------------------
# Crawling

def _signature_params(fn, skip_first: int) -> list[Param] | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params = []
    for p in list(sig.parameters.values())[skip_first:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        ann = "" if p.annotation is p.empty else (p.annotation if isinstance(p.annotation, str)
                                                  else getattr(p.annotation, "__name__", str(p.annotation)))
        params.append(Param(p.name, normalise_type(str(ann)), p.default is p.empty, p.kind == p.KEYWORD_ONLY))
    return params


def _schema_param_lists(name: str) -> list[list[Param]]:
    """Parameter lists of the usable ATen overloads of `name` (tensor first argument, not `out=`)."""
    out = []
    for schema in torch._C._jit_get_schemas_for_operator(f"aten::{name}"):
        args = list(schema.arguments)
        if schema.is_mutable or not args or normalise_type(str(args[0].type)) != "tensor":
            continue
        if not schema.returns or not all("Tensor" in str(r.type) for r in schema.returns):
            continue
        out.append([Param(a.name, normalise_type(str(a.type)), not a.has_default_value(), a.kwarg_only)
                    for a in args[1:]])
    return out


def _aten_tags(name: str) -> set:
    packet = getattr(torch.ops.aten, name, None)
    tags = set()
    if packet is not None:
        for overload in packet.overloads():
            tags.update(getattr(packet, overload).tags)
    return tags


def _candidates() -> list[tuple[str, str, Any]]:
    """(qualified name, kind, callable) for every public module class and function."""
    found = []
    for name in sorted(dir(nn)):
        obj = getattr(nn, name)
        if isinstance(obj, type) and issubclass(obj, nn.Module) and not name.startswith("_"):
            found.append((f"nn.{name}", "module", obj))
    for name in sorted(dir(F)):
        obj = getattr(F, name)
        if name.startswith("_") or isinstance(obj, type) or not callable(obj):
            continue
        if getattr(obj, "__module__", None) in ("typing", "torch.overrides") or name.startswith("has_torch"):
            continue
        found.append((f"F.{name}", "functional", obj))
    for name in sorted(dir(torch)):
        obj = getattr(torch, name)
        if name.startswith("_") or not isinstance(obj, types.BuiltinFunctionType):
            continue
        found.append((f"torch.{name}", "torch", obj))
    return found


class _AtenRecorder(TorchDispatchMode):
    """Records every ATen op (and its tags) dispatched while probing an operator."""

    def __init__(self):
        super().__init__()
        self.ops: dict[str, set] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.setdefault(func.overloadpacket.__name__, set()).update(func.tags)
        return func(*args, **(kwargs or {}))

    def tags(self) -> set:
        return set().union(*self.ops.values()) if self.ops else set()


def _family(op: OpSpec, module_file: str | None, nn_families: dict[str, str]) -> str:
    if module_file is not None:
        return _MODULE_FAMILY.get(module_file, "other")
    short = op.name.split(".", 1)[1].lower().replace("_", "")
    for key in (short, short + "loss"):
        if key in nn_families:
            return nn_families[key]
    for cls_name, fam in nn_families.items():   # F.batch_norm -> BatchNorm1d
        if re.fullmatch(re.escape(short) + r"[123]d", cls_name):
            return fam
    if any(a in _MATMUL_OPS for a in op.aten):
        return "matmul"
    for pattern, fam in _ATEN_FAMILY:
        if any(re.search(pattern, a) for a in op.aten):
            return fam
    if op.view_only:
        return "view"
    return "elementwise" if op.pointwise else "other"


def _probe(op: OpSpec) -> str | None:
    """Fill op.ranks/rules/aten/tuple_output by probing; return a reason to exclude it, or None."""
    rng = random.Random(0)
    last_error = "no rank accepted"
    recorder = _AtenRecorder()
    extra_names = [p.name for p in op.params if p.type == "tensor" and p.required]
    extra_names += ["forward:" + p.name for p in op.inputs]
    for rank, shape in CANON.items():
        args = sample_args(op, shape, rng, probe=True)
        # Try each shape rule of each extra tensor; keep every rule that works.
        working: dict[str, list[str]] = {}
        ok = False
        for key in extra_names or [None]:
            rules = tensor_rules(op.name, key.split(":")[-1]) if key else (None,)
            for rule in rules:
                trial = dict(args)
                if key:
                    trial[key] = [*trial[key][:1], rule, *trial[key][2:]]
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        out = run_op(op, trial, torch.empty(shape, device="meta"), record=recorder,
                                     select=False)
                    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
                        op.tuple_output, out = True, out[0]
                except Exception as exc:  # noqa: BLE001 - any failure means "not at this rank"
                    last_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
                    continue
                if not isinstance(out, torch.Tensor):
                    last_error = f"returns {type(out).__name__}"
                    continue
                ok = True
                if key:
                    working.setdefault(key, []).append(rule)
                    args[key] = trial[key] if len(working[key]) == 1 else args[key]
        if ok and all(k in working for k in extra_names):
            op.ranks.append(rank)
            for k, rules in working.items():
                op.rules.setdefault(k, [])
                op.rules[k] += [r for r in rules if r not in op.rules[k]]
    if not op.ranks:
        return f"shape probe failed: {last_error}"
    op.aten = sorted(recorder.ops)
    tags = recorder.tags()
    # A seeded op is only acceptable when its randomness is switched off by a dropout knob that the
    # recipes pin to 0 (attention, transformer layers); the real run below still checks determinism.
    pinned = any(p.name in ("dropout", "dropout_p") for p in op.params)
    if torch.Tag.nondeterministic_seeded in tags and not pinned:
        return "random: dispatches a seeded random ATen op"
    if torch.Tag.dynamic_output_shape in tags or torch.Tag.data_dependent_output in tags:
        return "data-dependent output shape"
    op.view_only = all(_is_view(a) for a in op.aten)
    compute = [t for a, t in recorder.ops.items() if not _is_view(a)]
    op.pointwise = bool(compute) and all(torch.Tag.pointwise in t for t in compute)
    return _real_check(op)


_VIEW_OPS = {"view", "reshape", "permute", "transpose", "t", "expand", "squeeze", "unsqueeze", "select",
             "slice", "narrow", "as_strided", "unfold", "flatten", "unflatten", "split", "chunk",
             "split_with_sizes", "movedim", "diagonal", "view_as_real", "flip", "roll", "repeat",
             "unbind", "_reshape_alias", "clone", "expand_as", "view_as", "alias", "swapaxes", "swapdims",
             "pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "native_channel_shuffle", "im2col",
             "col2im", "constant_pad_nd", "tile", "contiguous", "detach", "lift_fresh", "_unsafe_view"}


def _is_view(aten_name: str) -> bool:
    return aten_name in _COPY_OPS or aten_name in _VIEW_OPS or aten_name.endswith("_copy")


def _real_check(op: OpSpec) -> str | None:
    """Tiny runs on real CPU tensors: finite, floating point, deterministic, not a copy.

    Meta kernels skip some checks (unbatched conv inputs pass on meta), so every rank the meta
    probe accepted must also run for real; ranks that do not are dropped."""
    reasons = {}
    for rank in list(op.ranks):
        reasons[rank] = _real_check_rank(op, rank)
    op.ranks = [r for r, why in reasons.items() if why is None]
    return None if op.ranks else next(iter(reasons.values()))


def _real_check_rank(op: OpSpec, rank: int) -> str | None:
    shape = CANON[rank]
    args = sample_args(op, shape, random.Random(0), probe=True)
    for key, rules in op.rules.items():
        args[key] = [args[key][0], rules[0], *args[key][2:]]
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    x2 = torch.randn(shape, generator=torch.Generator().manual_seed(2))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # the CPU generator only (every run here is on the CPU): torch.manual_seed also queues a
            # seed for CUDA with the formatted stack of the caller (a third of the crawl under pytest)
            torch.default_generator.manual_seed(0)
            a = run_op(op, args, x.clone())
            torch.default_generator.manual_seed(0)   # same weights both times: a difference means randomness
            b = run_op(op, args, x.clone())
            torch.default_generator.manual_seed(0)
            c = run_op(op, args, x2)
    except Exception as exc:  # noqa: BLE001
        return f"cpu run failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
    if not a.is_floating_point():
        return f"non-float output ({a.dtype})"
    if a.numel() == 0:
        return "empty output"
    if not torch.isfinite(a).all():
        return "non-finite output on N(0, 1) input"
    if not torch.equal(a, b):
        return "random: two identical runs differ"
    if a.shape == x.shape and torch.equal(a, x):
        return "identity (returns its input)"
    if a.shape == c.shape and torch.equal(a, c):
        return "output does not depend on the input values"
    if all(o in _COPY_OPS for o in op.aten):
        return "copy only (no compute)"
    return None


def _crawl_one(name: str, kind: str, obj: Any, nn_families: dict[str, str]) -> tuple[OpSpec | None, str]:
    lower = name.split(".", 1)[1].lower()
    if _RANDOM_NAME.search(lower):
        return None, "random: name says it samples"
    if _UNINITIALISED.match(lower):
        return None, "uninitialised memory (no values to compute)"
    if kind == "module":
        short = name.split(".", 1)[1]
        if short in _SKIP_MODULES or short.startswith("Lazy") or inspect.isabstract(obj):
            return None, "container, lazy or abstract module"
        params = _signature_params(obj.__init__, 1)
        forward = _signature_params(obj.forward, 2)   # self and the chain input
        if params is None or forward is None:
            return None, "no inspectable signature"
        inputs = [p for p in forward if p.required]
        if any(p.type not in ("tensor", "other") for p in inputs):
            return None, "forward needs non-tensor arguments"
        for p in inputs:
            p.type = "tensor"
        lists = [params]
        module_file = obj.__module__.rsplit(".", 1)[-1]
    else:
        if lower.endswith("_") and not lower.endswith("__"):
            return None, "in-place variant"
        aten_name = name.split(".", 1)[1]
        params = _signature_params(obj, 1)
        lists = [params] if params is not None else _schema_param_lists(aten_name)
        knob = any(p.name in ("dropout", "dropout_p") for plist in lists for p in plist)
        if torch.Tag.nondeterministic_seeded in _aten_tags(aten_name) and not knob:
            return None, "random: ATen op tagged nondeterministic_seeded"
        if not lists:
            return None, "no signature or tensor-first ATen schema (factory or non-tensor function)"
        inputs, module_file = [], None
    reasons = []
    for plist in lists:   # ATen overloads, in schema order
        missing = [p.name for p in plist if p.required and _unfillable(p, name)]
        if missing:
            reasons.append(f"no recipe for required argument '{missing[0]}'")
            continue
        op = OpSpec(name=name, kind=kind, family="", params=plist, inputs=inputs)
        why = _probe(op)
        if why is None:
            op.family = _family(op, module_file, nn_families)
            return op, ""
        reasons.append(why)
        if why.startswith("random"):
            break
    return None, reasons[0] if reasons else "no usable signature"   # the preferred overload's


def _unfillable(p: Param, op_name: str) -> bool:
    try:
        sample_param(p, Ctx(shape=CANON[4], rng=random.Random(0), sizes=TINY_SIZES, op=op_name, probe=True))
    except KeyError:
        return True
    return False


def build_catalog(include_transformers: bool = True) -> Catalog:
    """Crawl and probe every candidate operator (a few seconds; cache the result)."""
    nn_families = {}
    for name in dir(nn):
        obj = getattr(nn, name)
        if isinstance(obj, type) and issubclass(obj, nn.Module):
            nn_families[name.lower()] = _MODULE_FAMILY.get(obj.__module__.rsplit(".", 1)[-1], "other")
    ops, excluded = [], {}
    prev_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name, kind, obj in _candidates():
            op, why = _crawl_one(name, kind, obj, nn_families)
            if op is not None:
                ops.append(op)
            else:
                excluded[name] = why
    finally:
        torch.set_num_threads(prev_threads)
    blocks = []
    if include_transformers:
        from cuda_agent.synth import hf_blocks

        found, hf_excluded = hf_blocks.crawl()
        blocks = [asdict(b) for b in found]
        excluded.update(hf_excluded)
    return Catalog(ops=ops, excluded=excluded, blocks=blocks)
