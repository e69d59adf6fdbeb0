"""`transformers` building blocks (attention, MLP, norm layers) as standalone tasks.

Crawled, not listed: for every causal-LM model type that `transformers` registers, the classes of
its modeling file whose names end in Attention, MLP, RMSNorm or LayerNorm are built from a small
config and probed with one forward pass. A block needing rotary embeddings gets `(cos, sin)` as
extra inputs; other required forward arguments make it unusable (listed with the reason).
Only used when `transformers` is installed.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import inspect
import random
import warnings
from dataclasses import asdict, dataclass, field

import torch

SUFFIXES = {"Attention": "attention", "MLP": "mlp", "RMSNorm": "norm", "LayerNorm": "norm"}
# Config fields set small for the probe; the composer rescales them with the size profile.
PROBE_SIZES = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
               "num_key_value_heads": 2, "head_dim": 16, "moe_intermediate_size": 64}
GPU_SIZES = {"hidden_size": 1024, "intermediate_size": 2816, "num_attention_heads": 16,
             "num_key_value_heads": 8, "head_dim": 64, "moe_intermediate_size": 512}
SEQ = {"tiny": (8, 16, 32), "gpu": (256, 512, 1024)}
BATCH = {"tiny": (1, 2, 4), "gpu": (2, 4, 8)}


@dataclass
class BlockSpec:
    name: str                   # transformers.LlamaAttention
    family: str                 # attention | mlp | norm
    block_module: str
    block_class: str
    config_module: str
    config_class: str
    config_fields: list[str]    # which of PROBE_SIZES the config has
    ctor: dict                  # constructor arguments other than the config
    takes_config: bool
    rope: bool = False          # forward needs position_embeddings=(cos, sin)
    none_kwargs: list[str] = field(default_factory=list)   # required forward args passed as None
    tuple_output: bool = False

    to_dict = asdict


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("transformers") is not None


def _config_kwargs(spec: BlockSpec, sizes: dict) -> dict:
    kwargs = {k: v for k, v in sizes.items() if k in spec.config_fields}
    kwargs["attn_implementation"] = "eager"   # plain math, deterministic: a kernel to write
    return kwargs


def _instantiate(spec: BlockSpec, sizes: dict):
    config_cls = getattr(importlib.import_module(spec.config_module), spec.config_class)
    block_cls = getattr(importlib.import_module(spec.block_module), spec.block_class)
    config = config_cls(**_config_kwargs(spec, sizes))
    ctor = {k: (sizes["hidden_size"] if v == "hidden" else v) for k, v in spec.ctor.items()}
    return block_cls(config, **ctor) if spec.takes_config else block_cls(**ctor)


def _head_dim(sizes: dict) -> int:
    return sizes.get("head_dim") or sizes["hidden_size"] // sizes["num_attention_heads"]


def _forward(spec: BlockSpec, block, x, cos=None, sin=None):
    kwargs = {k: None for k in spec.none_kwargs}
    if spec.rope:
        kwargs["position_embeddings"] = (cos, sin)
    out = block(x, **kwargs)
    return out[0] if isinstance(out, (tuple, list)) else out


def _probe(spec: BlockSpec) -> str | None:
    sizes = PROBE_SIZES
    x = torch.randn(2, 8, sizes["hidden_size"])
    cos = torch.randn(2, 8, _head_dim(sizes))
    sin = torch.randn(2, 8, _head_dim(sizes))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(0)
            block = _instantiate(spec, sizes)
            a = _forward(spec, block, x, cos, sin)
            b = _forward(spec, block, x, cos, sin)
    except Exception as exc:  # noqa: BLE001
        return f"probe failed: {type(exc).__name__}: {str(exc).splitlines()[0][:100] if str(exc) else ''}"
    if not isinstance(a, torch.Tensor) or not a.is_floating_point():
        return "output is not a floating-point tensor"
    if not torch.isfinite(a).all():
        return "non-finite output"
    if not torch.equal(a, b):
        return "random: two identical runs differ"
    return None


def _block_spec(cls, config_cls) -> tuple[BlockSpec | None, str]:
    family = next((f for s, f in SUFFIXES.items() if cls.__name__.endswith(s)), None)
    init = inspect.signature(cls.__init__).parameters
    ctor, takes_config = {}, False
    for name, p in list(init.items())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.default is not p.empty:
            continue
        if name == "config":
            takes_config = True
        elif name == "layer_idx":
            ctor[name] = 0
        elif name in ("hidden_size", "dim", "d_model"):
            ctor[name] = "hidden"
        else:
            return None, f"no recipe for constructor argument '{name}'"
    fwd = inspect.signature(cls.forward).parameters
    rope, none_kwargs = False, []
    for name, p in list(fwd.items())[2:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if name == "position_embeddings":
            rope = True
        elif p.default is p.empty:
            if name in ("attention_mask", "past_key_values", "past_key_value", "cache_position",
                        "position_ids"):
                none_kwargs.append(name)
            else:
                return None, f"no recipe for forward argument '{name}'"
    config = config_cls()
    fields = [k for k in PROBE_SIZES if hasattr(config, k)]
    if "hidden_size" not in fields:
        return None, "config has no hidden_size"
    spec = BlockSpec(name=f"transformers.{cls.__name__}", family=family, block_module=cls.__module__,
                     block_class=cls.__name__, config_module=config_cls.__module__,
                     config_class=config_cls.__name__, config_fields=fields, ctor=ctor,
                     takes_config=takes_config, rope=rope, none_kwargs=none_kwargs)
    why = _probe(spec)
    return (spec, "") if why is None else (None, why)


def crawl(limit: int | None = None) -> tuple[list[BlockSpec], dict[str, str]]:
    """Blocks of every registered causal-LM model type (empty when transformers is missing)."""
    if not available():
        return [], {}
    import transformers
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    # every probe would warn about layer_idx, vocab, ...; some configs log themselves whole at error level
    transformers.logging.set_verbosity(transformers.logging.CRITICAL)
    blocks, excluded, seen = [], {}, set()
    types_ = sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)[:limit]
    for model_type in types_:
        try:
            model_cls = getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type])
            config_cls = getattr(transformers, CONFIG_MAPPING_NAMES[model_type])
            module = importlib.import_module(model_cls.__module__)
        except Exception as exc:  # noqa: BLE001 - optional dependencies of one model family
            excluded[f"transformers:{model_type}"] = f"import failed: {type(exc).__name__}"
            continue
        for name, cls in sorted(vars(module).items()):
            if (not isinstance(cls, type) or not issubclass(cls, torch.nn.Module)
                    or cls.__module__ != module.__name__ or not name.endswith(tuple(SUFFIXES))
                    or name in seen):
                continue
            seen.add(name)
            try:
                with contextlib.redirect_stdout(io.StringIO()):   # some configs print themselves
                    spec, why = _block_spec(cls, config_cls)
            except Exception as exc:  # noqa: BLE001
                spec, why = None, f"inspection failed: {type(exc).__name__}"
            if spec is not None:
                blocks.append(spec)
            else:
                excluded[f"transformers.{name}"] = why
    return blocks, excluded


# ---------------------------------------------------------------------------------------------
# Composition and rendering

def compose_block(blocks: list[BlockSpec], rng: random.Random, profile: str = "tiny") -> dict:
    """A standalone-block task spec: {"block": BlockSpec dict, "batch", "seq", "sizes"}."""
    families = sorted({b.family for b in blocks})
    family = rng.choice(families)
    spec = rng.choice([b for b in blocks if b.family == family])
    return {"block": asdict(spec), "input_shape": [rng.choice(BATCH[profile]), rng.choice(SEQ[profile])],
            "sizes": dict(PROBE_SIZES if profile == "tiny" else GPU_SIZES)}


def render_block(spec: dict) -> str:
    block = BlockSpec(**spec["block"])
    sizes = spec["sizes"]
    batch, seq = spec["input_shape"]
    kwargs = ", ".join(f"{k}={v!r}" for k, v in _config_kwargs(block, sizes).items())
    ctor = ", ".join(f"{k}={sizes['hidden_size'] if v == 'hidden' else v!r}" for k, v in block.ctor.items())
    args = ", ".join(filter(None, ["config" if block.takes_config else "", ctor]))
    call = ["x"] + [f"{k}=None" for k in block.none_kwargs]
    inputs = ["x"]
    if block.rope:
        call.append("position_embeddings=(cos, sin)")
        inputs += ["cos", "sin"]
    head_dim = _head_dim(sizes)
    lines = [
        "import torch",
        "import torch.nn as nn",
        f"from {block.config_module} import {block.config_class}",
        f"from {block.block_module} import {block.block_class}",
        "", "",
        "class Model(nn.Module):",
        f'    """{block.name} as a standalone block"""',
        "",
        "    def __init__(self):",
        "        super().__init__()",
        f"        config = {block.config_class}({kwargs})",
        f"        self.block = {block.block_class}({args})",
        "",
        f"    def forward(self, {', '.join(inputs)}):",
        f"        out = self.block({', '.join(call)})",
        "        return out[0] if isinstance(out, tuple) else out",
        "", "",
        f"batch_size = {batch}",
        f"seq_len = {seq}",
        "", "",
        "def get_inputs():",
        f"    x = torch.randn(batch_size, seq_len, {sizes['hidden_size']})",
    ]
    if block.rope:
        lines += [f"    cos = torch.randn(batch_size, seq_len, {head_dim})",
                  f"    sin = torch.randn(batch_size, seq_len, {head_dim})"]
    lines += [f"    return [{', '.join(inputs)}]", "", "", "def get_init_inputs():", "    return []", ""]
    return "\n".join(lines)
