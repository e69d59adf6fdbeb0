"""A run that visibly learns on one machine: TRL's GRPOTrainer drives the real episode code.

The sanity task (the example bias+ReLU, its reference doing the work eight times over) comes with
three prepared solutions under `candidates/`: `a` correct but slow (reward 1), `b` wrong (-1), `c`
correct and fast (2; no torch.compile baseline). A tiny policy built here installs one with `bash`
and calls `finish`; the reward comes from the real environment's final clean evaluation, memoised per
solution digest (`MemoEvaluator`). A short SFT warm-start teaches the tool-call format; GRPO must then
find `c`. This shows reward, advantages and updates flow through our environment, not kernel quality.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from cuda_agent.rl.episode import EpisodeSettings, SESSION
from cuda_agent.rl.trl_env import KernelEnvironment, environment_class, prompt_row, tool_schemas
from cuda_agent.tasks import Solution, Task, load_solution

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "bias_relu"
ROLES = {"a": "slow", "b": "wrong", "c": "fast"}   # neutral names: the policy cannot read the answer

TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """relu(x + bias), computed eight times over: a slow reference that a plain kernel beats clearly."""

    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        out = x
        for _ in range(8):
            out = torch.relu(x + self.bias)
        return out


batch = 256
features = 1024


def get_inputs():
    return [torch.randn(batch, features)]


def get_init_inputs():
    return [features]
'''

CPU_KERNEL = '''#include <cstdint>
extern "C" void bias_relu_launcher(const float* x, const float* bias, float* out, int64_t rows, int64_t cols) {
    volatile float sink = 0.f;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            float v = x[r * cols + c] + BIAS;
            for (int k = 0; k < SPIN; ++k) sink = sink + v;   // busy work the compiler must keep
            out[r * cols + c] = v > 0.f ? v : 0.f;
        }
}
'''

CUDA_KERNEL = '''#include <cuda_runtime.h>
#include <cstdint>
__global__ void bias_relu_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                 float* __restrict__ out, int64_t n, int64_t cols) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = x[i] + BIAS;
        out[i] = v > 0.f ? v : 0.f;
    }
}
extern "C" cudaError_t bias_relu_launcher(const float* x, const float* bias, float* out, int64_t n,
                                          int64_t cols, cudaStream_t stream) {
    int threads = THREADS;
    int64_t blocks = BLOCKS;
    bias_relu_kernel<<<blocks, threads, 0, stream>>>(x, bias, out, n, cols);
    return cudaGetLastError();
}
'''


def task() -> Task:
    return Task(name="sanity/bias_relu_x8", code=TASK, origin="cuda_agent.rl.sanity")


def candidates(backend: str) -> dict[str, Solution]:
    base = dict(load_solution(EXAMPLE / f"solution_{backend}").files)
    if backend == "cpu":
        path, variants = "kernels/bias_relu.cpp", {
            "fast": CPU_KERNEL.replace("SPIN", "0").replace("BIAS", "bias[c]"),
            "slow": CPU_KERNEL.replace("SPIN", "256").replace("BIAS", "bias[c]"),
            "wrong": CPU_KERNEL.replace("SPIN", "0").replace("BIAS", "0.f")}
    else:
        fast = CUDA_KERNEL.replace("BIAS", "bias[i % cols]").replace("THREADS", "256")
        path, variants = "kernels/bias_relu.cu", {
            "fast": fast.replace("BLOCKS", "(n + threads - 1) / threads"),
            "slow": CUDA_KERNEL.replace("BIAS", "bias[i % cols]").replace("THREADS", "32").replace("BLOCKS", "1"),
            "wrong": fast.replace("bias[i % cols]", "0.f").replace("BLOCKS", "(n + threads - 1) / threads")}
    return {label: Solution({**base, path: variants[role]}) for label, role in ROLES.items()}


class MemoEvaluator:
    """The real environment, with its verdict memoised by (task, solution, settings): the sanity run
    installs the same few solutions over and over."""

    def __init__(self):
        self.cache: dict = {}
        self.requests = self.real = 0
        self.seconds = 0.0

    def __call__(self, task: Task, solution: Solution, config):
        from cuda_agent.env import evaluate

        key = (task.digest, solution.digest, json.dumps(config.to_dict(), sort_keys=True, default=str))
        self.requests += 1
        if key not in self.cache:
            start = time.perf_counter()
            self.cache[key] = evaluate(task, solution, config)
            self.seconds += time.perf_counter() - start
            self.real += 1
        return self.cache[key]


MEMO = MemoEvaluator()


def memo_evaluator() -> MemoEvaluator:
    return MEMO


class CandidatesEnvironment(KernelEnvironment):
    episodes: list[dict] = []   # what each finished episode installed and earned, in order

    def get_reward(self) -> float | None:
        calls = list(self.calls)
        reward = super().get_reward()
        installed = [a.get("command", "") for n, a in calls if n == "bash"]
        label = next((lb for lb in ROLES if installed and installed[-1] == install(lb)), None)
        self.episodes.append({"label": label, "reward": reward, "calls": [n for n, _ in calls]})
        return reward

    def _prepare(self, workspace) -> None:
        for label, solution in candidates(self.settings.eval["backend"]).items():
            solution.write(Path(workspace) / "candidates" / label)


def settings(backend: str, out: Path, session: str = SESSION, cache_dir: str | None = None) -> EpisodeSettings:
    fields = {"backend": backend, "compile_baseline": False}
    if backend == "cpu":
        fields.update(warmup=2, iters=5, num_correct_trials=3, timeout_verify=60.0, timeout_profile=120.0)
    if cache_dir:
        fields["cache_dir"] = str(cache_dir)
    return EpisodeSettings(eval=fields, evaluator="cuda_agent.rl.sanity:memo_evaluator", tools=["bash", "finish"],
                           session=session, workspace_root=str(Path(out) / "workspaces"))


def install(label: str) -> str:
    return f"cp -r candidates/{label}/. ."


def demonstrations(env_cls: type, row: dict, copies: int, seed: int) -> list[list[dict]]:
    """SFT conversations with the real tool outputs: install a label (drawn uniformly), finish, stop."""
    env = env_cls()
    out = []
    for label in ROLES:
        env.reset(**row)
        calls = [("bash", {"command": install(label)}), ("finish", {"summary": "installed " + label})]
        results = [getattr(env, name)(**args) for name, args in calls]
        env._close()
        assistant = {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]}
        tools = [{"role": "tool", "name": n, "content": r} for (n, _), r in zip(calls, results)]
        out += [row["prompt"] + [assistant] + tools + [{"role": "assistant", "content": "Done."}]] * copies
    random.Random(seed).shuffle(out)
    return out


def learn(out: str | Path, *, backend: str = "cpu", steps: int = 30, seed: int = 0, generations: int = 8,
          lr: float = 0.2, optim: str = "sgd", temperature: float = 0.7, sft_steps: int = 120, session: str = SESSION, cache_dir: str | None = None,
          log=print) -> dict:
    """SFT warm-start, then `steps` GRPO steps; returns (and writes OUT/rl_sanity.json) per-step numbers."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback, set_seed
    from trl import GRPOConfig, GRPOTrainer, SFTConfig, SFTTrainer

    from cuda_agent.rl import tiny

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if backend == "cpu":
        torch.set_num_threads(1)   # a tiny model: extra threads only fight over shared cores
    set_seed(seed)
    conf = settings(backend, out, session, cache_dir)
    env_cls = environment_class(conf, base=CandidatesEnvironment)
    row = prompt_row(task(), conf)
    schemas = tool_schemas(env_cls)
    conversations = demonstrations(env_cls, row, copies=8, seed=seed)
    render = tiny.build_tokenizer(["x"], vocab_size=300)   # only its template is used here
    texts = [render.apply_chat_template(c, tools=schemas, tokenize=False) for c in conversations]
    tokenizer = tiny.build_tokenizer(texts, vocab_size=2048, split_words=False)
    model = tiny.build_model(tokenizer, seed=seed)
    use_cpu = backend == "cpu" or not torch.cuda.is_available()
    common = dict(report_to="none", save_strategy="no", logging_steps=1, seed=seed, use_cpu=use_cpu, bf16=False,
                  disable_tqdm=True)

    prompt = render.apply_chat_template(row["prompt"], tools=schemas, tokenize=False, add_generation_prompt=True)
    assert all(t.startswith(prompt) for t in texts)
    pairs = Dataset.from_list([{"prompt": prompt, "completion": t[len(prompt):]} for t in texts])
    start = time.perf_counter()
    sft = SFTTrainer(model=model, processing_class=tokenizer, train_dataset=pairs,   # loss on the replies only
                     args=SFTConfig(output_dir=str(out / "sft"), max_steps=sft_steps, learning_rate=3e-3,
                                    per_device_train_batch_size=8, lr_scheduler_type="constant", warmup_steps=0,
                                    max_length=4096, gradient_checkpointing=False, **common))
    sft.train()
    sft_seconds = time.perf_counter() - start
    losses = [h["loss"] for h in sft.state.log_history if "loss" in h]
    log(f"SFT warm-start: {sft_steps} steps in {sft_seconds:.0f} s, loss {losses[0]:.3f} -> {losses[-1]:.3f}")

    records, turns = [], {"n": 0}
    t0 = {"t": time.perf_counter()}

    class Record(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "reward" in logs:
                records.append({"step": state.global_step, "reward": logs["reward"],
                                "reward_std": logs.get("reward_std"), "seconds": time.perf_counter() - t0["t"]})
                log(f"step {state.global_step:3d}  mean reward {logs['reward']:+.2f}")

    tokenizer.padding_side = "left"
    grpo = GRPOTrainer(model=sft.model, processing_class=tokenizer, environment_factory=env_cls,
                       train_dataset=Dataset.from_list([row] * max(64, steps)), callbacks=[Record()],
                       args=GRPOConfig(output_dir=str(out / "grpo"), max_steps=steps, learning_rate=lr,
                                       per_device_train_batch_size=generations, num_generations=generations,
                                       max_completion_length=256, temperature=temperature, beta=0.0,
                                       scale_rewards="none",   # no division by a near-zero group std
                                       max_tool_calling_iterations=3, lr_scheduler_type="constant", optim=optim,
                                       warmup_steps=0, gradient_checkpointing=False, **common))
    generate = grpo._generate_single_turn   # counts model turns (one generated reply each) for throughput

    def counted(prompt_ids, *args, **kwargs):
        turns["n"] += len(prompt_ids) * (kwargs.get("num_generations") or 1)
        return generate(prompt_ids, *args, **kwargs)

    grpo._generate_single_turn = counted
    requests0, real0, first_episode = MEMO.requests, MEMO.real, len(CandidatesEnvironment.episodes)
    t0["t"] = time.perf_counter()
    grpo.train()
    minutes = (time.perf_counter() - t0["t"]) / 60
    result = {"backend": backend, "seed": seed, "steps": records, "sft_seconds": round(sft_seconds, 1),
              "grpo_seconds": round(minutes * 60, 1), "generations_per_step": generations,
              "model_parameters": sum(p.numel() for p in model.parameters()), "vocab": len(tokenizer),
              "rewards_by_label": {label: _reward_of(label, conf) for label in ROLES},
              "throughput": {"agent_turns_per_min": round(turns["n"] / minutes, 1),
                             "evaluations_per_min": round((MEMO.requests - requests0) / minutes, 1),
                             "real_evaluations": MEMO.real - real0,
                             "real_evaluation_seconds": round(MEMO.seconds, 1),
                             "episodes": len(records) * generations}}
    result["summary"] = summarize(records)
    result["labels_per_step"] = [[e["label"] for e in CandidatesEnvironment.episodes[i:i + generations]]
                                 for i in range(first_episode, len(CandidatesEnvironment.episodes), generations)]
    (out / "rl_sanity.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _reward_of(label: str, conf: EpisodeSettings) -> float | None:
    """The environment's verdict on a candidate, from the memo (None if the policy never installed it)."""
    solution = candidates(conf.eval["backend"])[label]
    for (task_digest, digest, _), result in MEMO.cache.items():
        if digest == solution.digest:
            return result.reward if result.correct else -1
    return None


def summarize(records: list[dict]) -> dict:
    """Mean reward of the first two steps (before GRPO has moved much) and of the last steps."""
    rewards = [r["reward"] for r in records]
    if not rewards:
        return {}
    last = max(1, min(5, len(rewards) // 3))
    return {"first_mean": sum(rewards[:2]) / len(rewards[:2]), "last_mean": sum(rewards[-last:]) / last,
            "last_window": last, "max": max(rewards), "min": min(rewards)}


def plot(result: dict, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in result["steps"]]
    rewards = [r["reward"] for r in result["steps"]]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, rewards, marker="o", ms=3)
    for label, role in ROLES.items():
        value = result["rewards_by_label"].get(label)
        if value is not None:
            ax.axhline(value, ls=":", lw=0.8, color="grey")
            ax.text(steps[0] if steps else 0, value, f"{role} ({label})", va="bottom", fontsize=8, color="grey")
    ax.set(xlabel="GRPO step", ylabel=f"mean reward ({result['generations_per_step']} episodes)",
           title=f"cuda-agent sanity run ({result['backend']} backend, TRL GRPO)", ylim=(-1.2, 2.3))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
