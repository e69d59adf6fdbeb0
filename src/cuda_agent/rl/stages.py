"""The four published stages as verl runs: composed verl configs, the commands that run them, and the
hand-over of checkpoints from each stage to the next.

    OUT/warmup/   single-turn PPO (32k)          -> checkpoints/global_step_N/actor/huggingface
    OUT/rft/      rollouts -> trajectories.jsonl -> sft.parquet (the `agent sft` filter)
                  -> verl's SFT trainer          -> checkpoints/global_step_N/huggingface
    OUT/value/    critic-only PPO (critic_warmup = all steps; GAE gamma 1, lambda 0.95)
                                                 -> checkpoints/global_step_N/critic/huggingface
    OUT/agentic/  multi-turn PPO (128k, 150 turns) from the RFT actor and the pretrained critic

Settings are Hydra overrides of verl's `ppo_trainer` / `sft_trainer_engine` configs (a user's replace
ours key by key). A finished stage writes `done.json`; `train all` skips finished stages, and a
crashed one resumes from its latest checkpoint (`trainer.resume_mode=auto`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from cuda_agent.rl.episode import EpisodeSettings, episode_stats
from cuda_agent.rl.evaluation import placement

STAGES = ("warmup", "rft", "value", "agentic")
SAVE = "[model,optimizer,extra,hf_model]"     # hf_model: the next stage loads a Hugging Face folder
LATEST = "latest_checkpointed_iteration.txt"  # verl's tracker file

# The published recipe (PPO with a critic). Stage 4's figures; the earlier PPO stages use the same.
PPO = {
    "algorithm.adv_estimator": "gae",
    "algorithm.gamma": "1.0",
    "algorithm.lam": "0.95",
    "actor_rollout_ref.actor.clip_ratio_low": "0.2",
    "actor_rollout_ref.actor.clip_ratio_high": "0.28",
    "actor_rollout_ref.actor.optim.lr": "3e-6",
    "critic.optim.lr": "6e-6",
    "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-mean",   # per-trajectory token averaging
    "data.train_batch_size": "1024",
    "actor_rollout_ref.actor.use_kl_loss": "false",
    "algorithm.use_kl_in_reward": "false",
}
CONTEXT = {"warmup": (4096, 28672), "agentic": (8192, 122880)}   # prompt, response: 32k and 128k
STEPS = {"warmup": 100, "value": 20, "agentic": 150}             # warm-up and value: not published
EPISODE_SECONDS = {"warmup": 1800, "rft": 3600, "value": 3600, "agentic": 3600}   # wall clock; our choice
LOOPS = {"cuda_agent": "cuda_agent.rl.agent_loop.KernelAgentLoop",
         "cuda_agent_single_turn": "cuda_agent.rl.warmup_loop.WarmupAgentLoop"}


@dataclass
class Run:
    out: Path                         # the run folder; each stage works in OUT/<stage>
    data: Path                        # folder with train.parquet and val.parquet (`cuda-agent rl data`)
    model: str                        # base model: a Hugging Face folder or name
    gpus: int = 8                     # per node
    nodes: int = 1
    rollout: str = "vllm"             # or sglang
    eval: dict = field(default_factory=lambda: {"backend": "cuda"})
    evaluator: str | None = None      # "module:factory" of the evaluation service
    rft_samples: int = 8              # rollouts per training task for rejection fine-tuning
    rft_prompts: int = 128            # tasks per RFT rollout batch (x rft_samples trajectories)
    eval_gpus: int = 2                # per node, kept from training for the evaluation service
    eval_resource: str | None = None  # evaluation on separate nodes advertising this Ray resource

    def stage_dir(self, stage: str) -> Path:
        return Path(self.out) / stage

    def service(self) -> dict | None:
        """Where the evaluation service runs (`rl.evaluation`); None: in the rollout's process
        (a named --evaluator, the CPU backend, or --eval-gpus 0)."""
        if self.evaluator or self.eval.get("backend", "cuda") != "cuda":
            return None
        return placement(self.gpus, self.eval_gpus, self.nodes, self.eval_resource, f"cuda-agent-eval-{Path(self.out).name}")

    def training_gpus(self) -> int:
        """GPUs per node for verl's PPO workers: those the evaluation service does not hold."""
        service = self.service()
        return self.gpus - self.eval_gpus if service and "actors" in service else self.gpus


