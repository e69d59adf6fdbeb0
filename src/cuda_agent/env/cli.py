"""`cuda-agent eval` and `cuda-agent cache`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    @app.command("eval")
    def eval_command(
        task: Optional[str] = typer.Argument(None, help="Task: a .py file, levelN/ID (KernelBench), or data.jsonl#ROW. "
                                                        "Omitted: the embedded example."),
        solution: Optional[Path] = typer.Argument(None, help="model_new.py (single file) or a workspace folder."),
        backend: Optional[str] = typer.Option(None, help="cuda or cpu (default: cuda when a GPU is present)."),
        kernelbench: Optional[Path] = typer.Option(None, help="KernelBench folder for levelN/ID tasks."),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        trials: int = typer.Option(5, help="Random input sets for verification."),
        iters: Optional[int] = typer.Option(None, help="Timed calls (default 100 on CUDA, 20 on CPU)."),
        atol: float = typer.Option(1e-2), rtol: float = typer.Option(1e-2),
        no_compile_baseline: bool = typer.Option(False, help="Skip the torch.compile baseline."),
        no_sandbox: bool = typer.Option(False, help="Run the candidate without bubblewrap."),
        cache_dir: Optional[Path] = typer.Option(None, help="Build and baseline cache (default ~/.cache/cuda-agent)."),
    ):
        """Compile, verify and profile SOLUTION against TASK; print the verdict and reward."""
        from cuda_agent.env.config import EvalConfig, detect_backend
        from cuda_agent.env.evaluation import evaluate
        from cuda_agent.tasks import TaskError, load_solution, load_task

        backend = backend or detect_backend()
        if backend not in ("cuda", "cpu"):
            _fail(f"--backend must be cuda or cpu, not {backend!r}")
        if task is None:  # the embedded example: runs anywhere
            task = str(EXAMPLES / "bias_relu" / "model.py")
            solution = solution or EXAMPLES / "bias_relu" / ("solution_cuda" if backend == "cuda" else "solution_cpu")
        if solution is None:
            _fail("give a SOLUTION (a model_new.py file or a workspace folder)")
        try:
            task_obj = load_task(task, kernelbench)
            solution_obj = load_solution(solution)
        except (FileNotFoundError, TaskError, ValueError) as exc:
            _fail(str(exc))
        config = EvalConfig(backend=backend, num_correct_trials=trials, iters=iters, atol=atol, rtol=rtol,
                            compile_baseline=not no_compile_baseline, sandbox="none" if no_sandbox else "auto")
        if cache_dir:
            config.cache_dir = cache_dir
        if not as_json:
            typer.echo(f"evaluating {solution} on {task_obj.name} ({backend})...", err=True)
        result = evaluate(task_obj, solution_obj, config)
        if as_json:
            typer.echo(json.dumps(result.to_dict()))
        else:
            _print_result(result)

    @app.command("cache")
    def cache_command(
        action: str = typer.Argument(..., help="'info', 'clear', 'warm' or 'verify'."),
        cache_dir: Optional[Path] = typer.Option(None),
        backend: Optional[str] = typer.Option(None, help="warm: cuda or cpu (default: cuda when a GPU is present)."),
        sample: int = typer.Option(5, help="verify: how many stored baselines to re-time."),
        fix: bool = typer.Option(False, help="verify: replace the entries that no longer agree."),
    ):
        """Show, clear or warm the build and baseline cache (warm: precompile the torch header once,
        about 30-60 s, so no evaluation waits for it); verify: re-time a sample of the stored
        eager / torch.compile baselines on this machine and say which no longer agree.

        Example: cuda-agent cache verify --sample 10 --fix"""
        from cuda_agent.env.compiler import clear_cache
        from cuda_agent.env.config import default_cache_dir

        root = cache_dir or default_cache_dir()
        if action == "info":
            size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) if root.exists() else 0
            typer.echo(f"{root}: {size / 1e6:.1f} MB")
        elif action == "clear":
            freed = clear_cache(root)
            import shutil

            shutil.rmtree(root / "baselines", ignore_errors=True)
            typer.echo(f"cleared {root} ({freed / 1e6:.1f} MB of builds)")
        elif action == "warm":
            import time

            from cuda_agent.env.compiler import BuildError, prepare_toolchain
            from cuda_agent.env.config import EvalConfig

            chosen = EvalConfig(backend=backend).resolved_backend()
            start = time.perf_counter()
            try:
                header = prepare_toolchain(chosen, root / "build")
            except BuildError as exc:
                _fail(f"could not prepare the {chosen} toolchain: {exc.summary}")
            typer.echo(f"{chosen} toolchain ready in {time.perf_counter() - start:.1f} s ({header.parent})")
        elif action == "verify":
            _verify_baselines(root, backend, sample, fix)
        else:
            _fail("action must be 'info', 'clear', 'warm' or 'verify'")


def _verify_baselines(root: Path, backend: Optional[str], sample: int, fix: bool) -> None:
    """Re-time stored baselines of this device and torch version; report (and replace) disagreements."""
    import random

    import torch

    from cuda_agent.env.baselines import AGREEMENT, BaselineStore
    from cuda_agent.env.config import EvalConfig
    from cuda_agent.env.evaluation import measure_baselines
    from cuda_agent.tasks import Task

    config = EvalConfig(backend=backend, cache_dir=root)
    chosen = config.resolved_backend()
    device = torch.cuda.get_device_name(0) if chosen == "cuda" else "cpu"
    entries = [(k, e) for k, e in BaselineStore(root).entries()
               if e.device == device and e.torch == torch.__version__ and e.code]
    if not entries:
        typer.echo(f"no stored baselines for {device} and torch {torch.__version__} in {root}")
        return
    picked = random.sample(entries, min(sample, len(entries)))
    stale = 0
    for key, entry in picked:
        run = measure_baselines(Task(entry.task, entry.code), config, store=fix)
        if run.entry is None:
            typer.echo(f"{entry.task}: could not be re-timed: {(run.error or '')[:200]}")
            continue
        pairs = [("eager", entry.eager_ms, run.entry.eager_ms), ("compile", entry.compile_ms, run.entry.compile_ms)]
        drift = {name: now / then - 1 for name, then, now in pairs if then and now}
        bad = any(abs(d) > AGREEMENT for d in drift.values())
        stale += bad
        shown = ", ".join(f"{name} {d:+.1%}" for name, d in drift.items())
        typer.echo(f"{entry.task}: {shown}{'  <- disagrees' + (' (replaced)' if fix else '') if bad else ''}")
    typer.echo(f"{stale} of {len(picked)} re-timed entries disagree by more than {AGREEMENT:.0%}"
               + ("" if fix or not stale else "; --fix replaces them"))


def _print_result(result) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=sys.stdout)
    verdict = ("[green]correct[/green]" if result.correct else
               "[red]task error[/red]" if result.task_error else "[red]rejected[/red]")
    console.print(f"[bold]{result.task}[/bold] on {result.device or result.backend}: {verdict}, reward {result.reward}")
    if result.error:
        rule = f" [{result.error.rule}]" if result.error.rule else ""
        console.print(f"[red]{result.error.phase} failed{rule}:[/red]\n{result.error.message}", markup=True,
                      highlight=False)
    table = Table("", "median ms", "speedup")
    for label, ms, speedup in (("solution", result.kernel_ms, None),
                               ("eager", result.eager_ms, result.speedup_vs_eager),
                               ("torch.compile", result.compile_ms, result.speedup_vs_compile)):
        if ms is not None:
            table.add_row(label, f"{ms:.4f}", f"{speedup:.2f}x" if speedup else "")
    if result.kernel_ms is not None:
        console.print(table)
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    phases = ", ".join(f"{k} {v:.1f}s" for k, v in result.phase_seconds.items())
    if phases:
        console.print(f"[dim]{phases}[/dim]")
