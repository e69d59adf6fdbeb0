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


def test_without_kernelbench_it_fails_at_once_with_the_reason(tmp_path, monkeypatch):
    """No KernelBench for decontamination: refused before any work (no catalog crawl, nothing in --out)."""
    import cuda_agent.synth.pipeline as pipeline

    def no_crawl(**_):
        raise AssertionError("the catalog was built before KernelBench was looked for")

    monkeypatch.setattr(pipeline, "build_catalog", no_crawl)
    monkeypatch.delenv("CUDA_AGENT_KERNELBENCH", raising=False)
    result = CliRunner().invoke(app(), ["synth", "--num", "1", "--out", str(tmp_path / "out"), "--no-progress"])
    assert result.exit_code == 2, result.output
    assert "KernelBench" in result.output and "--kernelbench" in result.output and "--no-decontaminate" in result.output
    assert not (tmp_path / "out").exists()

    result = CliRunner().invoke(app(), ["synth", "--num", "1", "--out", str(tmp_path / "out"), "--no-progress",
                                        "--kernelbench", str(tmp_path / "nowhere")])
    assert result.exit_code == 2 and "nowhere" in result.output and "levelN" in result.output, result.output
    assert not (tmp_path / "out").exists()


def test_restart_with_other_settings_says_what_differs_and_how_to_go_on(seeded_out, kernelbench):
    from cuda_agent.synth.pipeline import SynthConfig

    earlier = SynthConfig(num=2, out=str(seeded_out), seed=0, mix={"2": 1.0}, window_ms=(0.001, 100.0), compile=False,
                          include_transformers=False, kernelbench=str(kernelbench))
    (seeded_out / "work" / "config.json").write_text(json.dumps(earlier.resolved().fingerprint()))
    (seeded_out / "work" / "candidates.jsonl").write_text(json.dumps({"id": "c0", "class": "2", "j": 0}) + "\n")
    result = CliRunner().invoke(app(), [
        "synth", "--num", "2", "--out", str(seeded_out), "--kernelbench", str(kernelbench), "--seed", "7",
        "--mix", "2:1", "--window", "0.001,100", "--workers", "1", "--no-progress", "--no-transformers"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "seed: 0 in the run, 7 now" in text and "compile: False in the run, True now" in text
    assert "--seed 0" in text and "--no-compile" in text and "another --out" in text
    assert "mix" not in text and "window" not in text   # only what differs is listed


def test_a_run_that_made_nothing_takes_the_new_settings(seeded_out, kernelbench, monkeypatch):
    """A first run stopped before any candidate (e.g. no KernelBench) does not bind the folder to its settings."""
    from cuda_agent.synth import pipeline
    from cuda_agent.synth.pipeline import SynthConfig

    earlier = SynthConfig(num=2, out=str(seeded_out), seed=0, include_transformers=False)
    (seeded_out / "work" / "config.json").write_text(json.dumps(earlier.resolved().fingerprint()))
    seen = []
    monkeypatch.setattr(pipeline, "synthesize", lambda cfg: seen.append(cfg) or {
        "written": 1, "generated": 1, "filtered": 1, "accepted": 1, "datasheet": "datasheet.md"})
    result = CliRunner().invoke(app(), ["synth", "--num", "1", "--out", str(seeded_out), "--no-decontaminate",
                                        "--seed", "3", "--no-progress", "--no-transformers"])
    assert result.exit_code == 0, result.output
    assert [c.seed for c in seen] == [3] and not (seeded_out / "work" / "config.json").exists()



def test_write_only_writes_what_a_partial_run_kept_without_filtering_more(seeded_out, kernelbench, tmp_path):
    """A partial build's preview: the outputs from the journals, no new candidate filtered, exit 0."""
    missing = CliRunner().invoke(app(), ["synth", "--num", "4", "--out", str(tmp_path / "none"), "--write-only"])
    assert missing.exit_code != 0 and "holds no synthesis run" in missing.output
    settings = ["--out", str(seeded_out), "--kernelbench", str(kernelbench), "--no-compile", "--mix", "2:1",
                "--window", "0.001,100", "--workers", "1", "--no-progress", "--no-transformers"]
    first = CliRunner().invoke(app(), ["synth", "--num", "2", *settings])
    assert first.exit_code == 0, first.output
    results = (seeded_out / "work" / "results.jsonl").read_text()
    (seeded_out / "tasks.jsonl").unlink()
    preview = CliRunner().invoke(app(), ["synth", "--num", "50", *settings, "--write-only"])
    assert preview.exit_code == 0, preview.output
    assert (seeded_out / "work" / "results.jsonl").read_text() == results   # nothing filtered
    assert len((seeded_out / "tasks.jsonl").read_text().splitlines()) == 2 and "wrote 2 tasks" in preview.output