# -- checkpoints ------------------------------------------------------------------------------------

def latest_step(checkpoints: Path) -> Path | None:
    tracker = Path(checkpoints) / LATEST
    if not tracker.is_file():
        return None
    return Path(checkpoints) / f"global_step_{int(tracker.read_text().strip())}"


PRODUCT = {"warmup": "actor/huggingface", "rft": "huggingface", "value": "critic/huggingface",
           "agentic": "actor/huggingface"}


def product(stage: str, run: Run) -> str:
    """What the stage hands on: from its done.json, else the path it will have (for --dry-run)."""
    done = run.stage_dir(stage) / "done.json"
    if done.is_file():
        return json.loads(done.read_text())["output"]
    return str(run.stage_dir(stage) / "checkpoints" / "global_step_LATEST" / PRODUCT[stage])


def mark_done(stage: str, run: Run, episodes: dict | None = None) -> Path:
    step = latest_step(run.stage_dir(stage) / "checkpoints")
    if step is None:
        raise RuntimeError(f"{stage}: the trainer exited without a checkpoint in {run.stage_dir(stage)}/checkpoints")
    out = step / PRODUCT[stage]
    if not out.is_dir():   # the next stage would load nothing: say so here, not there
        raise RuntimeError(f"{stage}: {out} is missing (the checkpoint has no Hugging Face model; "
                           f"checkpoint.save_contents must include hf_model)")
    done = run.stage_dir(stage) / "done.json"
    done.write_text(json.dumps({"stage": stage, "output": str(out), "episodes": episodes}, indent=2) + "\n")
    return done


# -- overrides --------------------------------------------------------------------------------------

def _common(stage: str, run: Run, actor: str, critic: str | None) -> dict:
    folder = run.stage_dir(stage)
    prompt, response = CONTEXT["warmup" if stage == "warmup" else "agentic"]
    tokens = str(prompt + response)
    o = dict(PPO)
    o.update({
        "data.train_files": str(Path(run.data) / "train.parquet"),
        "data.val_files": str(Path(run.data) / "val.parquet"),
        "data.max_prompt_length": str(prompt),
        "data.max_response_length": str(response),
        "data.filter_overlong_prompts": "true",
        "data.truncation": "left",
        "actor_rollout_ref.model.path": actor,
        "actor_rollout_ref.rollout.name": run.rollout,
        "actor_rollout_ref.rollout.max_model_len": tokens,
        "actor_rollout_ref.actor.use_dynamic_bsz": "true",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": tokens,
        "actor_rollout_ref.actor.checkpoint.save_contents": SAVE,
        "critic.ppo_max_token_len_per_gpu": tokens,
        "critic.checkpoint.save_contents": SAVE,
        "trainer.n_gpus_per_node": str(run.training_gpus()),
        "trainer.nnodes": str(run.nodes),
        "trainer.project_name": "cuda-agent",
        "trainer.experiment_name": stage,
        "trainer.logger": "[console]",
        "trainer.default_local_dir": str(folder / "checkpoints"),
        "trainer.resume_mode": "auto",
        "trainer.save_freq": "10",
        "trainer.test_freq": "10",
        "trainer.val_before_train": "false",
    })
    if stage in STEPS:
        o["trainer.total_training_steps"] = str(STEPS[stage])
    if critic is not None:
        o["critic.model.path"] = critic
    return o


def _agentic(stage: str, run: Run, episode: Path) -> dict:
    return {
        "actor_rollout_ref.rollout.agent.default_agent_loop": "cuda_agent",
        "actor_rollout_ref.rollout.agent.agent_loop_config_path": str(episode.parent / "agent_loops.yaml"),
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": "150",
        "actor_rollout_ref.rollout.multi_turn.format": "hermes",
    }


