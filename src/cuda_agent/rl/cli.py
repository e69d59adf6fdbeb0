"""`cuda-agent rl data` and `cuda-agent train {warmup,rft,value,agentic,all}`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import List, Optional

import typer

from cuda_agent.env.cli.console import fail

DATA_EXAMPLES = """[bold]Examples[/bold]

cuda-agent rl data --dataset synth/tasks.jsonl --out data/rl

cuda-agent rl data --kernelbench KernelBench/KernelBench --levels 1,2 --out data/rl"""


def _stage_examples(stage: str) -> str:
    return f"""[bold]Examples[/bold]

cuda-agent train {stage} --data data/rl --model Qwen/Qwen3-8B --dry-run

cuda-agent train {stage} --data data/rl --out runs/rl --gpus 8 trainer.total_epochs=1"""


def _levels(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        fail(f"--levels takes numbers separated by commas, e.g. 1,2,3; got {text!r}")


def _kernelbench_tasks(root: Path, levels: list[int]):
    from cuda_agent.tasks import load_task

    tasks = []
    for level in levels:
        folder = Path(root) / f"level{level}"
        if not folder.is_dir():
            fail(f"{folder} does not exist: --kernelbench must name a folder holding level1, level2, ... "
                  "(KernelBench/KernelBench in a clone of github.com/ScalingIntelligence/KernelBench)")
        numbered = [p for p in folder.glob("*.py") if p.name.split("_")[0].isdigit()]
        for path in sorted(numbered, key=lambda p: int(p.name.split("_")[0])):
            tasks.append(load_task(f"level{level}/{path.name.split('_')[0]}", root))
    return tasks


def _tasks(dataset: Optional[Path], kernelbench: Optional[Path], levels: str):
    from cuda_agent.tasks import TaskError, load_dataset

    tasks = []
    try:
        if dataset:
            tasks += load_dataset(dataset)
        if kernelbench:
            tasks += _kernelbench_tasks(kernelbench, _levels(levels))
    except FileNotFoundError as exc:
        fail(f"{exc} (a dataset from `cuda-agent synth`, JSONL or parquet with a `code` column)")
    except (TaskError, ValueError) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot read the tasks: {exc.strerror or exc}")
    if not tasks:
        fail("no tasks: give --dataset and/or --kernelbench")
    return tasks


def _preflight(backend: str, evaluator: Optional[str]) -> None:
    """Stages score rollouts on this machine unless --evaluator names a service elsewhere: the
    same fail-fast checks as `eval` (a GPU for --backend cuda, compilers, the sandbox)."""
    if evaluator:
        return
    from cuda_agent.env.config import EvalConfig
    from cuda_agent.env.cli.console import require_machine

    if backend not in ("cuda", "cpu"):
        fail(f"--backend must be cuda or cpu, not {backend!r}")
    config = EvalConfig(backend=backend)
    require_machine(backend, config.sandbox, config.cache_dir)


def _verl_available() -> None:
    import importlib.util

    if importlib.util.find_spec("verl") is None:
        fail('verl is not installed: pip install -e ".[rl]"')


def register(app: typer.Typer) -> None:
    rl_app = typer.Typer(no_args_is_help=True, help="Data for agentic RL.", epilog=DATA_EXAMPLES)
    train_app = typer.Typer(no_args_is_help=True, help="The published four-stage RL recipe on verl.",
                            epilog=_stage_examples("all"))
    app.add_typer(rl_app, name="rl")
    app.add_typer(train_app, name="train")

    @rl_app.command("data", epilog=DATA_EXAMPLES)
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
            rft_prompts: int = typer.Option(128, help="Tasks per RFT rollout batch (times --rft-samples)."),
            eval_gpus: int = typer.Option(
                2, help="GPUs of each node for the evaluation service (cuda backend); training gets the rest. "
                        "0: evaluate inside the rollout workers, on GPUs vLLM uses."),
            eval_resource: Optional[str] = typer.Option(
                None, help="Evaluate on separate nodes that advertise this Ray resource (one unit per GPU; "
                           "training keeps all --gpus)."),
            dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved verl configs and commands."),
        ):
            from cuda_agent.rl import stages

            _verl_available()
            if not dry_run:   # evaluation nodes elsewhere: this machine need not be able to evaluate
                _preflight(backend, evaluator or eval_resource)
            run = stages.Run(out=out, data=data, model=model, gpus=gpus, nodes=nodes, rollout=rollout,
                             eval={"backend": backend}, evaluator=evaluator, rft_samples=rft_samples,
                             rft_prompts=rft_prompts, eval_gpus=eval_gpus, eval_resource=eval_resource)
            names = stages.STAGES if stage == "all" else (stage,)
            user = list(overrides or [])
            try:
                run.service()   # a placement that leaves no GPU for training fails here
                if dry_run:
                    for name in names:
                        _print_stage(name, run, user)
                elif stage == "all":
                    stages.run_all(run, user, echo=typer.echo)
                else:
                    done = stages.run_stage(stage, run, user, echo=typer.echo)
                    typer.echo(f"[{stage}] done: {done}")
            except (ValueError, RuntimeError) as exc:
                fail(str(exc))
        command.__doc__ = HELP[stage]
        return command

    for name in ("warmup", "rft", "value", "agentic", "all"):
        train_app.command(name, epilog=_stage_examples(name))(stage_command(name))


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
                typer.echo(f"# {job.name}: verl's validate_config did not pass here: {causes(exc)}\n")


def causes(exc: BaseException) -> str:
    """The exception and every cause under it, one line each (Hydra's instantiate errors put the
    reason in the cause and end their own message with a colon)."""
    lines, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = " ".join(str(exc).split()) or type(exc).__name__
        line = f"{type(exc).__name__}: {text[:500]}"
        if line not in lines:
            lines.append(line)
        exc = exc.__cause__ or exc.__context__
    return "\n#   caused by ".join(lines)
