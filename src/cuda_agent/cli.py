"""The `cuda-agent` command. Each subpackage adds its own commands through `register(app)`."""

from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Agents that write fast, verified CUDA kernels for PyTorch programs.")

from cuda_agent.env.cli import register as _register_env  # noqa: E402

_register_env(app)

for _name in ("agent", "synth", "bench", "rl"):
    try:
        _module = __import__(f"cuda_agent.{_name}.cli", fromlist=["register"])
    except ModuleNotFoundError as exc:  # a subpackage without commands yet
        if exc.name not in (f"cuda_agent.{_name}", f"cuda_agent.{_name}.cli"):
            raise
        continue
    _module.register(app)


if __name__ == "__main__":
    app()
