"""`cuda-agent baseline`, `cuda-agent bench` and `cuda-agent report` (docs/bench.md)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import List, Optional

import typer

from cuda_agent.env.cli.args import (backend_option, cache_dir_option, iters_option, no_compile_baseline_option,
                                     no_sandbox_option, precision_option, trials_option)
from cuda_agent.env.cli.console import MACHINE_ERROR, fail

LEVELS_HELP = "KernelBench levels, e.g. 1,2,3 (default 1,2,3 unless --tasks or --dataset say otherwise)."
TASKS_HELP = "Tasks: level1/1-20,level2/5 (a bare level3 is the whole level; dataset rows as NAME/ROW)."
KERNELBENCH_HELP = "KernelBench folder (default: $CUDA_AGENT_KERNELBENCH)."

BASELINE_EXAMPLES = """[bold]Examples[/bold]

cuda-agent baseline --kernelbench KernelBench/KernelBench --levels 1

cuda-agent baseline --tasks level1/1-20 --out runs/base --max-minutes 30

cuda-agent baseline --resume --out runs/base"""

BENCH_EXAMPLES = """[bold]Examples[/bold]

cuda-agent bench --solutions my_solutions/ --kernelbench KernelBench/KernelBench

cuda-agent bench --model my-model --base-url http://localhost:8000/v1 --tasks level1/1-10

cuda-agent bench --resume --retry-failed --out runs/bench-20261124-101500"""

REPORT_EXAMPLES = """[bold]Examples[/bold]

cuda-agent report runs/bench-20261124-101500

cuda-agent report runs/new --compare runs/old --out reports/"""


def _kernelbench(path: Optional[Path]) -> Optional[Path]:
    """--kernelbench, else CUDA_AGENT_KERNELBENCH, else None."""
    from cuda_agent.tasks import KERNELBENCH_ENV

    return path or (Path(os.environ[KERNELBENCH_ENV]) if os.environ.get(KERNELBENCH_ENV) else None)


def _select(kernelbench, levels, tasks, dataset):
    from cuda_agent.bench.selection import SelectionError, parse_levels, select_tasks

    kernelbench = _kernelbench(kernelbench)
    try:
        return select_tasks(kernelbench=kernelbench, levels=parse_levels(levels), tasks=tasks, dataset=dataset)
    except SelectionError as exc:
        fail(str(exc))


def _out(out: Optional[Path], kind: str, resume: bool) -> Path:
    if out is None:
        if resume:
            fail("--resume needs --out RUN_DIR (the run to continue)")
        return Path("runs") / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}"
    return out


def _reference(path: Optional[Path], kernelbench: Optional[Path]):
    """KernelBench's own timings for the report: --reference-times, else KB/baseline_times_H100 if present."""
    from cuda_agent.bench.runview import reference_times

    if path is None:
        root = _kernelbench(kernelbench)
        default = root / "baseline_times_H100" if root else None
        if default is None or not default.is_dir():
            return None
        path = default
    try:
        return reference_times(path)
    except (OSError, ValueError) as exc:
        fail(str(exc))


def _config(backend, protocol, trials, iters, no_compile_baseline, no_sandbox, cache_dir, prewarm=True, precision=None):
    from cuda_agent.env.cli.args import make_config, precision_setting, resolve_backend

    if protocol not in ("strict", "published"):
        fail(f"--verify must be strict or published, not {protocol!r}")
    return make_config(resolve_backend(backend), cache_dir=cache_dir, no_sandbox=no_sandbox, protocol=protocol,
                       num_correct_trials=trials, iters=iters, compile_baseline=not no_compile_baseline,
                       prewarm=prewarm, **({} if precision is None else {"precision": precision_setting(precision)}))


def _preflight(config, ray_address: Optional[str] = None) -> None:
    """Doctor's fail-fast checks before hours of work start: a GPU for --backend cuda, compilers, the
    sandbox, the cache. Skipped with --ray: the cluster's machines evaluate, not this one."""
    from cuda_agent.env.cli.console import require_machine

    if not ray_address:
        require_machine(config.resolved_backend(), config.sandbox, config.cache_dir)


