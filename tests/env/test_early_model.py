"""The candidate's model made right after the solution loads, while the judge makes the reference's
(candidate.py `make_early_model`): used where its init inputs are the judge's, made again where they
are not, and what its `__init__` raises reported where it was before (the verify phase)."""

from __future__ import annotations

import torch

from cuda_agent.env import evaluate
from cuda_agent.env.workers.init_inputs import same_value
from cuda_agent.tasks import Task
from tests.env.helpers import EXAMPLES, cpu_config, cpu_workspace

COUNTING_MODEL_NEW = '''import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, features, tag=None):
        super().__init__()
        print(f"model made with tag {tag}", flush=True)
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return cuda_extension.bias_relu(x, self.bias)
'''


def tagged_task(tag: str) -> Task:
    """The example task with a second init input, `tag` (Python source), that its model ignores."""
    code = (EXAMPLES / "model.py").read_text()
    code = code.replace("def __init__(self, features):", "def __init__(self, features, tag=None):")
    code = code.replace("return [features]", f"return [features, {tag}]")
    return Task("tagged", "import random\n" + code)


def test_two_draws_agree_by_value():
    assert same_value([4, (2.5, "a"), {"k": torch.ones(3)}], [4, (2.5, "a"), {"k": torch.ones(3)}])
    assert not same_value([4], [5]) and not same_value([4], (4,)) and not same_value(1, 1.0)
    assert not same_value(torch.ones(3), torch.ones(3, dtype=torch.float64))
    assert not same_value(torch.ones(3), torch.ones(1, 3)) and not same_value(torch.ones(3), torch.zeros(3))


def test_the_model_made_early_is_used_when_the_init_inputs_agree(cache_dir):
    result = evaluate(tagged_task("7"), cpu_workspace(model_new=COUNTING_MODEL_NEW), cpu_config(cache_dir, baselines=False))
    assert result.correct and result.weights == "state_dict", result.error
    assert result.log.count("model made with tag 7") == 1, result.log


def test_the_model_is_made_again_from_the_judges_init_inputs_when_they_differ(cache_dir):
    result = evaluate(tagged_task("random.random()"), cpu_workspace(model_new=COUNTING_MODEL_NEW),
                      cpu_config(cache_dir, baselines=False))
    assert result.correct and result.weights == "state_dict", result.error
    assert result.log.count("model made with tag") == 2, result.log


def test_an_init_that_raises_is_reported_in_the_verify_phase(cache_dir):
    raising = COUNTING_MODEL_NEW.replace('print(f"model made with tag {tag}", flush=True)',
                                         'raise ValueError("no model today")')
    result = evaluate(tagged_task("7"), cpu_workspace(model_new=raising), cpu_config(cache_dir, baselines=False))
    assert not result.correct and result.compiled and result.error.phase == "verify", result.error
    assert "no model today" in result.error.message
