"""`cuda-agent workspace`, `solve`, `mcp`, `export-sft` and `agent replay`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from cuda_agent.env.cli.args import (backend_option, cache_dir_option, iters_option, kernelbench_option,
                                     load_task_arg, make_config, no_compile_baseline_option, no_sandbox_option,
                                     refuse_if_too_large, resolve_backend, scale_option, trials_option,
                                     verify_option)
from cuda_agent.env.cli.console import MACHINE_ERROR, fail, require_machine

TASK_HELP = "A .py file, levelN/ID of KernelBench, or data.jsonl#ROW."

WORKSPACE_EXAMPLES = """[bold]Examples[/bold]

cuda-agent workspace level2/17 ws/ --kernelbench KernelBench/KernelBench

cd ws && ./compile && ./verify && ./profile"""

SOLVE_EXAMPLES = """[bold]Examples[/bold]

cuda-agent solve level1/19 --model my-model --base-url http://localhost:8000/v1 --kernelbench KB --scale 0.125

cuda-agent solve task.py --model Qwen/Qwen3-0.6B --local --out runs/qwen --max-turns 20"""

MCP_EXAMPLES = """[bold]Examples[/bold]

cuda-agent mcp --workspace ws/

cuda-agent mcp --workspace ws/ --http 8765"""

REPLAY_EXAMPLES = """[bold]Examples[/bold]

cuda-agent agent replay runs/qwen/trajectories.jsonl --index 0

cuda-agent agent replay runs/qwen/trajectories.jsonl --strict --out replayed.jsonl"""

EXPORT_EXAMPLES = """[bold]Examples[/bold]

