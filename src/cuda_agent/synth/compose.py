"""Rule-based composition: chain 1 to 5 catalog operators into one KernelBench-style task.

A chain is kept as a `ChainSpec` (input shape + per-link recipe Args), not as code, so that the
runtime filter can rebuild it at another batch size. Every link is shape-checked on meta tensors
while the chain is drawn, so nothing that reaches a filter worker fails on shapes.
"""

from __future__ import annotations

import ast
import random
import re
import warnings
from dataclasses import dataclass, field

import torch

from cuda_agent.synth.catalog import Catalog, OpSpec, run_op, sample_args
from cuda_agent.synth.recipes import GPU_SIZES, TINY_SIZES, resolve, tensor_shape
from cuda_agent.tasks.parsing import parse

# Which families to draw from. The first link favours compute-heavy operators (like KernelBench
# level 2: a GEMM or convolution, then epilogues); later links favour epilogues.
FIRST_FAMILY_WEIGHTS = {
    "conv": 4.0, "linear": 3.0, "matmul": 2.0, "norm": 1.5, "pooling": 1.0, "activation": 1.0,
    "elementwise": 1.0, "reduction": 0.7, "scan": 0.5, "loss": 0.5, "resample": 0.5, "padding": 0.3,
    "reshape": 0.3, "distance": 0.4, "sort": 0.3, "rnn": 0.5, "transformer": 0.5, "attention": 0.5,
    "linalg": 0.1, "other": 0.3, "view": 0.2,
}
NEXT_FAMILY_WEIGHTS = {
    "activation": 4.0, "elementwise": 3.0, "norm": 2.0, "pooling": 1.5, "reduction": 1.5, "scan": 0.7,
    "loss": 0.7, "conv": 0.7, "linear": 0.7, "matmul": 0.5, "resample": 0.5, "padding": 0.4,
    "reshape": 0.4, "distance": 0.4, "sort": 0.3, "rnn": 0.2, "transformer": 0.2, "attention": 0.2,
    "linalg": 0.1, "other": 0.3, "view": 0.4,
}


@dataclass(frozen=True)
class SizeProfile:
    """Base input sizes per rank; the runtime filter then scales the batch dimension."""

    name: str
    batch: tuple
    channels: tuple
    spatial: dict               # rank -> choices for each spatial dim
    features: tuple             # last dim of rank-2/3 inputs
    seq: tuple                  # middle dim of rank-3 inputs
    sizes: tuple                # out_channels / out_features choices
    max_numel: int = 1 << 20    # no intermediate result larger than this (kron, outer, unfold blow up)

    def input_shape(self, rank: int, rng: random.Random) -> tuple:
        c = rng.choice
        if rank == 1:
            return (c(self.features) * c(self.batch),)
        if rank == 2:
            return (c(self.batch) * 4, c(self.features))
        if rank == 3:
            return (c(self.batch), c(self.seq), c(self.features))
        sp = self.spatial[rank]
        return (c(self.batch), c(self.channels)) + tuple([c(sp)] * (rank - 2) if rng.random() < 0.7
                                                        else [c(sp) for _ in range(rank - 2)])


TINY = SizeProfile("tiny", batch=(2, 4, 8), channels=(4, 8, 16), spatial={4: (8, 12, 16, 24), 5: (4, 6, 8)},
                   features=(16, 32, 64), seq=(8, 16, 32), sizes=TINY_SIZES, max_numel=1 << 20)
GPU = SizeProfile("gpu", batch=(16, 32, 64), channels=(16, 32, 64), spatial={4: (32, 64, 128), 5: (8, 16, 32)},
                  features=(256, 512, 1024), seq=(64, 128, 256), sizes=GPU_SIZES, max_numel=1 << 27)
PROFILES = {"tiny": TINY, "gpu": GPU}


class ComposeError(RuntimeError):
    pass


@dataclass
class ChainSpec:
    input_shape: list[int]
    links: list[dict] = field(default_factory=list)   # {"op": name, "args": {param: Arg}}

    def to_dict(self) -> dict:
        return {"input_shape": list(self.input_shape), "links": self.links}

    @classmethod
    def from_dict(cls, d: dict) -> "ChainSpec":
        return cls(list(d["input_shape"]), list(d["links"]))

    def with_batch(self, batch: int) -> "ChainSpec":
        return ChainSpec([batch] + list(self.input_shape[1:]), self.links)

    @property
    def ops(self) -> list[str]:
        return [link["op"] for link in self.links]


