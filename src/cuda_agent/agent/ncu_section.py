"""`profile --ncu`'s section: Nsight Compute's digest of the candidate's kernels (env/run/ncu_run.py),
or, where ncu cannot run, what the profile shows instead. Feedback only: never part of a reward."""

from __future__ import annotations

from cuda_agent.agent.workspace import CommandResult, Workspace


def ncu_section(ws: Workspace, outcome: CommandResult) -> str:
    """The lines `profile --ncu` adds below the profile's own."""
    from cuda_agent.env.run.ncu_run import NcuUnavailable, ncu_digest

    if outcome.result is None or outcome.solution is None or not outcome.result.compiled:
        return "--ncu: nothing to profile (the solution did not build)"
    try:
        return "\n".join(ncu_digest(ws.task, outcome.solution, ws.eval_config))
    except NcuUnavailable as why:
        if ws.backend != "cuda":
            return f"--ncu: {why}"
        shown = "the kernel table above (\"yours\") is the PyTorch profiler's CUDA kernel times instead" \
            if outcome.result.candidate_ops is not None else "no kernel table either (the profile did not get that far)"
        return f"--ncu: {why}; {shown}"