def _gpus(text: Optional[str]) -> Optional[list[int]]:
    if not text:
        return None
    try:
        return [int(g) for g in text.split(",") if g.strip()]
    except ValueError:
        fail(f"--gpus takes indices separated by commas, e.g. 0,1; got {text!r}")


def _finish(outcome, what: str) -> None:
    md, page = outcome.report
    if outcome.stopped:
        typer.echo(f"stopped early: {outcome.stopped}; {what} not started: {outcome.left}", err=True)
    elif outcome.left:
        typer.echo(f"stopped with {outcome.left} {what} not started (--max-minutes); continue with "
                   f"--resume --out {outcome.run_dir}", err=True)
    typer.echo(f"wrote {outcome.run_dir / 'bench.sqlite'}, {md}, {page}")


def _print_metrics(run) -> None:
    from rich.console import Console
    from rich.table import Table

    from cuda_agent.bench.report import pct, times

    table = Table("group", "tasks", "broken", "failed", "pass", "> eager", "> compile", "GM vs eager",
                  "GM vs compile", "fast_1", "mean reward")
    for m in run.metrics:
        table.add_row(m.group, str(m.tasks), str(m.broken), str(m.failed), pct(m.pass_rate) or "-",
                      pct(m.faster_eager) or "-",
                      pct(m.faster_compile) or "-", times(m.gm_vs_eager) or "-", times(m.gm_vs_compile) or "-",
                      pct(m.fast_p.get("1")) or "-", "-" if m.mean_reward is None else f"{m.mean_reward:.2f}")
    Console(file=sys.stdout, width=None if sys.stdout.isatty() else 160).print(table)   # logs: no squeezed columns


def _infrastructure_failures(run, agent: bool) -> str | None:
    """Why the command must exit 3, as `solve` does: attempts left unscored because the model endpoint or
    our evaluator failed (None when every attempt was scored or is still to run)."""
    hit = [s for s in run.scores if s.unscored is not None]
    if not hit:
        return None
    first = (hit[0].unscored.error_message or "no detail").strip().splitlines()[0][:300].rstrip(".")
    endpoint = any(s.unscored.stop_reason == "client_error" for s in hit)   # solve's name for the endpoint failing
    what = ("tasks have solutions that were not scored: our evaluator failed" if not agent else
            "episodes ended because the model endpoint failed" if endpoint else
            "episodes ended on an infrastructure failure (the model endpoint or our evaluator failed)")
    return (f"{len(hit)} of {len(run.scores)} {what}; first, {hit[0].key}: {first}. They are left out of "
            f"the metrics. Fix the cause{' (is the endpoint up? --base-url)' if agent else ''}, then run them "
            f"again: cuda-agent bench --resume --retry-failed --out {run.run_dir}")


