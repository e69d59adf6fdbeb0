"""`cuda-agent rl data` and `cuda-agent train {warmup,rft,value,agentic,all}`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

import typer


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _tasks(dataset: Optional[Path], kernelbench: Optional[Path], levels: str):
    from cuda_agent.tasks import load_dataset, load_task

    tasks = []
    if dataset:
        tasks += load_dataset(dataset)
    if kernelbench:
        for level in [int(x) for x in levels.split(",") if x.strip()]:
            for path in sorted((Path(kernelbench) / f"level{level}").glob("*.py"),
                               key=lambda p: int(p.name.split("_")[0]) if p.name.split("_")[0].isdigit() else 0):
                tasks.append(load_task(f"level{level}/{path.name.split('_')[0]}", kernelbench))
    if not tasks:
        _fail("no tasks: give --dataset and/or --kernelbench")
    return tasks


def _verl_available() -> None:
    import importlib.util

    if importlib.util.find_spec("verl") is None:
        _fail('verl is not installed: pip install -e ".[rl]"')


def register(app: typer.Typer) -> None:
    rl_app = typer.Typer(no_args_is_help=True, help="Data for agentic RL.")
    train_app = typer.Typer(no_args_is_help=True, help="The published four-stage RL recipe on verl.")
    app.add_typer(rl_app, name="rl")
    app.add_typer(train_app, name="train")

    @rl_app.command("data")
    def data_command(
        out: Path = typer.Option(..., help="Folder for train.parquet, val.parquet, stats.json."),
        dataset: Optional[Path] = typer.Option(None, help="Synthesized tasks (JSONL or parquet with `code`)."),
        kernelbench: Optional[Path] = typer.Option(None, help="A KernelBench folder (level1/, level2/, ...)."),
        levels: str = typer.Option("1,2,3", help="KernelBench levels to take."),
        val_fraction: float = typer.Option(0.05, help="Share of unique tasks held out for validation."),
        seed: int = typer.Option(0, help="Seed of the split."),
    ):
        """Tasks -> verl's RL parquet (prompt, data_source, the task in extra_info), no task in both splits."""
        from cuda_agent.rl.data import build

        stats = build(_tasks(dataset, kernelbench, levels), out, val_fraction=val_fraction, seed=seed)
        typer.echo(f"{stats['train']} train + {stats['val']} val tasks ({stats['tasks']} read) in {out}")

    def stage_command(stage: str):
        def command(
            overrides: Optional[List[str]] = typer.Argument(
                None, help="Hydra overrides of verl's config, KEY=VALUE (SFT trainer: sft.KEY=VALUE)."),
            out: Path = typer.Option(Path("runs/rl"), help="Run folder: each stage works in OUT/STAGE."),
            data: Path = typer.Option(Path("data/rl"), help="Folder from `cuda-agent rl data`."),
            model: str = typer.Option("Qwen/Qwen3-8B", help="Base model (Hugging Face folder or name)."),
            gpus: int = typer.Option(8, help="GPUs per node."),
            nodes: int = typer.Option(1, help="Nodes (a Ray cluster)."),
            rollout: str = typer.Option("vllm", help="Rollout engine: vllm or sglang."),
            backend: str = typer.Option("cuda", help="Evaluation backend."),
            evaluator: Optional[str] = typer.Option(None, help="module:factory of the evaluation service."),
            rft_samples: int = typer.Option(8, help="Rollouts per task for rejection fine-tuning."),
            dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved verl configs and commands."),
        ):
            from cuda_agent.rl import stages

            _verl_available()
            run = stages.Run(out=out, data=data, model=model, gpus=gpus, nodes=nodes, rollout=rollout,
                             eval={"backend": backend}, evaluator=evaluator, rft_samples=rft_samples)
            names = stages.STAGES if stage == "all" else (stage,)
            user = list(overrides or [])
            try:
                if dry_run:
                    for name in names:
                        _print_stage(name, run, user)
                elif stage == "all":
                    stages.run_all(run, user, echo=typer.echo)
                else:
                    done = stages.run_stage(stage, run, user, echo=typer.echo)
                    typer.echo(f"[{stage}] done: {done}")
            except (ValueError, RuntimeError) as exc:
                _fail(str(exc))
        command.__doc__ = HELP[stage]
        return command

    for name in ("warmup", "rft", "value", "agentic", "all"):
        train_app.command(name)(stage_command(name))


HELP = {
    "warmup": "Stage 1: single-turn PPO warm-up (32k context).",
    "rft": "Stage 2: roll out, keep reward > 0 without invalid calls or loops, SFT the actor on them.",
    "value": "Stage 3: critic value pretraining (actor frozen; GAE gamma 1, lambda 0.95).",
    "agentic": "Stage 4: multi-turn agentic PPO (128k context, 150 turns).",
    "all": "All four stages in order; finished stages are skipped, a crashed one resumes.",
}


def _print_stage(stage: str, run, user: list[str]) -> None:
    from omegaconf import OmegaConf

    from cuda_agent.rl import stages

    os.environ.setdefault("HF_HUB_OFFLINE", "1")   # validation reads model configs: local folders only
    for job in stages.jobs(stage, run, user):
        if job.config_name is None:
            typer.echo(f"# {job.name}: keep trajectories with reward > 0, no invalid calls, no loops "
                       f"-> {run.stage_dir('rft') / 'sft.parquet'}\n")
            continue
        config = stages.compose(job.config_name, job.overrides)
        typer.echo(f"# {job.name}: {' '.join(job.argv)}")
        typer.echo(OmegaConf.to_yaml(config, resolve=True))
        if job.config_name == "ppo_trainer":
            try:
                stages.validate(config)
                typer.echo(f"# {job.name}: verl's validate_config passed\n")
            except Exception as exc:  # typically a model folder that does not exist yet
                typer.echo(f"# {job.name}: verl's validate_config did not pass here: "
                           f"{str(exc).splitlines()[0][:300]}\n")
