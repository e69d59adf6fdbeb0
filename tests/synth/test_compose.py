"""Chains are shape-checked on meta tensors, render to runnable KernelBench-style code, and rescale."""

from __future__ import annotations

import random
import warnings

import pytest

from cuda_agent.synth.compose import TINY, ChainSpec, ComposeError, compose_chain, link_shapes, render_chain, \
    render_candidate
from cuda_agent.tasks import Task, load_task_module


@pytest.mark.parametrize("length", [1, 2, 3, 5])
def test_chains_run_with_the_shapes_the_meta_check_predicted(catalog, length):
    ops = catalog.by_name()
    rng = random.Random(length)
    for i in range(8):
        spec = compose_chain(catalog, length, rng, TINY)
        assert len(spec.links) == length
        assert not all(ops[n].view_only for n in spec.ops)
        code = render_chain(spec, ops)
        Task("t", code).check_syntax()
        module = load_task_module(code, f"synth_test_chain_{length}_{i}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                out = module.Model(*module.get_init_inputs())(*module.get_inputs())
            except RuntimeError:
                continue      # value-level failures (e.g. singular matrices) are the filters' job
        assert tuple(out.shape) == link_shapes(spec, ops)[-1]


def test_composition_is_deterministic_per_seed(catalog):
    ops = catalog.by_name()
    a = [render_chain(compose_chain(catalog, 2, random.Random(f"7:2:{j}")), ops) for j in range(5)]
    b = [render_chain(compose_chain(catalog, 2, random.Random(f"7:2:{j}")), ops) for j in range(5)]
    assert a == b and len(set(a)) > 1


def test_rescaling_changes_the_batch_and_keeps_links_consistent(catalog):
    ops = catalog.by_name()
    spec = ChainSpec([4, 8, 12, 12], [
        {"op": "nn.Conv2d", "args": {"in_channels": ["dim", 1], "out_channels": ["lit", 16],
                                     "kernel_size": ["lit", 3]}},
        {"op": "torch.add", "args": {"other": ["tensor", "same", 8, "input", "randn"]}},
    ])
    big = render_candidate({"kind": "chain", "spec": spec.to_dict()}, ops, batch=32)
    assert "batch_size = 32" in big and "torch.randn(32, 16, 10, 10)" in big   # extra input follows
    module = load_task_module(big, "synth_test_rescaled")
    out = module.Model()(*module.get_inputs())
    assert tuple(out.shape) == (32, 16, 10, 10)


def test_a_chain_that_cannot_fit_raises(catalog):
    from cuda_agent.synth.catalog import Catalog

    only_views = Catalog(ops=[op for op in catalog.ops if op.view_only], excluded={})
    with pytest.raises(ComposeError):
        compose_chain(only_views, 1, random.Random(0), attempts=3)


def test_meta_check_rejects_mismatched_links(catalog):
    ops = catalog.by_name()
    bad = ChainSpec([4, 8, 12, 12], [{"op": "torch.mm", "args": {"mat2": ["tensor", "matT", 8, "input", "randn"]}}])
    with pytest.raises(RuntimeError):
        link_shapes(bad, ops)          # mm needs 2-D input: caught on meta, before anything runs