def episode_settings(stage: str, run: Run) -> EpisodeSettings:
    """What every trajectory of the stage runs under. Paths are under OUT, which every node of a
    multi-node run must see at the same path (a shared file system): the trajectories of all
    rollout workers land in one file that the next step reads."""
    folder = run.stage_dir(stage)
    return EpisodeSettings(eval=dict(run.eval), evaluator=run.evaluator, service=run.service(),
                           workspace_root=str(folder / "workspaces"),
                           limits={"max_seconds": EPISODE_SECONDS[stage]},
                           episodes=str(folder / "episodes.jsonl"),
                           trajectories=str(folder / "trajectories.jsonl") if stage == "rft" else None)


def ppo_overrides(stage: str, run: Run) -> dict:
    episode = run.stage_dir(stage) / "episode.json"
    if stage == "warmup":
        o = _common(stage, run, run.model, run.model)
        o.update({"actor_rollout_ref.rollout.agent.default_agent_loop": "cuda_agent_single_turn",
                  "actor_rollout_ref.rollout.agent.agent_loop_config_path": str(episode.parent / "agent_loops.yaml"),
                  # the loop scores; verl's reward function is the same score where a loop does not set one
                  "reward.custom_reward_function.path": "pkg://cuda_agent.rl.single_turn",
                  "reward.custom_reward_function.name": "compute_score",
                  # verl passes reward_kwargs to the function; the key is not in its yaml, hence `+`
                  "+reward.custom_reward_function.reward_kwargs.settings": str(episode)})
        return o
    if stage == "rft":   # rollouts only: validation on the training split, sampled, n per task
        o = _common(stage, run, product("warmup", run), None)
        o.update(_agentic(stage, run, episode))
        o.update({"data.val_files": str(Path(run.data) / "train.parquet"),
                  # verl's default is the whole split in one batch (x samples): rollouts sized for a cluster
                  "data.val_batch_size": str(run.rft_prompts),
                  "critic.enable": "false",
                  "trainer.val_only": "true",
                  "trainer.val_before_train": "true",
                  "trainer.resume_mode": "disable",
                  "actor_rollout_ref.rollout.val_kwargs.n": str(run.rft_samples),
                  "actor_rollout_ref.rollout.val_kwargs.do_sample": "true",
                  "actor_rollout_ref.rollout.val_kwargs.temperature": "1.0"})
        return o
    rft = product("rft", run)
    if stage == "value":   # the actor stays frozen: every step is a critic warm-up step
        o = _common(stage, run, rft, rft)
        o["trainer.critic_warmup"] = str(STEPS["value"])
    elif stage == "agentic":
        o = _common(stage, run, rft, product("value", run))
    else:
        raise ValueError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
    o.update(_agentic(stage, run, episode))
    return o


def sft_overrides(run: Run) -> dict:
    folder = run.stage_dir("rft")
    prompt, response = CONTEXT["agentic"]
    return {
        "model.path": product("warmup", run),
        "data.train_files": str(folder / "sft.parquet"),
        "data.val_files": "null",
        "data.messages_key": "messages",
        "data.tools_key": "tools",
        # the exact records: arguments as JSON objects, no null keys, tool runs as the template renders them
        "data.custom_cls.path": "pkg://cuda_agent.rl.sft_data",
        "data.custom_cls.name": "RFTDataset",
        "data.max_length": str(prompt + response),
        "data.max_token_len_per_gpu": str(prompt + response),
        "data.truncation": "right",
        "data.train_batch_size": "32",
        "optim.lr": "1e-5",                      # not published
        "trainer.total_epochs": "2",
        "trainer.n_gpus_per_node": str(run.gpus),
        "trainer.nnodes": str(run.nodes),
        "trainer.project_name": "cuda-agent",
        "trainer.experiment_name": "rft",
        "trainer.logger": "[console]",
        "trainer.default_local_dir": str(folder / "checkpoints"),
        "trainer.resume_mode": "auto",
        "checkpoint.save_contents": SAVE,
    }


def merged(ours: dict, user: list[str]) -> list[str]:
    """Hydra override strings: ours, with any key the user names replaced by the user's value."""
    out = dict(ours)
    for item in user:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"override {item!r} is not KEY=VALUE")
        out.pop(key.lstrip("+"), None)
        out.pop("+" + key.lstrip("+"), None)
        out[key] = value
    return [f"{k}={v}" for k, v in out.items()]


