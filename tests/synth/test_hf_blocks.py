"""transformers blocks as standalone tasks (skipped when transformers is not installed)."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("transformers")

from cuda_agent.synth import hf_blocks  # noqa: E402
from cuda_agent.tasks import load_task_module  # noqa: E402


def test_crawled_blocks_render_to_runnable_tasks():
    blocks, excluded = hf_blocks.crawl(limit=12)
    assert blocks, excluded
    assert {b.family for b in blocks} <= {"attention", "mlp", "norm"}
    rng = random.Random(0)
    for i in range(3):
        spec = hf_blocks.compose_block(blocks, rng, "tiny")
        code = hf_blocks.render_block(spec)
        module = load_task_module(code, f"synth_test_hf_{i}")
        out = module.Model(*module.get_init_inputs())(*module.get_inputs())
        batch, seq = spec["input_shape"]
        assert tuple(out.shape)[:2] == (batch, seq)
