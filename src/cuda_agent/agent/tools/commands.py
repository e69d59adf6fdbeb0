"""The workspace's protected commands as tools (compile, verify, profile), and the tools that end
an episode: `finish` (our loop) and `submit` (the MCP server, which then reports the clean score)."""

from __future__ import annotations

from typing import Callable

from pydantic import Field

from cuda_agent.agent.tools.core import ToolContext, ToolOutput
from cuda_agent.agent.tools.schema import Arguments, Tool


class NoArguments(Arguments):
    pass


class ProfileArguments(Arguments):
    unscored: bool = Field(False, description="time the solution even when its outputs are wrong, to see whether "
                                              "a faster but wrong idea is worth fixing (no reward)")


class FinishArguments(Arguments):
    summary: str | None = Field(None, description="one paragraph on what you built")


def _command(command: str) -> Callable[[ToolContext, NoArguments], ToolOutput]:
    def run(ctx: ToolContext, args: NoArguments) -> ToolOutput:
        outcome = ctx.workspace.run(command)
        return ToolOutput(outcome.text, ok=outcome.ok, command=outcome)
    return run


def run_profile(ctx: ToolContext, args: ProfileArguments) -> ToolOutput:
    outcome = ctx.workspace.run("profile", unscored=args.unscored)
    return ToolOutput(outcome.text, ok=outcome.ok, command=outcome)


def run_finish(ctx: ToolContext, args: FinishArguments) -> ToolOutput:
    return ToolOutput("Finished. The environment re-evaluates your best verified solution.", finish=True)


def run_submit(ctx: ToolContext, args: FinishArguments) -> ToolOutput:
    return ToolOutput("Submitted. The environment re-evaluates your best verified solution from a clean copy.",
                      finish=True)


COMPILE = Tool("compile", "Build kernels/ into the cuda_extension module (same as ./compile). Reports errors.",
               NoArguments, _command("compile"))
VERIFY = Tool("verify", "Check model_new.py against model.py on fresh random inputs (same as ./verify).",
              NoArguments, _command("verify"))
PROFILE = Tool("profile", (
    "Verify, then time your ModelNew against eager PyTorch and torch.compile (same as ./profile); "
    "reports times, speedups and the reward; unscored=true times wrong outputs too (./profile --unscored)."),
    ProfileArguments, run_profile)
FINISH = Tool("finish", "End the episode. Call it when your solution is verified and as fast as you can make it.",
              FinishArguments, run_finish)
SUBMIT = Tool("submit", (
    "End the session: the environment re-evaluates your best verified solution from a clean copy and "
    "reports its score. Call it when your solution is verified and as fast as you can make it."),
    FinishArguments, run_submit)
