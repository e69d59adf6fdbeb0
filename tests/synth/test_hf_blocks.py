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


def test_crawl_keeps_transformers_chatter_out_of_stderr():
    """Falcon's config logs itself whole (30 lines, at error level) when a probe sets head_dim; the crawl
    keeps that out of stderr. A fresh process: transformers' log handler holds the stderr of its import."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = ("from transformers.models.auto import modeling_auto\n"
              "modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES = {'falcon': 'FalconForCausalLM'}\n"
              "from cuda_agent.synth import hf_blocks\n"
              "blocks, excluded = hf_blocks.crawl()\n"
              "print(len(blocks) + len(excluded))\n")
    src = str(Path(hf_blocks.__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0 and int(proc.stdout.split()[-1]) > 0, proc.stderr[-2000:]
    assert "FalconConfig" not in proc.stderr and "[transformers]" not in proc.stderr, proc.stderr[:500]
