"""The README and docs as a new user reads them: the quick start is one command (run for real by
tests/fresh), every command is in the table, and the Python examples run as written."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import typer

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"


def quick_start_command() -> str:
    """The set-up command of the README's quick start (the first bash block after its heading)."""
    section = README.read_text().split("## Quick start", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)[1]
    return block.strip()


def python_blocks(path: Path) -> list[str]:
    # blocks nested in a list item are indented as a whole
    return [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", path.read_text(), re.S)]


def test_quick_start_is_one_command_that_sets_up_and_evaluates():
    command = quick_start_command()
    assert "\n" not in command and command.startswith("bash setup.sh") and "cuda-agent eval" in command


@pytest.mark.parametrize("doc", [README, *sorted((REPO / "docs").glob("*.md"))], ids=lambda p: p.name)
def test_python_examples_compile_as_written(doc):
    """No top-level `await`: a reader pastes the block into a script and runs it."""
    for code in python_blocks(doc):
        compile(code, str(doc), "exec")


def test_every_command_is_in_the_readme_table():
    from cuda_agent.cli import app

    group = typer.main.get_group(app)
    table = README.read_text().split("## Commands", 1)[1].split("\n\n", 2)[1]
    for name in group.commands:
        assert f"`cuda-agent {name}" in table, name
