"""The four stages as verl configs: composed from verl's own yaml, every override names a key verl
has, verl's validate_config passes, the published hyperparameters land, stages hand over checkpoints,
and `train all` resumes after a crash."""

import json
import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("verl")

from omegaconf import OmegaConf  # noqa: E402

from cuda_agent.rl import stages  # noqa: E402



def has_key(config, key: str) -> bool:
    """`key` exists in the composed config (also when its value is verl's mandatory `???`)."""
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(config, parent, throw_on_missing=False) if parent else config
    return OmegaConf.is_dict(node) and leaf in list(node.keys())


@pytest.fixture(scope="module")
def base():
    return {name: stages.compose(name, []) for name in ("ppo_trainer", "sft_trainer_engine")}


def run_for(tmp_path, model) -> stages.Run:
    return stages.Run(out=tmp_path / "run", data=tmp_path / "data", model=str(model), gpus=8)


def finish(stage, run, model):
    """What a finished verl run leaves: its tracker, a checkpoint, and our done.json."""
    ckpt = run.stage_dir(stage) / "checkpoints"
    (ckpt / "global_step_7").mkdir(parents=True, exist_ok=True)
    (ckpt / stages.LATEST).write_text("7")
    product = ckpt / "global_step_7" / stages.PRODUCT[stage]
    product.parent.mkdir(parents=True, exist_ok=True)
    if not product.exists():
        product.symlink_to(model, target_is_directory=True)
    stages.mark_done(stage, run)
    return product


@pytest.mark.parametrize("stage", stages.STAGES)
def test_every_override_names_a_key_verl_has(tmp_path, base, stage):
    for job in stages.jobs(stage, run_for(tmp_path, "m")):
        if job.config_name is None:
            continue
        for item in job.overrides:
            key = item.split("=", 1)[0]
            if key.startswith("+"):   # verl reads reward_kwargs but does not declare it
                assert key.startswith("+reward.custom_reward_function.reward_kwargs.")
                continue
            assert has_key(base[job.config_name], key), f"{job.name}: {key}"


def test_stages_compose_validate_and_chain(tmp_path, tiny_model, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    run = run_for(tmp_path, tiny_model)
    configs = {}
    for stage in stages.STAGES:
        for job in stages.jobs(stage, run):
            if job.config_name:
                configs[job.name] = stages.compose(job.config_name, job.overrides)
        if stage != "agentic":
            finish(stage, run, tiny_model)
    for name in ("warmup", "rft-rollout", "value", "agentic"):
        stages.validate(configs[name])
    a = configs["agentic"]
    actor, rollout = a.actor_rollout_ref.actor, a.actor_rollout_ref.rollout
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.optim.lr, a.critic.optim.lr) == (0.2, 0.28, 3e-6, 6e-6)
    assert (a.algorithm.gamma, a.algorithm.lam, a.algorithm.adv_estimator) == (1.0, 0.95, "gae")
    assert (a.data.train_batch_size, rollout.prompt_length + rollout.response_length) == (1024, 131072)
    assert actor.loss_agg_mode == "seq-mean-token-mean" and a.critic.loss_agg_mode == "seq-mean-token-mean"
    assert rollout.multi_turn.max_assistant_turns == 150 and rollout.agent.default_agent_loop == "cuda_agent"
    assert a.trainer.total_training_steps == 150 and a.trainer.critic_warmup == 0
    w = configs["warmup"]
    assert w.actor_rollout_ref.rollout.prompt_length + w.actor_rollout_ref.rollout.response_length == 32768
    assert w.actor_rollout_ref.rollout.agent.default_agent_loop == "cuda_agent_single_turn"
    assert w.reward.custom_reward_function.reward_kwargs.settings.endswith("warmup/episode.json")
    v = configs["value"]
    assert v.trainer.critic_warmup == v.trainer.total_training_steps   # the actor never updates
    r = configs["rft-rollout"]
    assert r.trainer.val_only and r.data.val_files.endswith("train.parquet") and not r.critic.enable
    sft = configs["rft-sft"]
    assert sft.data.messages_key == "messages" and "hf_model" in sft.checkpoint.save_contents
    # Each stage starts from what the previous one produced.
    step = "checkpoints/global_step_7"
    assert w.actor_rollout_ref.model.path == str(tiny_model)
    assert r.actor_rollout_ref.model.path == str(run.stage_dir("warmup") / step / "actor/huggingface")
    assert sft.model.path == r.actor_rollout_ref.model.path
    assert v.actor_rollout_ref.model.path == v.critic.model.path == str(run.stage_dir("rft") / step / "huggingface")
    assert a.actor_rollout_ref.model.path == v.actor_rollout_ref.model.path
    assert a.critic.model.path == str(run.stage_dir("value") / step / "critic/huggingface")