def register(app: typer.Typer) -> None:
    @app.command("baseline", epilog=BASELINE_EXAMPLES)
    def baseline_command(
        levels: Optional[str] = typer.Option(None, help=LEVELS_HELP),
        tasks: Optional[str] = typer.Option(None, help=TASKS_HELP),
        dataset: Optional[Path] = typer.Option(None, help="A JSONL/parquet dataset with a `code` column."),
        kernelbench: Optional[Path] = typer.Option(None, help=KERNELBENCH_HELP),
        out: Optional[Path] = typer.Option(None, help="Run folder (default runs/baseline-TIME)."),
        backend: Optional[str] = backend_option(),
        resume: bool = typer.Option(False, "--resume",
                                    help="Continue the run in --out; recorded tasks are not measured again."),
        concurrency: Optional[int] = typer.Option(None, metavar="<int>", min=1, help="Tasks measured at once per GPU (default: 3/4 "
                                                                    "of the cores, at most 12)."),
        gpus: Optional[str] = typer.Option(None, help="GPU indices to use, e.g. 0,1 (default: all visible)."),
        iters: Optional[int] = iters_option(),
        no_compile_baseline: bool = typer.Option(False, "--no-compile-baseline", help="Time eager only."),
        force: bool = typer.Option(False, "--force", help="Measure again tasks the baseline store already holds."),
        max_minutes: Optional[float] = typer.Option(None, metavar="<float>", min=0, help="Start no task after this many minutes "
                                                                      "(then --resume)."),
        cache_dir: Optional[Path] = cache_dir_option(),
        reference_times: Optional[Path] = typer.Option(None, help="KernelBench's timings folder for the report "
                                                                  "(default: its baseline_times_H100)."),
        quiet: bool = typer.Option(False, "--quiet", help="No progress output."),
    ):
        """Time eager PyTorch and torch.compile for every task, into the baseline store evaluations reuse.

        Per GPU and torch version; the report compares them with KernelBench's own timings."""
        from cuda_agent.bench.runner import RunSpec, run_baseline

        selected = _select(kernelbench, levels, tasks, dataset)
        config = _config(backend, "strict", 5, iters, no_compile_baseline, True, cache_dir, prewarm=False)
        _preflight(config)
        spec = RunSpec(_out(out, "baseline", resume), selected, config, resume, max_minutes, quiet=quiet,
                       argv=sys.argv, reference_times=_reference(reference_times, kernelbench))
        try:
            outcome = run_baseline(spec, gpus=_gpus(gpus), per_gpu=concurrency, force=force)
        except RuntimeError as exc:
            fail(str(exc))
        _finish(outcome, "tasks")

    @app.command("bench", epilog=BENCH_EXAMPLES)
    def bench_command(
        solutions: Optional[Path] = typer.Option(None, help="Score this folder of solutions (levelN/ID.py, "
                                                            "levelN/ID/, or KernelBench's runs/ layout)."),
        model: Optional[str] = typer.Option(None, help="Run the agent with this model on every task instead."),
        base_url: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint (e.g. a local vLLM server's /v1)."),
        api_key_env: str = typer.Option("OPENAI_API_KEY", help="Environment variable holding the API key."),
        turns: int = typer.Option(200, metavar="<int>", min=1, help="Model calls per episode (the published evaluation allows 200)."),
        concurrency: int = typer.Option(16, metavar="<int>", min=1, help="Episodes at once (agent mode)."),
        max_tokens: Optional[int] = typer.Option(None, metavar="<int>", min=1, help="Output tokens per model call."),
        temperature: Optional[float] = typer.Option(None, metavar="<float>", min=0),
        context_tokens: int = typer.Option(120_000, metavar="<int>", min=1000, help="Prompt budget per episode."),
        timeout: float = typer.Option(600.0, metavar="<float>", min=1, help="Seconds per model request."),
        retries: int = typer.Option(4, metavar="<int>", min=0, help="Retries per model request, with backoff."),
        levels: Optional[str] = typer.Option(None, help=LEVELS_HELP),
        tasks: Optional[str] = typer.Option(None, help=TASKS_HELP),
        dataset: Optional[Path] = typer.Option(None, help="A JSONL/parquet dataset with a `code` column."),
        kernelbench: Optional[Path] = typer.Option(None, help=KERNELBENCH_HELP),
        out: Optional[Path] = typer.Option(None, help="Run folder (default runs/bench-TIME)."),
        backend: Optional[str] = backend_option(),
        resume: bool = typer.Option(False, "--resume", help="Continue the run in --out; nothing recorded is run again."),
        retry_failed: bool = typer.Option(False, "--retry-failed",
                                          help="With --resume: run again attempts that failed on our side or the "
                                               "endpoint's (internal_error, episode_failed)."),
        protocol: str = typer.Option("strict", "--verify", "--protocol",
                                     help="strict (ours) or published (KernelBench's and the paper's), as "
                                          "`eval --verify`."),
        trials: int = trials_option(),
        iters: Optional[int] = iters_option(),
        precision: float = precision_option(),
        no_compile_baseline: bool = no_compile_baseline_option(),
        per_device: Optional[int] = typer.Option(None, metavar="<int>", min=1, help="Evaluations in flight per GPU (default 3; CPU 1)."),
        gpus: Optional[str] = typer.Option(None, help="GPU indices to use, e.g. 0,1 (default: all visible)."),
        ray: Optional[str] = typer.Option(None, "--ray", help="Evaluate on a Ray cluster: ADDRESS (auto, "
                                                              "ray://host:10001) or local."),
        max_minutes: Optional[float] = typer.Option(None, metavar="<float>", min=0, help="Start no work after this many minutes "
                                                                      "(then --resume)."),
        no_sandbox: bool = no_sandbox_option(),
        cache_dir: Optional[Path] = cache_dir_option(),
        quiet: bool = typer.Option(False, "--quiet", help="No progress output."),
    ):
        """Score a folder of solutions, or one agent episode per task, on KernelBench or a dataset.

        Results in RUN/bench.sqlite and a report (RUN/report.md, RUN/report.html).

        Exit status: 0 every task scored (or left for --resume), 2 bad arguments, 3 some not scored because
        the model endpoint or our evaluator failed (recorded as such; --resume --retry-failed runs them again)."""
        from cuda_agent.bench.runner import RunSpec, run_agent, run_folder
        from cuda_agent.bench.runview import load_run

        if (solutions is None) == (model is None):
            fail("give either --solutions DIR or --model NAME (with --base-url)")
        if retry_failed and not resume:
            fail("--retry-failed goes with --resume")
        selected = _select(kernelbench, levels, tasks, dataset)
        config = _config(backend, protocol, trials, iters, no_compile_baseline, no_sandbox, cache_dir,
                         precision=precision)
        _preflight(config, ray)
        spec = RunSpec(_out(out, "bench", resume), selected, config, resume, max_minutes, retry_failed, quiet, sys.argv)
        evaluator = _evaluator(config, ray, per_device, _gpus(gpus))
        try:
            if solutions is not None:
                if not solutions.is_dir():
                    fail(f"solutions folder not found: {solutions}")
                outcome = run_folder(spec, solutions, evaluator)
            else:
                outcome = run_agent(spec, _client_factory(model, base_url, api_key_env, timeout, retries, temperature,
                                                          max_tokens),
                                    _agent_config(turns, context_tokens), evaluator, model=model,
                                    concurrency=concurrency)
        except RuntimeError as exc:
            fail(str(exc))
        finally:
            if hasattr(evaluator, "shutdown"):
                evaluator.shutdown()
        run = load_run(outcome.run_dir)
        _print_metrics(run)
        _finish(outcome, "attempts")
        why = _infrastructure_failures(run, agent=model is not None)
        if why:
            fail(why, MACHINE_ERROR)

    @app.command("report", epilog=REPORT_EXAMPLES)
    def report_command(
        run: Path = typer.Argument(..., help="A run folder (holding bench.sqlite)."),
        compare: List[Path] = typer.Option([], help="Other runs shown beside it (repeat the option)."),
        out: Optional[Path] = typer.Option(None, help="Folder for report.md/report.html (default: RUN)."),
        reference_times: Optional[Path] = typer.Option(None, help="KernelBench's timings folder (baseline runs)."),
        kernelbench: Optional[Path] = typer.Option(None, help="KernelBench folder (its baseline_times_H100 is used)."),
    ):
        """Write a run's report (Markdown and a self-contained HTML page), compared with other runs."""
        from cuda_agent.bench.report import write_report

        try:
            md, page = write_report(run, compare, out, _reference(reference_times, kernelbench))
        except FileNotFoundError as exc:
            fail(str(exc))
        typer.echo(f"wrote {md} and {page}")


def _evaluator(config, ray_address, per_device, gpus):
    if ray_address:
        from cuda_agent.env.infra.service import EvalService

        try:
            return EvalService(ray_address, config, per_device=per_device)
        except RuntimeError as exc:
            fail(str(exc))
    from cuda_agent.env.infra.pool import EvalPool

    try:
        return EvalPool(config, gpus=gpus, per_device=per_device)
    except RuntimeError as exc:
        fail(str(exc))


def _client_factory(model, base_url, api_key_env, timeout, retries, temperature, max_tokens):
    """What `run_agent` calls for each episode's client."""
    from functools import partial

    from cuda_agent.llm import make_client

    return partial(make_client, model, base_url=base_url, api_key_env=api_key_env, timeout=timeout, retries=retries,
                   temperature=temperature, max_tokens=max_tokens)


def _agent_config(turns, context_tokens):
    from cuda_agent.agent.context import ContextBudget
    from cuda_agent.agent.loop import AgentConfig

    return AgentConfig(max_turns=turns, context=ContextBudget(max_tokens=context_tokens))