def link_shapes(spec: ChainSpec, catalog_ops: dict[str, OpSpec]) -> list[tuple]:
    """Input shape of every link and the output shape, from a meta-tensor run (raises on mismatch)."""
    x = torch.empty(spec.input_shape, device="meta")
    shapes = [tuple(x.shape)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for link in spec.links:
            x = run_op(catalog_ops[link["op"]], link["args"], x)
            if not isinstance(x, torch.Tensor):
                raise ComposeError(f"{link['op']} returned {type(x).__name__}")
            shapes.append(tuple(x.shape))
    return shapes


def _pick_op(ops: list[OpSpec], weights: dict, rank: int | None, rng: random.Random,
             allow_view: bool) -> OpSpec | None:
    usable = [op for op in ops if (rank is None or rank in op.ranks) and (allow_view or not op.view_only)]
    if not usable:
        return None
    families = sorted({op.family for op in usable})
    fam_w = [weights.get(f, 0.3) for f in families]
    family = rng.choices(families, fam_w)[0]
    return rng.choice([op for op in usable if op.family == family])


def compose_chain(catalog: Catalog, length: int, rng: random.Random, profile: SizeProfile = TINY,
                  first_weights: dict | None = None, next_weights: dict | None = None,
                  attempts: int = 40) -> ChainSpec:
    """Draw a shape-checked chain of `length` operators; raise ComposeError if none is found."""
    ops = catalog.ops
    by_name = catalog.by_name()
    first_weights = first_weights or FIRST_FAMILY_WEIGHTS
    next_weights = next_weights or NEXT_FAMILY_WEIGHTS
    for _ in range(attempts):
        first = _pick_op(ops, first_weights, None, rng, allow_view=False)
        if first is None:
            break     # nothing but view operators: no task can be built
        rank = rng.choice(first.ranks)
        spec = ChainSpec(list(profile.input_shape(rank, rng)))
        shape = tuple(spec.input_shape)
        for position in range(length):
            placed = False
            for _try in range(12):
                op = first if (position == 0 and _try == 0) else _pick_op(
                    ops, first_weights if position == 0 else next_weights, len(shape), rng,
                    allow_view=position > 0)
                if op is None:
                    break
                link = {"op": op.name, "args": sample_args(op, shape, rng, sizes=profile.sizes)}
                trial = ChainSpec(spec.input_shape, spec.links + [link])
                try:
                    out = link_shapes(trial, by_name)[-1]
                except Exception:  # noqa: BLE001 - this draw does not fit; draw another
                    continue
                # Keep intermediate results non-trivial: a scalar mid-chain leaves nothing to fuse.
                numel = 1
                for d in out:
                    numel *= d
                if numel == 0 or numel > profile.max_numel or (position < length - 1 and numel < 2):
                    continue
                spec, shape, placed = trial, out, True
                break
            if not placed:
                break
        if len(spec.links) == length and not all(by_name[n].view_only for n in spec.ops):
            return spec
    raise ComposeError(f"no valid chain of {length} operators after {attempts} attempts")


# ---------------------------------------------------------------------------------------------
# Rendering a chain as task source

_HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def _lit(value) -> str:
    if isinstance(value, list):
        value = tuple(value)
    return repr(value)


def _tensor_expr(shape: tuple, init: str) -> str:
    dims = ", ".join(str(d) for d in shape) or "()"
    return f"torch.rand({dims}) + 0.5" if init == "pos" else f"torch.randn({dims})"


def render_chain(spec: ChainSpec, catalog_ops: dict[str, OpSpec], title: str = "") -> str:
    """KernelBench-style source: Model, get_inputs(), get_init_inputs()."""
    shapes = link_shapes(spec, catalog_ops)
    init_lines, forward_lines, inputs, attr_count = [], [], [], {}
    extra_inputs: list[str] = []

    def tensor_ref(arg, shape, pname) -> str:
        size = tensor_shape(arg[1], shape, arg[2])
        init = arg[4] if len(arg) > 4 else "randn"
        if arg[3] in ("param", "buffer"):
            attr = _attr(pname)
            if arg[3] == "param":
                init_lines.append(f"self.{attr} = nn.Parameter({_tensor_expr(size, init)})")
            else:
                init_lines.append(f"self.register_buffer({attr!r}, {_tensor_expr(size, init)})")
            return f"self.{attr}"
        name = f"y{len(extra_inputs) + 1}"
        extra_inputs.append(name)
        inputs.append(_tensor_expr(size, init))
        return name

    def _attr(base: str) -> str:
        n = attr_count.get(base, 0)
        attr_count[base] = n + 1
        return base if n == 0 else f"{base}_{n}"

    for link, shape in zip(spec.links, shapes):
        op = catalog_ops[link["op"]]
        args = link["args"]
        plain = []
        for p in op.params:
            if p.name not in args:
                continue
            arg = args[p.name]
            value = tensor_ref(arg, shape, p.name) if arg[0] == "tensor" else _lit(resolve(arg, shape))
            plain.append(f"{p.name}={value}")
        pick = "[0]" if op.tuple_output else ""
        if op.kind == "module":
            attr = _attr(_snake(op.name.split(".", 1)[1]))
            init_lines.append(f"self.{attr} = {op.name}({', '.join(plain)})")
            extras = [tensor_ref(args['forward:' + p.name], shape, p.name) for p in op.inputs]
            forward_lines.append(f"x = self.{attr}({', '.join(['x'] + extras)}){pick}")
        else:
            forward_lines.append(f"x = {op.name}({', '.join(['x'] + plain)}){pick}")

    title = title or " -> ".join(spec.ops)
    body = [_HEADER, "", "class Model(nn.Module):", f'    """{title}"""', "",
            "    def __init__(self):", "        super().__init__()"]
    body += [f"        {line}" for line in init_lines]
    body += ["", f"    def forward(self, {', '.join(['x'] + extra_inputs)}):"]
    body += [f"        {line}" for line in forward_lines] + ["        return x", "", ""]
    dims = ", ".join(str(d) for d in spec.input_shape[1:])
    body += [f"batch_size = {spec.input_shape[0]}", "", "",
             "def get_inputs():",
             f"    x = torch.randn(batch_size{', ' + dims if dims else ''})",
             f"    return [{', '.join(['x'] + inputs)}]", "", "",
             "def get_init_inputs():", "    return []", ""]
    return "\n".join(body)


# ---------------------------------------------------------------------------------------------
# Candidates of every kind (rule-based chains, transformers blocks, LLM-written code)

def _set_batch_size(code: str, batch: int) -> str:
    """Rewrite a top-level `batch_size = <int>` (how LLM-written tasks are rescaled)."""
    tree = parse(code)
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "batch_size" and isinstance(node.value, ast.Constant)):
            node.value = ast.Constant(int(batch))
            return ast.unparse(tree) + "\n"
    raise ComposeError("no top-level `batch_size = <int>` to rescale")


def base_batch(candidate: dict) -> int:
    if candidate["kind"] in ("chain", "block"):
        return int(candidate["spec"]["input_shape"][0])
    for node in parse(candidate["code"]).body:
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "batch_size" and isinstance(node.value, ast.Constant)):
            return int(node.value.value)
    return 0     # not rescalable


def render_candidate(candidate: dict, catalog_ops: dict[str, OpSpec] | None, batch: int | None = None) -> str:
    """Task source of a candidate, optionally at another batch size."""
    kind = candidate["kind"]
    if kind == "chain":
        spec = ChainSpec.from_dict(candidate["spec"])
        return render_chain(spec.with_batch(batch) if batch else spec, catalog_ops)
    if kind == "block":
        from cuda_agent.synth.hf_blocks import render_block

        spec = dict(candidate["spec"])
        if batch:
            spec["input_shape"] = [batch] + list(spec["input_shape"][1:])
        return render_block(spec)
    if kind == "code":
        return _set_batch_size(candidate["code"], batch) if batch else candidate["code"]
    raise ValueError(f"unknown candidate kind {kind}")