def test_user_overrides_replace_ours(tmp_path):
    [job] = stages.jobs("agentic", run_for(tmp_path, "m"), ["actor_rollout_ref.actor.optim.lr=1e-6",
                                                             "sft.optim.lr=2e-5"])
    assert [o for o in job.overrides if o.startswith("actor_rollout_ref.actor.optim.lr=")] == \
        ["actor_rollout_ref.actor.optim.lr=1e-6"]
    sft = stages.jobs("rft", run_for(tmp_path, "m"), ["sft.optim.lr=2e-5"])[-1]
    assert "optim.lr=2e-5" in sft.overrides and "optim.lr=1e-5" not in sft.overrides


def test_train_all_skips_finished_stages_and_resumes(tmp_path, tiny_model, monkeypatch):
    """Each stage runs verl as a subprocess; here a stand-in trainer leaves what verl leaves."""
    run = run_for(tmp_path, tiny_model)
    calls, crash = [], {"value": 1}

    def fake_run(argv, check):
        module = argv[argv.index("-m") + 1] if "torch.distributed.run" not in argv else "sft"
        stage = next(s for s in stages.STAGES if f"trainer.experiment_name={s}" in argv) if module != "sft" else "rft"
        calls.append((stage, module))
        if crash.get(stage):
            crash[stage] -= 1
            raise subprocess.CalledProcessError(1, argv)
        if "trainer.val_only=true" in argv:   # the RFT rollout: trajectories from the agent loop
            return write_trajectories(run.stage_dir("rft") / "trajectories.jsonl")
        finish(stage, run, tiny_model)
        os.remove(run.stage_dir(stage) / "done.json")   # ours to write, after the trainer returns

    monkeypatch.setattr(stages.subprocess, "run", fake_run)
    with pytest.raises(subprocess.CalledProcessError):
        stages.run_all(run, echo=lambda s: None)
    assert [c[0] for c in calls] == ["warmup", "rft", "rft", "value"]
    assert (run.stage_dir("rft") / "sft.parquet").is_file()
    assert json.loads((run.stage_dir("rft") / "episode.json").read_text())["trajectories"].endswith("trajectories.jsonl")
    calls.clear()
    stages.run_all(run, echo=lambda s: None)   # after the crash: only what is left
    assert [c[0] for c in calls] == ["value", "agentic"]
    assert all((run.stage_dir(s) / "done.json").is_file() for s in stages.STAGES)
    loops = (run.stage_dir("agentic") / "agent_loops.yaml").read_text()
    assert "cuda_agent.rl.agent_loop.KernelAgentLoop" in loops and "agentic/episode.json" in loops


def write_trajectories(path: Path):
    from cuda_agent.agent.trajectory import Trajectory, ToolCallRecord, TurnRecord, append_jsonl

    for reward in (2, -1):
        traj = Trajectory(task={"name": "t"}, model="m", reward=reward, stop_reason="finish",
                          messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                                    {"role": "assistant", "content": "done"}],
                          turns=[TurnRecord(turn=1, tool_calls=[ToolCallRecord(id="c", name="finish",
                                                                               arguments="{}", ok=True)])])
        append_jsonl(path, traj)


def test_dry_run_prints_resolved_configs(tmp_path):
    # in process: verl is imported here already (a new interpreter spent most of its time importing it)
    from typer.testing import CliRunner

    from cuda_agent.cli import app

    out = CliRunner().invoke(app, ["train", "rft", "--dry-run", "--out", str(tmp_path / "run"), "--model", "base"],
                             env={"HF_HUB_OFFLINE": "1"})
    assert out.exit_code == 0, (out.output[-2000:], out.exception)
    text = out.stdout
    assert "# rft-rollout: " in text and "verl.trainer.main_ppo" in text and "# rft-sft: " in text
    assert "val_only: true" in text and "messages_key: messages" in text
    assert not (tmp_path / "run").exists()   # a dry run writes nothing


