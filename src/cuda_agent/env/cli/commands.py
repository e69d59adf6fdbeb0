"""`cuda-agent eval`, `cuda-agent cache` and `cuda-agent doctor`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from cuda_agent.env.cli.args import (backend_option, cache_dir_option, iters_option, kernelbench_option,
                                     no_compile_baseline_option, no_sandbox_option, precision_option, scale_option,
                                     trials_option, verify_option)
from cuda_agent.env.cli.console import MACHINE_ERROR, StepProgress, fail, on_terminal, require_machine

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEFAULT_EXAMPLE = "running_mean"   # its honest kernel beats eager and torch.compile on CPU and GPU

EVAL_EXAMPLES = """[bold]Examples[/bold]

cuda-agent eval   (the embedded example: a kernel that wins, and why)

cuda-agent eval task.py model_new.py --backend cpu --json

cuda-agent eval level1/19 my_relu/ --kernelbench KernelBench/KernelBench --scale 0.125"""

CACHE_EXAMPLES = """[bold]Examples[/bold]

cuda-agent cache info

cuda-agent cache warm --backend cpu

cuda-agent cache clear --cache-dir /scratch/cuda-agent"""

DOCTOR_EXAMPLES = """[bold]Examples[/bold]

cuda-agent doctor

cuda-agent doctor --backend cuda

