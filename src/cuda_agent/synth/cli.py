"""`cuda-agent synth`: build a training set of tasks (see docs/synthesis.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def parse_mix(text: str) -> dict[str, float]:
    """`1:3.4,2:83.8,3:7.6,4:2.8,5:1.2,transformers:1.2` -> {class: share}."""
    mix = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition(":")
        try:
            mix[key.strip()] = float(value)
        except ValueError:
            raise typer.BadParameter(f"mix entry {part!r} is not CLASS:SHARE") from None
    return mix


def parse_window(text: str) -> tuple[float, float]:
    lo, _, hi = text.partition(",")
    try:
        window = (float(lo), float(hi))
    except ValueError:
        raise typer.BadParameter(f"window {text!r} is not LO,HI (milliseconds)") from None
    if not 0 <= window[0] < window[1]:
        raise typer.BadParameter("window needs 0 <= LO < HI")
    return window


SYNTH_EXAMPLES = """[bold]Examples[/bold]

cuda-agent synth --num 100 --out data/ --kernelbench KernelBench/KernelBench

cuda-agent synth -n 500 -o data/ --backend cuda --mix 2:1 --no-transformers"""


def synth(
    num: int = typer.Option(..., "--num", "-n", min=1, help="Number of tasks to write."),
    out: Path = typer.Option(..., "--out", "-o", help="Output folder (resumes a run already there)."),
    backend: str = typer.Option("cpu", help="cpu | cuda: where the filters run and time tasks."),
    seed: int = typer.Option(0, help="Seed: the same seed gives the same tasks."),
    workers: Optional[int] = typer.Option(None, help="Worker processes (default: GPUs on cuda, cores on cpu)."),
    mix: Optional[str] = typer.Option(None, help="Chain-length mix as LENGTH:SHARE pairs, e.g. 2:80,3:20 "
                                                 "(default: the published mix; see docs/synthesis.md)."),
    window: Optional[str] = typer.Option(None, help="Eager runtime window LO,HI in ms (default 1,100 on cuda, 0.1,10 on cpu)."),
    kernelbench: Optional[Path] = typer.Option(None, help="KernelBench folder (level1..3) for decontamination; "
                                                         "default $CUDA_AGENT_KERNELBENCH."),
    no_decontaminate: bool = typer.Option(False, "--no-decontaminate", help="Keep tasks similar to KernelBench."),
    threshold: float = typer.Option(0.9, help="AST similarity above which a task counts as contaminated."),
    no_compile: bool = typer.Option(False, "--no-compile", help="Keep tasks torch.compile cannot handle."),
    no_transformers: bool = typer.Option(False, "--no-transformers", help="Leave out transformers blocks."),
    composer: str = typer.Option("rules", help="rules | llm (an OpenAI-compatible model writes the chains)."),
    llm_model: Optional[str] = typer.Option(None, help="Model name for --composer llm (or $CUDA_AGENT_SYNTH_MODEL)."),
    llm_base_url: Optional[str] = typer.Option(None, help="Base URL for --composer llm (or $OPENAI_BASE_URL)."),
    timeout: Optional[float] = typer.Option(None, help="Per-task filter timeout in seconds."),
    ray: Optional[str] = typer.Option(None, help="Ray cluster address: run the filter workers there, as Ray actors."),
    worker_max_tasks: Optional[int] = typer.Option(
        None, "--worker-tasks", min=0, metavar="<int>",
        help="Replace a filter worker after this many tasks (default 100; 0: never)."),
    worker_max_gb: Optional[float] = typer.Option(
        None, "--worker-gb", min=0, metavar="<float>",
        help="Replace a filter worker whose memory (RSS) after a task passes this many GiB (default: its share "
             "of the host's memory, at least 8; 0: no bound)."),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar."),
    write_only: bool = typer.Option(False, "--write-only", help="Filter nothing more: write the outputs from the "
                                    "tasks the run in OUT kept so far (a partial build's preview; no GPU needed)."),
) -> None:
    """Synthesise NUM runnable, filtered, decontaminated tasks into OUT (tasks.parquet, tasks.jsonl, datasheet.md)."""
    from rich.console import Console

    from cuda_agent.env.cli.console import fail, on_terminal, require_machine
    from cuda_agent.synth.preflight import kernelbench_problem, settings_conflict

    if backend not in ("cpu", "cuda"):
        raise typer.BadParameter("--backend must be cpu or cuda")
    if composer not in ("rules", "llm"):
        raise typer.BadParameter("--composer must be rules or llm")
    if write_only and not (out / "work" / "results.jsonl").is_file():
        fail(f"--write-only: {out} holds no synthesis run (no work/results.jsonl)")
    if not write_only:
        require_machine(backend, "none", None)   # e.g. --backend cuda without a GPU: refused now, not after minutes
    why = kernelbench_problem(kernelbench, not no_decontaminate)   # before the minute-long catalog crawl
    if why:
        fail(why)
    from cuda_agent.synth.pipeline import DEFAULT_MIX, Pipeline, SynthConfig, synthesize
    cfg = SynthConfig(num=num, out=str(out), backend=backend, seed=seed, workers=workers,
                      mix=parse_mix(mix) if mix else dict(DEFAULT_MIX),
                      window_ms=parse_window(window) if window else None,
                      kernelbench=str(kernelbench) if kernelbench else None, decontaminate=not no_decontaminate,
                      similarity_threshold=threshold, compile=not no_compile, include_transformers=not no_transformers,
                      composer=composer, llm_model=llm_model, llm_base_url=llm_base_url, task_timeout_s=timeout,
                      ray_address=ray, progress=not no_progress and on_terminal(), worker_max_tasks=worker_max_tasks,
                      worker_max_rss_mb=None if worker_max_gb is None else worker_max_gb * 1024)
    why = settings_conflict(out, cfg.resolved().fingerprint())
    if why:
        fail(why)
    console = Console()
    try:
        summary = Pipeline(cfg).write() if write_only else synthesize(cfg)
    except ValueError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]: finished work is kept; rerun the same command to resume")
        raise typer.Exit(130) from None
    console.print(f"wrote {summary['written']} tasks to {out} ({summary['generated']} candidates, "
                  f"{summary['filtered']} filtered, {summary['accepted']} passed); see {summary['datasheet']}")
    if summary.get("worker_peak_rss_mb") is not None:
        console.print(f"filter workers: peak RSS {summary['worker_peak_rss_mb'] / 1024:.2f} GiB, "
                      f"{summary['workers_recycled']} replaced for their task count or size")
    if summary["written"] < num and not write_only:
        console.print(f"[yellow]only {summary['written']} of {num} tasks[/]: see the datasheet's drop reasons")
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("synth", epilog=SYNTH_EXAMPLES)(synth)
