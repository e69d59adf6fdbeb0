from __future__ import annotations

import copy
import re

import pytest

from cuda_agent.env.workers.draws import TRANSFORMS

from cuda_agent.llm.client import Completion
from cuda_agent.env.config import EvalConfig
from cuda_agent.env.result import EvalError, EvalResult
from cuda_agent.env.reward import milestone_reward
from cuda_agent.tasks import Solution, Task

RELU_TASK = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(64, 256)]


def get_init_inputs():
    return []
'''

RELU_BINDING = '''\
#include <torch/extension.h>

torch::Tensor relu(torch::Tensor x) {
    TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "float32 contiguous input");
    auto y = torch::empty_like(x);
    const float* in = x.data_ptr<float>();
    float* out = y.data_ptr<float>();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) out[i] = in[i] > 0.f ? in[i] : 0.f;
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("relu", &relu, "relu"); }
'''

RELU_MODEL_NEW = '''\
import torch
import torch.nn as nn
import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.relu(x)
'''


@pytest.fixture
def relu_task() -> Task:
    return Task(name="relu", code=RELU_TASK, origin="tests")


class FakeEvaluator:
    """Stands in for `cuda_agent.env.evaluate` in fast tests.

    A solution fails to compile if a file contains `#error`, fails verification while model_new.py
    still raises NotImplementedError, and otherwise is correct with kernel time
    `// kernel_ms=X` (default 1.0) against eager 2.0 ms and torch.compile 1.5 ms.
    """

    def __init__(self):
        self.calls: list[tuple[Solution, EvalConfig]] = []

    def __call__(self, task: Task, solution: Solution, config: EvalConfig) -> EvalResult:
        self.calls.append((solution, config))
        text = "\n".join(solution.files.values())
        r = EvalResult(task=task.name, backend=config.backend or "cpu")
        if "#error" in text:
            r.error = EvalError("compile", "kernels/k.cpp:3:2: error: #error planted")
        elif "NotImplementedError" in solution.files.get("model_new.py", ""):
            r.compiled = True
            r.error = EvalError("verify", "NotImplementedError: write kernels")
        else:
            r.compiled = r.correct = True
            m = re.search(r"kernel_ms=([0-9.]+)", text)
            r.kernel_ms = float(m.group(1)) if m else 1.0
            # the task's draws, and the structured sets the strict protocol adds (as the environment does)
            structured = len(TRANSFORMS) if config.protocol == "strict" else 0
            r.max_abs_error = [0.0] * (config.num_correct_trials + structured)
            if config.baselines:
                r.eager_ms = 2.0
                r.speedup_vs_eager = 2.0 / r.kernel_ms
                if config.compile_baseline:
                    r.compile_ms = 1.5
                    r.speedup_vs_compile = 1.5 / r.kernel_ms
        r.reward = milestone_reward(r.correct, r.kernel_ms, r.eager_ms, r.compile_ms)
        return r


@pytest.fixture
def fake_evaluator() -> FakeEvaluator:
    return FakeEvaluator()


def hold_bash_clock(patch: pytest.MonkeyPatch) -> None:
    """bash reports every command as taking 0.0 s: a build's duration changes the length of what the
    model is told, and with it the token counts of a scripted client (and so compaction)."""
    from types import SimpleNamespace

    from cuda_agent.agent.tools import shell

    patch.setattr(shell, "time", SimpleNamespace(perf_counter=lambda: 0.0))


@pytest.fixture
def steady_bash_clock(monkeypatch):
    hold_bash_clock(monkeypatch)


@pytest.fixture(scope="session")
def real_eval_config(cache_dir) -> EvalConfig:
    """Small, fast settings for real evaluations on the CPU backend, sharing the suite's build cache."""
    from cuda_agent.env.infra.sandbox import sandbox_available

    ok, _ = sandbox_available()
    return EvalConfig(backend="cpu", compile_baseline=False, iters=3, num_correct_trials=2,
                      cache_dir=cache_dir, sandbox="auto" if ok else "none")


@pytest.fixture(scope="session")
def scripted_run(tmp_path_factory, real_eval_config):
    """test_scripted_episode's episode, played once per session: that test checks it against its
    recording, test_replay replays it."""
    from .test_scripted_episode import play_script

    return play_script(tmp_path_factory.mktemp("scripted") / "ws", real_eval_config)


class ScriptedClient:
    """A `ChatClient` replaying a script in process (no HTTP): each entry is an assistant message
    (`chat_server.say`) or an exception to raise. Usage figures are a fixed function of the request,
    so whole episodes are deterministic. Every request's messages are kept."""

    model = "scripted"

    def __init__(self, script: list):
        self.script = list(script)
        self.requests: list[list[dict]] = []

    def complete(self, messages: list[dict], tools: list[dict]) -> Completion:
        self.requests.append(copy.deepcopy(messages))
        entry = self.script.pop(0)
        if isinstance(entry, Exception):
            raise entry
        message = dict(entry)
        finish = message.pop("_finish_reason", "stop")
        chars = sum(len(m.get("content") or "") for m in messages)
        return Completion(message=message, finish_reason=finish, prompt_tokens=chars // 4 + 10, completion_tokens=20)
