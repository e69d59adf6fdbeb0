"""The catalog is crawled (not typed), probes shapes, and excludes random operators with reasons."""

from __future__ import annotations

import random

import pytest
import torch

from cuda_agent.synth.catalog import Catalog, build_catalog, run_op, sample_args


def test_crawl_covers_all_three_namespaces_and_main_families(catalog):
    kinds = {op.kind for op in catalog.ops}
    assert kinds == {"module", "functional", "torch"}
    assert len(catalog.ops) > 250
    families = {op.family for op in catalog.ops}
    for family in ("conv", "linear", "matmul", "activation", "norm", "pooling", "reduction", "loss", "scan"):
        assert family in families, family
    names = catalog.by_name()
    for name in ("nn.Conv2d", "nn.Linear", "nn.GroupNorm", "F.gelu", "torch.cumsum", "torch.bmm"):
        assert name in names, name
    assert names["nn.Conv2d"].family == "conv" and names["torch.bmm"].family == "matmul"


def test_random_operators_are_excluded_and_listed(catalog):
    randoms = set(catalog.random_ops())
    for name in ("nn.Dropout", "F.dropout", "nn.RReLU", "torch.rand_like", "torch.bernoulli",
                 "torch.multinomial", "F.gumbel_softmax"):
        assert name in randoms, name
    assert not randoms & set(catalog.by_name())
    # Weight initialisation samples, but that is construction, not forward: nn.Linear stays.
    assert "nn.Linear" in catalog.by_name()


def test_shape_rules_are_probed(catalog):
    ops = catalog.by_name()
    assert ops["nn.Conv2d"].ranks == [4]                # unbatched 3-D input fails the real run
    assert ops["F.conv2d"].rules["weight"] == ["convw"]
    assert "matT" in ops["torch.matmul"].rules["other"]
    assert ops["torch.sort"].tuple_output
    assert ops["torch.transpose"].view_only and not ops["nn.ReLU"].view_only
    for name, why in catalog.excluded.items():
        assert why, name                                 # every exclusion says why
    assert catalog.excluded["torch.log"].startswith("non-finite")


def test_sampled_args_build_runnable_ops(catalog):
    rng = random.Random(0)
    ops = [op for op in catalog.ops if 4 in op.ranks][:60]
    for op in ops:
        shape = (2, 8, 12, 12)
        args = sample_args(op, shape, rng)
        try:
            meta = run_op(op, args, torch.empty(shape, device="meta"))
        except Exception:
            continue                                     # an unlucky optional arg: the composer retries
        real = run_op(op, args, torch.randn(shape))
        assert tuple(real.shape) == tuple(meta.shape), op.name


def test_roundtrip_through_json(catalog):
    again = Catalog.from_dict(catalog.to_dict())
    assert [op.name for op in again.ops] == [op.name for op in catalog.ops]
    assert again.by_name()["nn.Conv2d"].params == catalog.by_name()["nn.Conv2d"].params


@pytest.mark.slow
def test_crawl_is_deterministic(catalog):
    assert build_catalog(include_transformers=False).to_dict() == catalog.to_dict()


def test_uninitialised_memory_ops_are_excluded_by_name(catalog):
    """empty_like returns whatever the heap held: probing it classified it as 'random' or as
    'input-independent' depending on what ran before, so the crawl was not reproducible."""
    for name in ("torch.empty_like", "torch.empty"):
        if name in catalog.excluded:
            assert catalog.excluded[name].startswith("uninitialised memory") or name == "torch.empty", \
                catalog.excluded[name]
    assert catalog.excluded["torch.empty_like"].startswith("uninitialised memory")
