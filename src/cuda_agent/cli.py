"""The `cuda-agent` command. Each subpackage adds its own commands through `register(app)`."""

from __future__ import annotations

from typing import Optional

import typer

from cuda_agent import __version__

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Agents that write fast, verified CUDA kernels for PyTorch programs.",
                  epilog="[bold]Start here[/bold]\n\ncuda-agent doctor\n\ncuda-agent eval")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"cuda-agent {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: Optional[bool] = typer.Option(None, "--version", callback=_print_version, is_eager=True,
                                                help="Print the version and exit.")) -> None:
    """Agents that write fast, verified CUDA kernels for PyTorch programs."""


from cuda_agent.env.cli.commands import register as _register_env  # noqa: E402

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