cuda-agent doctor --fix   (installs bubblewrap, g++ and the like when it may, precompiles the torch header)"""

TASK_HELP = "A .py file, levelN/ID of KernelBench, or data.jsonl#ROW. Omitted: the embedded example."


def register(app: typer.Typer) -> None:
    @app.command("eval", epilog=EVAL_EXAMPLES)
    def eval_command(
        task: Optional[str] = typer.Argument(None, help=TASK_HELP, show_default=False),
        solution: Optional[Path] = typer.Argument(None, help="model_new.py (single file) or a workspace folder.",
                                                  show_default=False),
        backend: Optional[str] = backend_option(),
        kernelbench: Optional[Path] = kernelbench_option(),
        scale: Optional[float] = scale_option(),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object (no progress, no table)."),
        trials: int = trials_option(),
        iters: Optional[int] = iters_option(),
        precision: float = precision_option(),
        atol: float = typer.Option(1e-2, min=0, help="Absolute tolerance of the output check."),
        rtol: float = typer.Option(1e-2, min=0, help="Relative tolerance of the output check."),
        verify: str = verify_option(),
        no_compile_baseline: bool = no_compile_baseline_option(),
        unscored: bool = typer.Option(False, "--unscored", help="Time the solution even when its outputs are "
                                                                 "wrong (marked unscored; the reward stays -1)."),
        no_sandbox: bool = no_sandbox_option(),
        cache_dir: Optional[Path] = cache_dir_option(),
        ncu: bool = typer.Option(False, "--ncu", help="Then Nsight Compute's digest of the solution's kernels "
                                                       "(GPU, ncu on PATH; feedback, not the reward)."),
    ):
        """Compile, verify and profile SOLUTION against TASK; print the verdict, the timings and the reward.

        Exit status: 0 evaluated (whatever the verdict), 2 bad arguments or files, 3 machine not ready.
        """
        from cuda_agent.env.cli.args import (load_solution_arg, load_task_arg, make_config, precision_setting,
                                             refuse_if_too_large, resolve_backend)
        from cuda_agent.env.run.evaluation import evaluate

        backend = resolve_backend(backend)
        name = None
        if task is None:  # the embedded example: runs anywhere
            folder = EXAMPLES / DEFAULT_EXAMPLE
            task, name = str(folder / "model.py"), f"examples/{DEFAULT_EXAMPLE}"
            solution = solution or folder / f"solution_{backend}"
        if solution is None:
            fail("give a SOLUTION (a model_new.py file or a workspace folder)")
        task_obj = load_task_arg(task, kernelbench, scale, name=name, quiet=as_json, backend=backend)
        solution_obj = load_solution_arg(solution)
        config = make_config(backend, cache_dir=cache_dir, no_sandbox=no_sandbox, num_correct_trials=trials,
                             iters=iters, precision=precision_setting(precision), atol=atol, rtol=rtol, protocol=verify,
                             compile_baseline=not no_compile_baseline, unscored=unscored)
        require_machine(backend, config.sandbox, config.cache_dir)
        refuse_if_too_large(task_obj, config)
        live = not as_json and on_terminal()
        if not as_json:
            typer.echo(f"evaluating {solution} on {task_obj.name} ({backend})", err=True)
        if live:
            with StepProgress(first="starting the evaluation") as progress:
                result = evaluate(task_obj, solution_obj, config, progress=progress)
        else:
            result = evaluate(task_obj, solution_obj, config)
        if as_json:
            typer.echo(json.dumps(result.to_dict()))
        else:
            print_result(result, compile_skipped=no_compile_baseline)
        if ncu:
            _print_ncu(task_obj, solution_obj, config, result, as_json)

    @app.command("cache", epilog=CACHE_EXAMPLES)
    def cache_command(
        action: str = typer.Argument(..., help="info, clear, warm, verify or peak.", show_default=False),
        cache_dir: Optional[Path] = cache_dir_option(),
        backend: Optional[str] = typer.Option(None, help="warm: cuda or cpu (default: cuda when a GPU is usable)."),
        sample: int = typer.Option(5, min=1, help="verify: how many stored baselines to re-time."),
        fix: bool = typer.Option(False, "--fix", help="verify: replace the entries that no longer agree."),
    ):
        """Show, clear, warm or verify the build and baseline cache.

        info: each part's size. clear: delete builds and baselines. warm: precompile the torch header now.
        verify: re-time a sample of the stored eager / torch.compile baselines here, say which disagree.
        peak: measure this machine's CPU peak (the speed of light's) again and keep it.
        """
        from cuda_agent.env.config import default_cache_dir

        root = cache_dir or default_cache_dir()
        if action == "info":
            _cache_info(root)
        elif action == "clear":
            from cuda_agent.env.builds.cache_usage import clear

            freed = clear(root)
            typer.echo(f"cleared {root}: freed {freed / 1e6:.1f} MB (builds, precompiled headers, baselines)")
        elif action == "warm":
            _cache_warm(root, backend)
        elif action == "verify":
            _verify_baselines(root, backend, sample, fix)
        elif action == "peak":
            from cuda_agent.env.measure.peaks import cpu_peak

            peak = cpu_peak(root, remeasure=True)
            typer.echo(f"{peak.name}: {peak.bandwidth_gbps:.1f} GB/s, {peak.gflops['float32']:.1f} GFLOP/s float32")
        else:
            fail(f"action must be 'info', 'clear', 'warm', 'verify' or 'peak', not {action!r}")

    @app.command("doctor", epilog=DOCTOR_EXAMPLES)
    def doctor_command(
        backend: Optional[str] = typer.Option(None, help="Check for cuda or cpu (default: what this machine can run)."),
        fix: bool = typer.Option(False, "--fix", help="Do the fixes that are safe unattended, then check again."),
        no_sandbox: bool = typer.Option(False, "--no-sandbox", help="Candidates will run unsandboxed: skip bwrap."),
        cache_dir: Optional[Path] = cache_dir_option(),
    ):
        """Check everything an evaluation needs on this machine.

        One line per item, with the command that fixes what is missing; exit status 1 when something is.
        """
        from cuda_agent.env.config import default_cache_dir
        from cuda_agent.env.infra.doctor import repair, run_checks

        if backend is not None and backend not in ("cuda", "cpu"):
            fail(f"--backend must be cuda or cpu, not {backend!r}")
        root = cache_dir or default_cache_dir()
        sandbox = "none" if no_sandbox else "auto"
        findings = run_checks(backend, sandbox, root)
        if fix:
            for finding, error in _repair_with_progress(findings, repair):
                typer.echo(f"fixed {finding.name}" if error is None else f"could not fix {finding.name}: {error}")
            findings = run_checks(backend, sandbox, root)
        _print_findings(findings)
        if any(f.failed for f in findings):
            raise typer.Exit(1)


def _verify_baselines(root: Path, backend: Optional[str], sample: int, fix: bool) -> None:
    """Re-time stored baselines of this device and torch version; report (and replace) disagreements."""
    import random

    import torch

    from cuda_agent.env.run.baselines import AGREEMENT, BaselineStore
    from cuda_agent.env.config import EvalConfig
    from cuda_agent.env.run.baseline_run import measure_baselines
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


def _repair_with_progress(findings, repair):
    if not on_terminal():
        return repair(findings)
    with StepProgress(first="fixing what can be fixed unattended"):
        return repair(findings)


def _print_findings(findings) -> None:
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False)
    marks = {"ok": "[green]ok  [/green]", "warn": "[yellow]warn[/yellow]", "fail": "[red]FAIL[/red]",
             "skip": "[dim]skip[/dim]"}
    for finding in findings:
        console.print(f"{marks[finding.status]} {escape(finding.line())}", soft_wrap=True)


def _cache_info(root: Path) -> None:
    from cuda_agent.env.builds.cache_usage import current_keys, headers, usage

    parts = usage(root)
    typer.echo(f"{root}: {sum(p.bytes for p in parts) / 1e6:.1f} MB")
    for part in parts:
        typer.echo(f"  {part.label:<14}{part.bytes / 1e6:>10.1f} MB  {part.entries:>5} entries  ({part.what})")
    mine = {key: backend for backend, key in current_keys().items()}
    for key, size in headers(root).items():
        owner = f"this Python's {mine[key]} toolchain" if key in mine else "another torch install or toolchain"
        typer.echo(f"    header {key}: {size / 1e6:.1f} MB ({owner})")
    typer.echo("  (virtualenvs share a header only when they import the same torch installation and compiler, "
               "e.g. made with --system-site-packages over one torch; `cuda-agent cache clear` frees them all)")


def _cache_warm(root: Path, backend: str | None) -> None:
    import time

    from cuda_agent.env.cli.args import resolve_backend
    from cuda_agent.env.builds.compiler import BuildError
    from cuda_agent.env.builds.toolchain import prepare_toolchain

    chosen = resolve_backend(backend)
    start = time.perf_counter()
    try:
        if on_terminal():
            with StepProgress(first=f"precompiling torch headers for {chosen} (once per machine)"):
                header = prepare_toolchain(chosen, root / "build")
        else:
            header = prepare_toolchain(chosen, root / "build")
    except BuildError as exc:
        fail(f"could not prepare the {chosen} toolchain: {exc.summary} (`cuda-agent doctor` says what is missing)",
             MACHINE_ERROR)
    typer.echo(f"{chosen} toolchain ready in {time.perf_counter() - start:.1f} s ({header.parent})")


def _print_ncu(task, solution, config, result, as_json: bool) -> None:
    """`eval --ncu`: Nsight Compute's digest after the evaluation (env/run/ncu_run.py), to stderr with
    --json so that stdout stays one JSON object."""
    from cuda_agent.env.run.ncu_run import NcuUnavailable, ncu_digest

    if not result.compiled:
        text = "--ncu: nothing to profile (the solution did not build)"
    else:
        try:
            text = "\n".join(ncu_digest(task, solution, config))
        except NcuUnavailable as why:
            text = f"--ncu: {why}"
    typer.echo(text, err=as_json)


def print_result(result, compile_skipped: bool = False, file=None) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from cuda_agent.env.explain import PAIRED_NOTE, explain_reward, medians_disagree, timing_rows, tolerance_text
    from cuda_agent.env.reward import PERCENT
    from cuda_agent.env.run.unscored import unscored_lines

    console = Console(file=file or sys.stdout, highlight=False)
    verdict = ("[green]correct[/green]" if result.correct else
               "[red]task error[/red]" if result.task_error else "[red]rejected[/red]")
    console.print(f"[bold]{escape(result.task)}[/bold] on {escape(result.device or result.backend)}: {verdict}, "
                  f"reward {result.reward}")
    tolerance = tolerance_text(result)
    if tolerance:
        console.print(f"verified: {escape(tolerance)}")
    if result.error:
        rule = f" \\[{escape(result.error.rule)}]" if result.error.rule else ""
        console.print(f"[red]{result.error.phase} failed{rule}:[/red]\n{escape(result.error.message)}")
    for line in unscored_lines(result):
        console.print(f"[yellow]{escape(line)}[/yellow]")
    if result.kernel_ms is not None:
        table = Table("", "median ms", "speedup", "95 % CI", f"beaten by > {PERCENT}?")
        for row in timing_rows(result, compile_skipped):
            table.add_row(row.label, f"{row.ms:.4f}" if row.ms is not None else "-", row.speedup, row.interval,
                          row.verdict)
        console.print(table)
        if medians_disagree(result):
            console.print(f"[dim]{PAIRED_NOTE}[/dim]")
    if result.speed_of_light is not None:
        from cuda_agent.env.measure.speed_of_light import describe

        for line in describe(result.speed_of_light, result.device):
            console.print(escape(line.strip()))
    if result.graph_ms is not None:   # feedback after timing (env/run/feedback.py): never in the reward
        console.print(f"CUDA graph (eager, captured)  {result.graph_ms:.4f} ms  [dim](not in the reward)[/dim]")
    for note in result.feedback_notes:
        console.print(f"[dim]note: {escape(note)}[/dim]")
    console.print(f"[bold]{escape(explain_reward(result, compile_skipped))}[/bold]")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(warning)}")
    phases = ", ".join(f"{k} {v:.1f}s" for k, v in result.phase_seconds.items())
    if phases:
        console.print(f"[dim]{phases}[/dim]")
