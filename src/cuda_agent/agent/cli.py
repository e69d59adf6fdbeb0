"""`cuda-agent workspace`, `solve`, `mcp`, `export-sft` and `agent replay`."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import List, Optional

import typer


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _load_task(task: str, kernelbench: Optional[Path]):
    from cuda_agent.tasks import TaskError, load_task

    try:
        return load_task(task, kernelbench)
    except (FileNotFoundError, TaskError, ValueError) as exc:
        _fail(str(exc))


def _eval_config(backend, trials, iters, no_compile_baseline, no_sandbox, cache_dir):
    from cuda_agent.env.config import EvalConfig, detect_backend

    backend = backend or detect_backend()
    if backend not in ("cuda", "cpu"):
        _fail(f"--backend must be cuda or cpu, not {backend!r}")
    config = EvalConfig(backend=backend, num_correct_trials=trials, iters=iters,
                        compile_baseline=not no_compile_baseline, sandbox="none" if no_sandbox else "auto")
    if cache_dir:
        config.cache_dir = cache_dir
    return config


def register(app: typer.Typer) -> None:
    @app.command("workspace")
    def workspace_command(
        task: str = typer.Argument(..., help="Task: a .py file, levelN/ID (KernelBench), or data.jsonl#ROW."),
        directory: Path = typer.Argument(..., help="Folder to create the workspace in."),
        backend: Optional[str] = typer.Option(None, help="cuda or cpu (default: cuda when a GPU is present)."),
        kernelbench: Optional[Path] = typer.Option(None, help="KernelBench folder for levelN/ID tasks."),
        trials: int = typer.Option(5, help="Random input sets for ./verify."),
        iters: Optional[int] = typer.Option(None, help="Timed calls in ./profile (default 100 CUDA, 20 CPU)."),
        no_compile_baseline: bool = typer.Option(False, help="./profile skips the torch.compile baseline."),
        no_sandbox: bool = typer.Option(False, help="Run candidates without bubblewrap."),
        cache_dir: Optional[Path] = typer.Option(None, help="Build and baseline cache."),
        force: bool = typer.Option(False, help="Reuse a non-empty folder (model_new.py is reset)."),
    ):
        """Create a workspace: model.py, model_new.py, kernels/, SKILL.md and ./compile ./verify ./profile."""
        from cuda_agent.agent.workspace import Workspace, WorkspaceError
        from cuda_agent.tasks import TaskError

        task_obj = _load_task(task, kernelbench)
        config = _eval_config(backend, trials, iters, no_compile_baseline, no_sandbox, cache_dir)
        try:
            ws = Workspace.create(task_obj, directory, eval_config=config, overwrite=force)
        except (WorkspaceError, TaskError) as exc:
            _fail(str(exc))
        typer.echo(f"workspace for {task_obj.name} ({ws.backend}) in {ws.root}\n"
                   f"  edit model_new.py and kernels/, then run ./compile, ./verify, ./profile (see SKILL.md)")

    @app.command("solve")
    def solve_command(
        task: str = typer.Argument(..., help="Task: a .py file, levelN/ID (KernelBench), or data.jsonl#ROW."),
        model: str = typer.Option(..., help="Model name as the endpoint knows it (or a local path with --local)."),
        base_url: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1."),
        api_key_env: str = typer.Option("OPENAI_API_KEY", help="Environment variable holding the API key."),
        local: bool = typer.Option(False, help="Run MODEL locally with transformers instead of an endpoint."),
        out: Path = typer.Option(Path("runs"), help="Output folder: solution/, trajectories.jsonl, summary.json."),
        workspace: Optional[Path] = typer.Option(None, help="Workspace folder (default: OUT/workspace)."),
        max_turns: int = typer.Option(200, help="Model calls before the episode stops."),
        max_seconds: Optional[float] = typer.Option(None, help="Wall-clock budget for the episode."),
        context_tokens: int = typer.Option(120_000, help="Prompt budget; older tool outputs are shortened first."),
        max_tokens: Optional[int] = typer.Option(None, help="Output tokens per model call."),
        temperature: Optional[float] = typer.Option(None),
        timeout: float = typer.Option(600.0, help="Seconds per model request."),
        retries: int = typer.Option(4, help="Retries per model request."),
        backend: Optional[str] = typer.Option(None, help="cuda or cpu (default: cuda when a GPU is present)."),
        kernelbench: Optional[Path] = typer.Option(None, help="KernelBench folder for levelN/ID tasks."),
        trials: int = typer.Option(5, help="Random input sets for verification."),
        iters: Optional[int] = typer.Option(None, help="Timed calls (default 100 CUDA, 20 CPU)."),
        no_compile_baseline: bool = typer.Option(False, help="Skip the torch.compile baseline."),
        no_sandbox: bool = typer.Option(False, help="Run candidates without bubblewrap."),
        cache_dir: Optional[Path] = typer.Option(None, help="Build and baseline cache."),
        quiet: bool = typer.Option(False, help="No progress output."),
    ):
        """Run one agent episode on TASK; write the best solution, the trajectory and a summary."""
        from cuda_agent.agent.client import ClientError, OpenAIClient, TransformersClient
        from cuda_agent.agent.context import ContextBudget
        from cuda_agent.agent.loop import AgentConfig, run_episode
        from cuda_agent.agent.progress import ProgressPrinter
        from cuda_agent.agent.trajectory import append_jsonl
        from cuda_agent.agent.workspace import WorkspaceError

        task_obj = _load_task(task, kernelbench)
        config = _eval_config(backend, trials, iters, no_compile_baseline, no_sandbox, cache_dir)
        try:
            client = (TransformersClient(model, max_new_tokens=max_tokens or 4096, temperature=temperature or 0.0)
                      if local else
                      OpenAIClient(model, base_url=base_url, api_key=os.environ.get(api_key_env), timeout=timeout,
                                   max_retries=retries, temperature=temperature, max_tokens=max_tokens))
        except ClientError as exc:
            _fail(str(exc))
        agent_config = AgentConfig(max_turns=max_turns, max_seconds=max_seconds,
                                   context=ContextBudget(max_tokens=context_tokens))
        out.mkdir(parents=True, exist_ok=True)
        printer = None if quiet else ProgressPrinter()
        try:
            episode = run_episode(task_obj, client, workspace_dir=workspace or out / "workspace",
                                  config=agent_config, eval_config=config, on_event=printer)
        except WorkspaceError as exc:
            _fail(str(exc))
        traj = episode.trajectory
        append_jsonl(out / "trajectories.jsonl", traj)
        shutil.rmtree(out / "solution", ignore_errors=True)   # never leave an older run's answer behind
        if episode.solution is not None:
            episode.solution.write(out / "solution")
        (out / "summary.json").write_text(json.dumps(traj.summary(), indent=2))
        typer.echo(f"reward {traj.reward} ({traj.stop_reason}, {traj.num_turns} turns); "
                   f"wrote {out / 'summary.json'}, {out / 'trajectories.jsonl'}"
                   + (f", {out / 'solution'}" if episode.solution is not None else "; no verified solution"))

    @app.command("mcp")
    def mcp_command(
        workspace: Path = typer.Option(..., help="Workspace folder (create one with `cuda-agent workspace`)."),
        http: Optional[int] = typer.Option(None, help="Serve streamable HTTP on this port instead of stdio."),
        trajectories: Optional[Path] = typer.Option(
            None, help="JSONL file the episode's trajectory is appended to when the server stops "
                       "(default: WORKSPACE/.cuda_agent/trajectories.jsonl)."),
        model: str = typer.Option("mcp", help="Name of the agent, recorded in the trajectory."),
    ):
        """Serve a workspace as one episode over MCP: compile, verify, profile, bash, read, write, edit, ..., submit."""
        from cuda_agent.agent.mcp_server import main
        from cuda_agent.agent.workspace import WorkspaceError

        try:
            main(workspace, http, trajectories, model)
        except WorkspaceError as exc:
            _fail(str(exc))

    @app.command("export-sft")
    def export_sft_command(
        trajectories: List[Path] = typer.Argument(..., help="trajectories.jsonl files."),
        out: Path = typer.Option(..., help="Parquet file to write."),
        min_reward: float = typer.Option(0.0, help="Keep trajectories with reward above this."),
        max_invalid_calls: int = typer.Option(0, help="Unknown tools or malformed arguments allowed."),
        max_repeats: int = typer.Option(3, help="Identical consecutive tool calls allowed."),
        require_finish: bool = typer.Option(False, help="Only episodes that ended with `finish`."),
    ):
        """Convert trajectories to verl's multi-turn SFT parquet (messages + tools), rejection-filtered."""
        from cuda_agent.agent.sft import SFTFilter, export_sft
        from cuda_agent.agent.trajectory import read_jsonl

        def all_records():
            for path in trajectories:
                yield from read_jsonl(path)

        stats = export_sft(all_records(), out, SFTFilter(min_reward, max_invalid_calls, max_repeats, require_finish))
        typer.echo(f"kept {stats['kept']}, rejected {stats['rejected']}; wrote {out}", err=False)
        if not stats["kept"]:
            print("warning: no trajectory passed the filter", file=sys.stderr)

    agent_app = typer.Typer(no_args_is_help=True, help="Work with agent episodes (replay).")
    app.add_typer(agent_app, name="agent")

    @agent_app.command("replay")
    def replay_command(
        trajectory: Path = typer.Argument(..., help="trajectories.jsonl file (every record is replayed)."),
        index: Optional[int] = typer.Option(None, help="Replay only this record (0-based)."),
        workspace: Optional[Path] = typer.Option(None, help="Workspace folder (default: a temporary one per record)."),
        out: Optional[Path] = typer.Option(None, help="Append the replayed trajectories to this JSONL file."),
        cache_dir: Optional[Path] = typer.Option(None, help="Build and baseline cache (default: the recorded one)."),
        no_sandbox: bool = typer.Option(False, help="Run candidates without bubblewrap."),
        strict: bool = typer.Option(False, help="Exit with status 1 when a replayed reward differs."),
    ):
        """Re-run a trajectory's tool calls in a fresh workspace and score it again (no model is called)."""
        import tempfile
        from dataclasses import replace

        from cuda_agent.agent.replay import differing_outputs, replay
        from cuda_agent.agent.trajectory import append_jsonl, read_jsonl
        from cuda_agent.env.config import EvalConfig

        try:
            records = list(read_jsonl(trajectory))
        except (OSError, ValueError) as exc:
            _fail(str(exc))
        if index is not None:
            if not 0 <= index < len(records):
                _fail(f"{trajectory} has {len(records)} records; no record {index}")
            records = [records[index]]

        def config(recorded: dict) -> EvalConfig:
            c = EvalConfig.from_dict(recorded)
            c = replace(c, cache_dir=cache_dir) if cache_dir else c
            return replace(c, sandbox="none") if no_sandbox else c

        differ = 0
        for traj in records:
            with tempfile.TemporaryDirectory(prefix="cuda-agent-replay-") as tmp:
                outcome = replay(traj, workspace or Path(tmp) / "ws", eval_config=config(traj.config["eval"]),
                                 final_eval_config=config(traj.config.get("final_eval") or traj.config["eval"]))
            new = outcome.trajectory
            changed = differing_outputs(traj, new)
            same = new.reward == traj.reward
            differ += not same
            typer.echo(f"{traj.id} {traj.task.get('name')}: recorded reward {traj.reward}, replayed {new.reward}"
                       f" ({'same' if same else 'DIFFERENT'}); {sum(len(t.tool_calls) for t in new.turns)} tool calls, "
                       f"{len(changed)} messages differ" + (f" (first: {changed[0]})" if changed else ""))
            if out:
                append_jsonl(out, new)
        if strict and differ:
            raise typer.Exit(1)
