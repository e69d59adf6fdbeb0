"""`cuda-agent bench --model NAME --base-url URL`: one agent episode per task, many at once.

Episodes run `run_episode` in worker threads and evaluate through one shared evaluator (an `EvalPool`
or the Ray service) on the run's event loop; the episode's clean re-evaluation of its best candidates
is the task's score (the published protocol). For each task the run keeps

    RUN/trajectories/GROUP/ID.jsonl     the trajectory (for RFT: `cuda-agent export-sft RUN/trajectories/*/*.jsonl`)
    RUN/solutions/GROUP/ID/             the best solution, workspace form (absent when none verified)

An endpoint that fails after the client's retries ends its episode as `episode_failed` (`solve`'s
rule, `infrastructure_failure`): not scored, `--resume --retry-failed` reruns it. Several such
episodes in a row (`FailureStreak`: the endpoint or the evaluator is down) stop new ones starting.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from cuda_agent.bench.attempts import attempt_from_result, failed_attempt
from cuda_agent.bench.progress import RunProgress
from cuda_agent.bench.schedule import Deadline, FailureStreak, run_jobs
from cuda_agent.bench.selection import BenchTask
from cuda_agent.bench.store import RunStore
from cuda_agent.env.config import EvalConfig
from cuda_agent.tasks import TaskError


class ThreadsafeEvaluator:
    """An async evaluator, called from an episode's thread: its coroutine runs on the run's loop, so
    every episode shares the one pool (or service client) living there."""

    def __init__(self, evaluator, loop: asyncio.AbstractEventLoop):
        self.evaluator, self.loop = evaluator, loop

    def __call__(self, task, solution, config):
        return asyncio.run_coroutine_threadsafe(self.evaluator.evaluate(task, solution, config), self.loop).result()


def task_path(root: Path, key: str, suffix: str = "") -> Path:
    group, number = key.split("/", 1)
    return root / group / f"{number}{suffix}"


def write_trajectory(path: Path, trajectory) -> None:
    """One record per file, replaced atomically: a resumed episode overwrites a lost one's file."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(trajectory.to_dict(), ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


async def run_agents(store: RunStore, session_id: int, tasks: list[BenchTask], make_client: Callable[[], object],
                     evaluator, eval_config: EvalConfig, agent_config, *, concurrency: int, deadline: Deadline,
                     progress: RunProgress, retry: tuple[str, ...] = (), gpu_memory: int | None = None) -> int:
    """Run the episodes not recorded yet; returns how many were left for a resume. `gpu_memory`:
    bytes of the smallest GPU, for admission by memory (`memory.admitted`; None: none)."""
    from cuda_agent.agent.loop import run_episode
    from cuda_agent.bench.memory import admitted

    recorded = store.recorded_attempts(retry)
    todo = [t for t in tasks if (t.key, 0) not in recorded]
    progress.already(len(tasks) - len(todo), f"{len(tasks) - len(todo)} of {len(tasks)} episodes already recorded; "
                                             f"{len(todo)} to run")
    loop = asyncio.get_running_loop()
    guarded = await admitted(evaluator, todo, gpu_memory, getattr(evaluator, "capacity", concurrency))
    shared = ThreadsafeEvaluator(guarded, loop)
    threads = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="bench-episode")
    run_dir = store.run_dir
    streak = FailureStreak(deadline, "episodes")

    def episode(t: BenchTask):
        workspace = task_path(run_dir / "workspaces", t.key)
        try:
            return run_episode(t.task, make_client(), workspace_dir=workspace, config=agent_config,
                               eval_config=eval_config, evaluator=shared)
        finally:
            shutil.rmtree(workspace, ignore_errors=True)   # the solution and trajectory hold what matters

    async def one(t: BenchTask, alone: bool) -> None:
        start = time.monotonic()
        common = dict(session_id=session_id, source="episode")
        try:
            result = await loop.run_in_executor(threads, episode, t)
        except TaskError as exc:
            store.record_attempt(failed_attempt(t.key, 0, "task_error", str(exc), **common))
            progress.finished(t.key, "task_error", str(exc))
            return
        except Exception as exc:   # a workspace that cannot be made, a bug of ours: this episode only
            message = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"
            store.record_attempt(failed_attempt(t.key, 0, "episode_failed", message, **common))
            progress.finished(t.key, "episode_failed", f"{type(exc).__name__}: {exc}")
            streak.note(message)
            return
        attempt = _episode_attempt(t, result, run_dir, session_id, time.monotonic() - start)
        store.record_attempt(attempt)
        streak.note(attempt.error_message if attempt.verdict == "episode_failed" else None)
        traj = result.trajectory
        progress.finished(t.key, "episode_failed" if attempt.verdict == "episode_failed" else f"reward {traj.reward}",
                          f"{traj.num_turns} turns, {traj.stop_reason}")

    try:
        return await run_jobs(todo, one, concurrency, deadline)
    finally:
        threads.shutdown(wait=False)


def _episode_attempt(t: BenchTask, episode, run_dir: Path, session_id: int, seconds: float):
    from cuda_agent.agent.run_folder import infrastructure_failure

    traj = episode.trajectory
    traj_path = task_path(run_dir / "trajectories", t.key, ".jsonl")
    write_trajectory(traj_path, traj)
    solution_dir = task_path(run_dir / "solutions", t.key)
    shutil.rmtree(solution_dir, ignore_errors=True)
    if episode.solution is not None:
        episode.solution.write(solution_dir)
    common = dict(session_id=session_id, source="episode", trajectory_path=str(traj_path), trajectory_id=traj.id,
                  turns=traj.num_turns, stop_reason=traj.stop_reason, seconds=round(seconds, 3),
                  solution_path=str(solution_dir) if episode.solution is not None else None,
                  solution_digest=episode.solution.digest if episode.solution is not None else None)
    result = episode.result
    why = infrastructure_failure(traj)
    if why is not None and not (result is not None and result.correct):
        return failed_attempt(t.key, 0, "episode_failed", why, **common)
    if result is None:
        return failed_attempt(t.key, 0, "incorrect", f"no candidate was evaluated ({traj.stop_reason})", **common)
    return attempt_from_result(t.key, 0, result, **common)