# -- composition and validation (CPU) -----------------------------------------------------------------

def config_dir() -> str:
    import verl

    return os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


def compose(config_name: str, overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir(), version_base=None):
        return hydra_compose(config_name=config_name, overrides=overrides)


def validate(config) -> None:
    """verl's own checks, as `main_ppo` runs them before starting Ray."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))


# -- jobs -----------------------------------------------------------------------------------------------

@dataclass
class Job:
    name: str
    config_name: str | None         # verl config it composes (None: a step of ours)
    overrides: list[str]
    argv: list[str]


def jobs(stage: str, run: Run, user: list[str] = ()) -> list[Job]:
    """The stage's steps. User overrides go to the PPO runs; `sft.KEY=VALUE` ones to the SFT trainer."""
    ppo_user = [u for u in user if not u.startswith("sft.")]
    ppo = [sys.executable, "-m", "verl.trainer.main_ppo"]
    if stage != "rft":
        o = merged(ppo_overrides(stage, run), ppo_user)
        return [Job(stage, "ppo_trainer", o, ppo + o)]
    rollout = merged(ppo_overrides("rft", run), ppo_user)
    sft = merged(sft_overrides(run), [u[len("sft."):] for u in user if u.startswith("sft.")])
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes=1",
                f"--nproc_per_node={run.gpus}", "-m", "verl.trainer.sft_trainer"]
    return [Job("rft-rollout", "ppo_trainer", rollout, ppo + rollout),
            Job("rft-filter", None, [], []),
            Job("rft-sft", "sft_trainer_engine", sft, torchrun + sft)]


def write_inputs(stage: str, run: Run) -> None:
    """The episode settings and the agent-loop registration the stage's verl run reads."""
    folder = run.stage_dir(stage)
    folder.mkdir(parents=True, exist_ok=True)
    episode = episode_settings(stage, run).dump(folder / "episode.json")
    (folder / "agent_loops.yaml").write_text("".join(
        f"- name: {name}\n  _target_: {target}\n  settings: {json.dumps(str(episode))}\n"
        for name, target in LOOPS.items()))


def run_stage(stage: str, run: Run, user: list[str] = (), echo=print) -> Path:
    """Run one stage to completion (resuming what an earlier attempt left) and mark it done."""
    write_inputs(stage, run)
    folder = run.stage_dir(stage)
    for job in jobs(stage, run, user):
        if job.name == "rft-rollout" and (folder / "rollout.done").is_file():
            continue
        if job.name == "rft-filter":
            _filter(folder, echo)
            continue
        if job.name == "rft-rollout":
            for name in ("trajectories.jsonl", "episodes.jsonl"):   # a crashed rollout starts over
                (folder / name).unlink(missing_ok=True)
        echo(f"[{stage}] {' '.join(job.argv)}")
        subprocess.run(job.argv, check=True)
        if job.name == "rft-rollout":
            (folder / "rollout.done").write_text("ok\n")
    stats = episode_stats(folder / "episodes.jsonl")
    echo(f"[{stage}] episodes: {stats['episodes']}, dropped (our failures, not scored): {stats['dropped']}, "
         f"stop reasons: {stats['stop_reasons']}")
    return mark_done(stage, run, stats)


def _filter(folder: Path, echo) -> None:
    from cuda_agent.agent.sft import export_sft
    from cuda_agent.agent.trajectory import read_jsonl

    stats = export_sft(read_jsonl(folder / "trajectories.jsonl"), folder / "sft.parquet")
    echo(f"[rft] kept {stats['kept']} trajectories; rejected {stats['rejected']}")
    if not stats["kept"]:
        raise RuntimeError("rft: no trajectory passed the filter (reward > 0, no invalid calls, no loops)")


def run_all(run: Run, user: list[str] = (), echo=print) -> None:
    for stage in STAGES:
        if (run.stage_dir(stage) / "done.json").is_file():
            echo(f"[{stage}] done: {product(stage, run)}")
            continue
        run_stage(stage, run, user, echo)
