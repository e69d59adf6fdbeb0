"""`profile --ncu`: Nsight Compute over a solution's forward, digested for an LLM (measure/ncu.py).

The solution runs in the candidate's sandbox (bubblewrap's namespaces, read-only system, only its box
writable; without the seccomp filter, which the profiler's injection is not written for) with the
builds an evaluation would serve it (serving.py: the same compiler, flags, link check and cache),
in a process of its own (workers/ncu_target.py) that ncu starts. Nothing here is timed for a reward:
ncu replays each kernel to read its counters, and the digest is feedback only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from cuda_agent.env.config import EvalConfig
from cuda_agent.env.infra.box_file import box_file
from cuda_agent.env.infra.isolation import box_of
from cuda_agent.env.measure.ncu import RANGE, SECTIONS, NcuReportError, digest, parse_csv
from cuda_agent.env.result import EvalResult
from cuda_agent.env.run.serving import MAX_BUILD_REQUESTS, BuildServing
from cuda_agent.env.run.worker_run import job_root
from cuda_agent.env.workers.ncu_target import REQUESTS, build_key
from cuda_agent.tasks.solution import Solution
from cuda_agent.tasks.task import Task

CALLS = 3              # forwards profiled
LAUNCHES = 48          # kernel launches profiled at most (each is replayed per section pass)
FLAGS = ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths")


class NcuUnavailable(RuntimeError):
    """ncu is not on PATH, or this is not a GPU evaluation: the caller shows PyTorch's kernel table."""


class _Builds(BuildServing):
    """An evaluation's build service for the profiled process (serving.py), with nothing else of one."""

    def __init__(self, config: EvalConfig, solution: Solution, box: Path):
        self.config, self.solution, self.box, self.backend = config, solution, box, "cuda"
        self.result = EvalResult(task="ncu", backend="cuda")


def ncu_path() -> str | None:
    return shutil.which("ncu")


def ncu_digest(task: Task, solution: Solution, config: EvalConfig, gpu: int | None = None,
               timeout: float = 300.0) -> list[str]:
    """The digest's lines (at most ncu.MAX_LINES), or one line saying why there is none. Raises
    NcuUnavailable where ncu is not installed or the backend is not CUDA."""
    ncu = ncu_path()
    if config.resolved_backend() != "cuda":
        raise NcuUnavailable("Nsight Compute profiles CUDA kernels: this evaluation runs on the CPU")
    if ncu is None:
        raise NcuUnavailable("Nsight Compute (ncu) is not on PATH")
    job_dir = Path(tempfile.mkdtemp(prefix="cuda-agent-ncu-", dir=job_root()))
    try:
        return _profile(ncu, task, solution, config, box_of(job_dir), gpu, timeout)
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)


def _profile(ncu: str, task: Task, solution: Solution, config: EvalConfig, box: Path, gpu: int | None,
             timeout: float) -> list[str]:
    from cuda_agent.env.builds.compiler import BuildError
    from cuda_agent.env.infra.sandbox import SandboxUnavailable, sandbox_prefix

    box.mkdir(parents=True, exist_ok=True)
    try:
        wrap = sandbox_prefix(config, box) or []
    except SandboxUnavailable as exc:
        return [f"ncu: {exc}"]
    builds = _Builds(config, solution, box)
    prebuilt = {}
    if solution.kernel_files:
        try:
            prebuilt["cuda_extension"] = str(builds._build("cuda_extension", builds._kernel_sources()))
        except BuildError as exc:
            return [f"ncu: the kernels did not build: {exc.summary.splitlines()[0]}"]
    job = {"task_code": task.code, "solution_dir": str(solution.write(box / "solution")), "prebuilt": prebuilt,
           "builds": {}, "calls": CALLS, "seed": config.seed if config.seed is not None else 0}
    report = box / "report"
    command = [*wrap, ncu, "--target-processes", "all", "--nvtx",
               "--nvtx-include", f"{RANGE}/", *(f"--section={s}" for s in SECTIONS),
               "--launch-count", str(LAUNCHES), "-f", "-o", str(report),
               sys.executable, "-m", "cuda_agent.env.workers.ncu_target", str(box / "job.json")]
    env = _environment(gpu)
    for _ in range(MAX_BUILD_REQUESTS + 1):   # each run may reveal one more load_inline call's build
        with box_file(box, "job.json") as fh:   # the run before may have planted a link under that name
            fh.write(json.dumps(job).encode())
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=box)
        except subprocess.TimeoutExpired:
            return [f"ncu: the profiled run took longer than {timeout:g} s"]
        requests = box / REQUESTS   # written by the profiled process where it needs a build (NEEDS_BUILD)
        if not requests.is_file():
            break
        try:   # written by the solution's process: checked like any build request (serving.py)
            pending = None if requests.is_symlink() else json.loads(requests.read_text())
        except ValueError:
            pending = None
        requests.unlink()
        if not isinstance(pending, list) or not all(isinstance(request, dict) for request in pending):
            return ["ncu: the profiled process asked for builds in a form the harness does not take"]
        for request in pending:
            built = builds._serve_build(request)
            if not built["ok"]:
                return [f"ncu: a load_inline build failed: {built['message'].splitlines()[0]}"]
            job["builds"][build_key(request["name"], request["files"], {k: request.get(k) for k in FLAGS})] = \
                built["path"]
    output, written = run.stdout + run.stderr, report.with_suffix(".ncu-rep")
    if run.returncode != 0 or not written.is_file() or written.is_symlink():
        return [f"ncu: the profiled run failed (exit {run.returncode}): {_ncu_error(output)}"]
    csv_text = subprocess.run([ncu, "--import", str(written), "--csv", "--page", "details"],
                              capture_output=True, text=True, timeout=timeout).stdout
    try:
        launches = parse_csv(csv_text)
    except NcuReportError as exc:
        return [f"ncu: its report could not be read ({exc}): {_ncu_error(output)}"]
    if not launches:
        return [f"ncu: no kernel launch inside forward was profiled: {_ncu_error(output)}"]
    return digest(launches, CALLS)


def _environment(gpu: int | None) -> dict:
    env = dict(os.environ)
    src = str(Path(__file__).resolve().parents[3])   # our package, importable in the sandbox
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if gpu is not None:
        from cuda_agent.env.infra.devices import physical_gpu

        env["CUDA_VISIBLE_DEVICES"] = physical_gpu(gpu)
    return env


def _ncu_error(output: str) -> str:
    """ncu's own first error line (`==ERROR== ...`, e.g. ERR_NVGPUCTRPERM), else the output's last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("==ERROR==")]
    return (errors[0] if errors else lines[-1] if lines else "no output")[:300]
