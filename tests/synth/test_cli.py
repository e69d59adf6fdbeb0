"""`cuda-agent synth` options and a tiny run through the CLI."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from cuda_agent.synth.cli import parse_mix, parse_window, register


def app():
    a = typer.Typer()
    register(a)
    a.command("noop")(lambda: None)   # two commands, so `synth` stays a subcommand
    return a


def test_option_parsers():
    assert parse_mix("1:3.4,2:83.8, transformers:1.2") == {"1": 3.4, "2": 83.8, "transformers": 1.2}
    assert parse_window("1,100") == (1.0, 100.0)
    with pytest.raises(typer.BadParameter):
        parse_window("100,1")
    with pytest.raises(typer.BadParameter):
        parse_mix("2=80")


def test_synth_command_writes_the_outputs(seeded_out, kernelbench):
    result = CliRunner().invoke(app(), [
        "synth", "--num", "2", "--out", str(seeded_out), "--kernelbench", str(kernelbench),
        "--no-compile", "--mix", "2:1", "--window", "0.001,100", "--workers", "1", "--no-progress",
        "--no-transformers"])
    assert result.exit_code == 0, result.output
    assert "wrote 2 tasks" in result.output
    rows = [json.loads(line) for line in (seeded_out / "tasks.jsonl").read_text().splitlines()]
    assert [r["data_source"] for r in rows] == ["torch#2", "torch#2"]
    assert (seeded_out / "tasks.parquet").is_file() and (seeded_out / "datasheet.md").is_file()


def test_bad_backend_is_rejected(tmp_path):
    result = CliRunner().invoke(app(), ["synth", "--num", "1", "--out", str(tmp_path), "--backend", "tpu"])
    assert result.exit_code != 0