cuda-agent export-sft runs/*/trajectories.jsonl --out sft.parquet --min-reward 1"""


def _eval_settings(backend, kernelbench, task, scale, trials, iters, no_compile_baseline, no_sandbox, cache_dir,
                   verify="strict"):
    """The task and EvalConfig shared by workspace and solve, after the machine's fail-fast checks."""
    backend = resolve_backend(backend)
    task_obj = load_task_arg(task, kernelbench, scale, backend=backend)
    config = make_config(backend, cache_dir=cache_dir, no_sandbox=no_sandbox, num_correct_trials=trials, iters=iters,
                         compile_baseline=not no_compile_baseline, protocol=verify)
    require_machine(backend, config.sandbox, config.cache_dir)
    refuse_if_too_large(task_obj, config)
    return task_obj, config


def register(app: typer.Typer) -> None:
    @app.command("workspace", epilog=WORKSPACE_EXAMPLES)
    def workspace_command(
        task: str = typer.Argument(..., help=TASK_HELP, show_default=False),
        directory: Path = typer.Argument(..., help="Folder to create the workspace in.", show_default=False),
        backend: Optional[str] = backend_option(),
        kernelbench: Optional[Path] = kernelbench_option(),
        scale: Optional[float] = scale_option(),
        trials: int = trials_option(),
        verify: str = verify_option(),
        iters: Optional[int] = iters_option(),
        no_compile_baseline: bool = no_compile_baseline_option(),
        no_sandbox: bool = no_sandbox_option(),
        cache_dir: Optional[Path] = cache_dir_option(),
        force: bool = typer.Option(False, "--force", help="Reuse a workspace folder (model_new.py is reset)."),
    ):
        """Create a workspace: model.py, model_new.py, kernels/, SKILL.md and ./compile ./verify ./profile."""
        from cuda_agent.agent.workspace import Workspace, WorkspaceError
        from cuda_agent.tasks import TaskError

        task_obj, config = _eval_settings(backend, kernelbench, task, scale, trials, iters, no_compile_baseline,
                                          no_sandbox, cache_dir, verify)
        try:
            ws = Workspace.create(task_obj, directory, eval_config=config, overwrite=force)
        except (WorkspaceError, TaskError) as exc:
            fail(str(exc))
        except OSError as exc:
            fail(f"cannot create the workspace in {directory}: {exc.strerror or exc}; choose a folder you can write")
        typer.echo(f"workspace for {task_obj.name} ({ws.backend}) in {ws.root}\n"
                   f"  edit model_new.py and kernels/, then run ./compile, ./verify, ./profile (see SKILL.md)")

    @app.command("solve", epilog=SOLVE_EXAMPLES)
    def solve_command(
        task: str = typer.Argument(..., help=TASK_HELP, show_default=False),
        model: str = typer.Option(..., help="Model name as the endpoint knows it (or a local path with --local)."),
        base_url: Optional[str] = typer.Option(None, help="OpenAI-compatible endpoint URL "
                                                          "(e.g. a vLLM server at localhost:8000/v1)."),
        api_key_env: str = typer.Option("OPENAI_API_KEY", help="Environment variable holding the API key."),
        local: bool = typer.Option(False, "--local", help="Run MODEL locally with transformers, not an endpoint."),
        out: Path = typer.Option(Path("runs"), help="Output folder: solution/, trajectories.jsonl, summary.json."),
        force: bool = typer.Option(False, "--force", help="Run into an OUT that holds a run (it is kept as .N)."),
        workspace: Optional[Path] = typer.Option(None, help="Workspace folder (default: OUT/workspace)."),
        max_turns: int = typer.Option(200, min=1, help="Model calls before the episode stops."),
        max_seconds: Optional[float] = typer.Option(None, min=0, help="Wall-clock budget for the episode."),
        context_tokens: int = typer.Option(120_000, min=1000, help="Prompt budget; old tool outputs shrink first."),
        max_tokens: Optional[int] = typer.Option(None, min=1, help="Output tokens per model call."),
        temperature: Optional[float] = typer.Option(None, min=0, help="Sampling temperature."),
        timeout: float = typer.Option(600.0, min=0, help="Seconds per model request."),
        retries: int = typer.Option(4, min=0, help="Retries per model request."),
        backend: Optional[str] = backend_option(),
        kernelbench: Optional[Path] = kernelbench_option(),
        scale: Optional[float] = scale_option(),
        trials: int = trials_option(),
        verify: str = verify_option(),
        iters: Optional[int] = iters_option(),
        no_compile_baseline: bool = no_compile_baseline_option(),
        no_sandbox: bool = no_sandbox_option(),
        cache_dir: Optional[Path] = cache_dir_option(),
        quiet: bool = typer.Option(False, "--quiet", help="No progress output."),
    ):
        """Run one agent episode on TASK; write the best solution, the trajectory and a summary.

        Exit status: 0 episode recorded, 2 bad arguments, 3 endpoint or evaluator failure (not recorded).
        """
        from cuda_agent.llm import ClientError, make_client
        from cuda_agent.agent.context import ContextBudget
        from cuda_agent.agent.loop import AgentConfig, run_episode
        from cuda_agent.agent.progress import ProgressPrinter
        from cuda_agent.agent.run_folder import (INFRA_FILE, TRAINING_FILE, earlier_run, infrastructure_failure,
                                                 keep_earlier_run)
        from cuda_agent.agent.trajectory import append_jsonl
        from cuda_agent.agent.workspace import WorkspaceError

        existing = earlier_run(out)
        if existing and not force:
            fail(f"{out} already holds a run ({', '.join(existing)}): pass --force to run again there (the earlier "
                 "run is kept as summary.N.json and solution.N/), or choose another --out")
        task_obj, config = _eval_settings(backend, kernelbench, task, scale, trials, iters, no_compile_baseline,
                                          no_sandbox, cache_dir, verify)
        try:
            client = make_client(model, base_url=base_url, api_key_env=api_key_env, local=local, timeout=timeout,
                                 retries=retries, temperature=temperature, max_tokens=max_tokens)
        except ClientError as exc:
            fail(str(exc))
        agent_config = AgentConfig(max_turns=max_turns, max_seconds=max_seconds,
                                   context=ContextBudget(max_tokens=context_tokens))
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            fail(f"cannot create {out}: {exc.strerror or exc}; choose an --out you can write")
        printer = None if quiet else ProgressPrinter()
        try:
            episode = run_episode(task_obj, client, workspace_dir=workspace or out / "workspace",
                                  config=agent_config, eval_config=config, on_event=printer)
        except WorkspaceError as exc:
            fail(str(exc))
        traj = episode.trajectory
        why = infrastructure_failure(traj)
        if why:
            append_jsonl(out / INFRA_FILE, traj)
            fail(f"the episode ended on an infrastructure failure ({why}); it is not recorded in {TRAINING_FILE} "
                 f"(kept for debugging in {out / INFRA_FILE})", MACHINE_ERROR)
        kept = keep_earlier_run(out)
        append_jsonl(out / TRAINING_FILE, traj)
        if episode.solution is not None:
            episode.solution.write(out / "solution")
        (out / "summary.json").write_text(json.dumps(traj.summary(), indent=2))
        typer.echo(f"reward {traj.reward} ({traj.stop_reason}, {traj.num_turns} turns); "
                   f"wrote {out / 'summary.json'}, {out / TRAINING_FILE}"
                   + (f", {out / 'solution'}" if episode.solution is not None else "; no verified solution")
                   + (f"; the earlier run is now summary.{kept}.json / solution.{kept}" if kept else ""))

    @app.command("mcp", epilog=MCP_EXAMPLES)
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
            fail(str(exc))

    @app.command("export-sft", epilog=EXPORT_EXAMPLES)
    def export_sft_command(
        trajectories: List[Path] = typer.Argument(..., help="trajectories.jsonl files.", show_default=False),
        out: Path = typer.Option(..., help="Parquet file to write."),
        min_reward: float = typer.Option(0.0, help="Keep trajectories with reward above this."),
        max_invalid_calls: int = typer.Option(0, min=0, help="Unknown tools or malformed arguments allowed."),
        max_repeats: int = typer.Option(3, min=1, help="Identical consecutive tool calls allowed."),
        require_finish: bool = typer.Option(False, "--require-finish", help="Only episodes that ended with finish."),
    ):
        """Convert trajectories to verl's multi-turn SFT parquet (messages + tools), rejection-filtered."""
        from cuda_agent.agent.sft import SFTFilter, export_sft
        from cuda_agent.agent.trajectory import read_jsonl

        for path in trajectories:
            if not path.is_file():
                fail(f"trajectories file not found: {path} (`cuda-agent solve` writes OUT/trajectories.jsonl)")
        records = []
        for path in trajectories:
            try:
                records.extend(read_jsonl(path))
            except UnicodeDecodeError:
                fail(f"{path} is not a text file of trajectories (give the trajectories.jsonl that "
                     "`cuda-agent solve` wrote)")
            except ValueError as exc:
                fail(f"{exc} (give the trajectories.jsonl that `cuda-agent solve` wrote)")
            except OSError as exc:
                fail(f"cannot read {path}: {exc.strerror or exc}")
        try:
            stats = export_sft(records, out, SFTFilter(min_reward, max_invalid_calls, max_repeats, require_finish))
        except OSError as exc:
            fail(f"cannot write {out}: {exc.strerror or exc}")
        typer.echo(f"kept {stats['kept']}, rejected {stats['rejected']}; wrote {out}")
        if not stats["kept"]:
            typer.echo("warning: no trajectory passed the filter", err=True)

    agent_app = typer.Typer(no_args_is_help=True, help="Work with agent episodes (replay).", epilog=REPLAY_EXAMPLES)
    app.add_typer(agent_app, name="agent")

    @agent_app.command("replay", epilog=REPLAY_EXAMPLES)
    def replay_command(
        trajectory: Path = typer.Argument(..., help="trajectories.jsonl file (every record is replayed).",
                                          show_default=False),
        index: Optional[int] = typer.Option(None, help="Replay only this record (0-based)."),
        workspace: Optional[Path] = typer.Option(None, help="Workspace folder (default: a temporary one per record)."),
        out: Optional[Path] = typer.Option(None, help="Append the replayed trajectories to this JSONL file."),
        cache_dir: Optional[Path] = typer.Option(None, help="Build and baseline cache (default: the recorded one)."),
        no_sandbox: bool = no_sandbox_option(),
        strict: bool = typer.Option(False, "--strict", help="Exit with status 1 when a replayed reward differs."),
    ):
        """Re-run a trajectory's tool calls in a fresh workspace and score it again (no model is called)."""
        import tempfile
        from dataclasses import replace

        from cuda_agent.agent.replay import differing_outputs, replay
        from cuda_agent.agent.trajectory import append_jsonl, read_jsonl
        from cuda_agent.env.config import EvalConfig

        if not trajectory.is_file():
            fail(f"trajectory file not found: {trajectory} "
                 "(`cuda-agent solve --out RUN` writes RUN/trajectories.jsonl)")
        try:
            records = list(read_jsonl(trajectory))
        except OSError as exc:
            fail(f"cannot read {trajectory}: {exc.strerror or exc}")
        except ValueError as exc:
            fail(str(exc))
        if index is not None:
            if not 0 <= index < len(records):
                fail(f"{trajectory} has {len(records)} records; no record {index}")
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
