"""Turning the arguments that eval, workspace and solve share into a task and settings, or into
one error line that names the fix (never a traceback)."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from cuda_agent.env.cli.console import MACHINE_ERROR, fail

BACKENDS = ("cuda", "cpu")


# The options eval, workspace and solve share, declared once.
def backend_option():
    return typer.Option(None, help="cuda or cpu (default: cuda when a GPU is usable).")


def kernelbench_option():
    return typer.Option(None, help="KernelBench folder for levelN/ID tasks (holding level1/, level2/, ...).")


def scale_option():
    return typer.Option(None, help="Shrink the task's input sizes by this factor (0-1] for small machines; "
                                   "shapes keep their structure.")


def trials_option():
    return typer.Option(5, min=1, help="Random input sets for verification.")


def iters_option():
    return typer.Option(None, min=1, help="The most timed calls (default 100 on CUDA, 20 on CPU).")


def precision_option():
    from cuda_agent.env.config import EvalConfig

    default = EvalConfig.precision * 100
    return typer.Option(default, min=0, help="Stop timing, after at least 30 timed calls, once the kernel's "
                                             "median time and its speedups are known within this many percent "
                                             "(95 % confidence); 0 times every call.")


def precision_setting(percent: float) -> float | None:
    """EvalConfig.precision from --precision (percent; 0: off)."""
    return percent / 100 if percent > 0 else None


def no_compile_baseline_option():
    return typer.Option(False, "--no-compile-baseline", help="Skip the torch.compile baseline (caps the reward at 2).")


def verify_option():
    return typer.Option("strict", "--verify", help="strict (structured inputs, scale-relative tolerance, outputs "
                                                   "that follow their inputs) or published (the paper's and "
                                                   "KernelBench's: the task's draws at atol=rtol=1e-2).")


def no_sandbox_option():
    return typer.Option(False, "--no-sandbox", help="Run candidates without bubblewrap.")


def cache_dir_option():
    return typer.Option(None, help="Build and baseline cache (default ~/.cache/cuda-agent or $CUDA_AGENT_CACHE).")


def resolve_backend(backend: str | None) -> str:
    if backend is not None and backend not in BACKENDS:
        fail(f"--backend must be cuda or cpu, not {backend!r}")
    if backend:
        return backend
    from cuda_agent.env.config import detect_backend

    return detect_backend()


def load_task_arg(spec: str, kernelbench: Path | None, scale: float | None = None, *, name: str | None = None,
                  quiet: bool = False, backend: str | None = None):
    """The task `spec` names (called `name` if given), checked for Model/get_inputs/get_init_inputs,
    and scaled when asked (its sizes measured by `backend`'s fork server: infra/task_child.py)."""
    from dataclasses import replace

    from cuda_agent.tasks import TaskError, load_task

    try:
        task = load_task(spec, kernelbench)
        task.check_syntax()
        task = replace(task, name=name) if name else task
    except (FileNotFoundError, TaskError, ValueError) as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot read {spec}: {exc.strerror or exc}")
    if scale is None or scale == 1:
        return task
    from functools import partial

    from cuda_agent.env.infra.task_child import estimate_footprint
    from cuda_agent.tasks.scale import scale_task

    try:
        scaled = scale_task(task, scale, partial(estimate_footprint, backend=backend))
    except (TaskError, ValueError) as exc:
        fail(str(exc))
    if not quiet:
        typer.echo(f"scaled {task.name} by {scale:g}: {scaled.describe() or 'already at the smallest sizes'}",
                   err=True)
    return scaled.task


def load_solution_arg(path: Path):
    from cuda_agent.tasks import SolutionError, load_solution
    from cuda_agent.tasks.solution import missing_model_new

    try:
        solution = load_solution(path)
    except (FileNotFoundError, SolutionError) as exc:
        fail(str(exc))
    except UnicodeDecodeError:
        fail(f"{path} is not a Python source file (give a model_new.py file or a workspace folder)")
    except OSError as exc:
        fail(f"cannot read {path}: {exc.strerror or exc}")
    problem = missing_model_new(solution)
    if problem:
        fail(f"{path}: {problem}")
    return solution


# The command-line flag of each EvalConfig setting the commands take, to name in a refusal.
FLAGS = {"protocol": "--verify", "num_correct_trials": "--trials", "iters": "--iters", "precision": "--precision",
         "atol": "--atol", "rtol": "--rtol"}


def make_config(backend: str, *, cache_dir: Path | None, no_sandbox: bool, **settings):
    """EvalConfig from command-line settings; a value it refuses is a usage error naming the flag."""
    from cuda_agent.env.config import EvalConfig

    if cache_dir:
        settings["cache_dir"] = Path(cache_dir)   # through the constructor, which makes it absolute
    try:
        return EvalConfig(backend=backend, sandbox="none" if no_sandbox else "auto", **settings)
    except ValueError as exc:
        fail(re.sub(r"EvalConfig\.(\w+)", lambda m: FLAGS.get(m.group(1), m.group(0)), str(exc)))


def refuse_if_too_large(task, config) -> None:
    """Stop before the evaluation's processes start when the task's tensors cannot fit this machine. A
    task whose code cannot be measured (it exits, crashes or hangs) goes on: its evaluation reports it,
    as it reports a task whose reference fails."""
    from cuda_agent.env.infra.capacity import too_large
    from cuda_agent.tasks import TaskError

    try:
        message = too_large(task, config.resolved_backend(), config.num_correct_trials)
    except TaskError:
        return
    if message:
        fail(message, MACHINE_ERROR)