def test_rollouts_are_sized_for_a_cluster(tmp_path):
    """RFT rollout batches of 128 tasks (verl's default: the whole split at once); evaluation on
    GPUs of its own, never the rollout's; every episode with a wall clock."""
    run = run_for(tmp_path, "m")
    rollout = stages.compose("ppo_trainer", stages.jobs("rft", run)[0].overrides)
    assert rollout.data.val_batch_size == 128 and rollout.actor_rollout_ref.rollout.val_kwargs.n == 8
    assert rollout.trainer.n_gpus_per_node == 6   # 2 of the node's 8 GPUs evaluate
    settings = stages.episode_settings("agentic", run)
    assert settings.service == {"actors": 2, "name": "cuda-agent-eval-run"}
    assert settings.limits["max_seconds"] == 3600
    # separate evaluation nodes: training keeps every GPU of its nodes
    apart = stages.Run(out=tmp_path / "run", data=tmp_path / "data", model="m", gpus=8, nodes=2,
                       eval_resource="cuda_agent_eval_gpu")
    assert stages.episode_settings("rft", apart).service == {"gpu_resource": "cuda_agent_eval_gpu",
                                                              "name": "cuda-agent-eval-run"}
    assert "trainer.n_gpus_per_node=8" in stages.jobs("agentic", apart)[0].overrides
    with pytest.raises(ValueError, match="leaves no GPU"):
        stages.Run(out=tmp_path, data=tmp_path, model="m", gpus=2, eval_gpus=2).service()
    # the CPU backend and a named evaluator evaluate where they are told
    assert stages.Run(out=tmp_path, data=tmp_path, model="m", eval={"backend": "cpu"}).service() is None


def test_the_critic_saved_by_value_is_what_agentic_loads(tmp_path, tiny_model, monkeypatch):
    """verl's FSDP checkpoint manager writes the Hugging Face model to <step>/<role>/huggingface."""
    import torch
    from transformers import AutoConfig, AutoModelForTokenClassification
    from verl.trainer.ppo.utils import Role

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    run = run_for(tmp_path, tiny_model)
    for stage in ("warmup", "rft"):
        finish(stage, run, tiny_model)
    step = run.stage_dir("value") / "checkpoints" / "global_step_20"
    saved = step / str(Role.Critic) / "huggingface"
    critic = AutoModelForTokenClassification.from_config(AutoConfig.from_pretrained(tiny_model, num_labels=1))
    torch.nn.init.constant_(critic.score.weight, 0.5)
    with pytest.raises(RuntimeError, match="hf_model"):   # a checkpoint without the HF model is no hand-over
        (step / str(Role.Critic)).mkdir(parents=True)
        (run.stage_dir("value") / "checkpoints" / stages.LATEST).write_text("20")
        stages.mark_done("value", run)
    critic.save_pretrained(saved)
    stages.mark_done("value", run)
    [job] = stages.jobs("agentic", run)
    config = stages.compose("ppo_trainer", job.overrides)
    stages.validate(config)
    assert config.critic.model.path == str(saved)
    loaded = AutoModelForTokenClassification.from_pretrained(config.critic.model.path, num_labels=1)
    assert torch.equal(loaded.score.weight, critic.score.weight)   # the value head stage 3 trained


def test_dry_run_says_why_validation_failed(tmp_path):
    from typer.testing import CliRunner

    from cuda_agent.cli import app

    out = CliRunner().invoke(app, ["train", "warmup", "--dry-run", "--out", str(tmp_path / "run"),
                                   "--model", str(tmp_path / "no-such-model")], env={"HF_HUB_OFFLINE": "1"})
    assert out.exit_code == 0, (out.output[-2000:], out.exception)
    [line] = [x for x in out.stdout.splitlines() if "validate_config did not pass" in x]
    assert not line.rstrip().endswith(":")
    assert "no-such-model" in out.stdout.split("validate_config did not pass", 1)[1]
