"""The command line as a new user meets it: help that fits 80 columns and shows examples, errors
that name their fix instead of a traceback, settings checked before they can be blamed on the
solution, a cache that really empties, and progress on a terminal only."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cuda_agent.cli import app
from cuda_agent.env.config import EvalConfig
from tests.env.helpers import EXAMPLES

COMMANDS = ["eval", "cache", "doctor", "workspace", "solve", "mcp", "export-sft", "synth", "baseline", "bench",
            "report", "rl", "rl data", "train", "train warmup", "train rft", "train value", "train agentic",
            "train all", "agent", "agent replay", "cache info", "cache clear", "cache warm"]


def run(*args, **env):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "80", "TERMINAL_WIDTH": None, **env})


@pytest.mark.parametrize("command", COMMANDS)
def test_help_fits_80_columns_and_shows_an_example(command):
    result = run(*command.split(), "--help")
    assert result.exit_code == 0, result.output
    assert "…" not in result.output, result.output          # no cut flag names or words
    assert "--no-no-" not in result.output
    assert "Examples" in result.output and f"cuda-agent {command}" in result.output
    assert max(len(line) for line in result.output.splitlines()) <= 80


def test_every_eval_option_is_described():
    text = run("eval", "--help").output
    for flag in ("--atol", "--rtol", "--scale", "--trials", "--iters", "--no-sandbox", "--no-compile-baseline"):
        line = next(line for line in text.splitlines() if flag in line)
        assert re.search(r"[A-Za-z]{4,}", line.split(flag, 1)[1].replace("float", "").replace("int", "")), line


def test_version():
    from cuda_agent import __version__

    result = run("--version")
    assert result.exit_code == 0 and result.output.strip() == f"cuda-agent {__version__}"


@pytest.mark.parametrize("flag, value", [("--trials", "0"), ("--iters", "-5"), ("--atol", "-1")])
def test_bad_settings_are_usage_errors_not_the_solutions_fault(flag, value):
    result = run("eval", EXAMPLES / "model.py", EXAMPLES / "solution_cpu", flag, value, "--backend", "cpu")
    assert result.exit_code == 2 and flag in result.output, result.output


def test_eval_config_refuses_settings_that_can_only_fail_later():
    for bad in (dict(num_correct_trials=0), dict(iters=-5), dict(warmup=-1), dict(backend="tpu"),
                dict(sandbox="maybe"), dict(atol=-0.1), dict(timeout_verify=0), dict(atol=float("nan")),
                dict(settle_ms=-1)):
        with pytest.raises(ValueError, match=f"EvalConfig.{next(iter(bad))} "):
            EvalConfig(**bad)
    EvalConfig(iters=None, max_jobs=None, prewarm=True, atol=0, rtol=0)   # fine


def test_empty_or_classless_solution_is_refused_with_the_fix(tmp_path):
    empty = tmp_path / "model_new.py"
    empty.write_text("")
    result = run("eval", EXAMPLES / "model.py", empty, "--backend", "cpu")
    assert result.exit_code == 2 and "is empty: define `class ModelNew(nn.Module)`" in result.output
    assert "Traceback" not in result.output
    empty.write_text("import torch\n")
    assert "defines no ModelNew" in run("eval", EXAMPLES / "model.py", empty, "--backend", "cpu").output


def test_a_syntax_error_is_refused_before_any_build_with_file_and_line(tmp_path):
    broken = tmp_path / "model_new.py"
    broken.write_text("import torch\n\nclass ModelNew(:\n    pass\n")
    result = run("eval", EXAMPLES / "model.py", broken, "--backend", "cpu")
    assert result.exit_code == 2, result.output
    assert f"{broken}: SyntaxError in model_new.py line 3: " in result.output and "class ModelNew(:" in result.output


def test_a_bad_verify_protocol_names_the_flag():
    result = run("eval", EXAMPLES / "model.py", EXAMPLES / "solution_cpu", "--verify", "bogus", "--backend", "cpu")
    assert result.exit_code == 2 and "--verify must be 'strict' or 'published', not 'bogus'" in result.output
    assert "EvalConfig" not in result.output


def test_malformed_task_and_missing_paths_name_the_fix(tmp_path):
    not_a_task = tmp_path / "task.py"
    not_a_task.write_text("x = 1\n")
    result = run("eval", not_a_task, EXAMPLES / "solution_cpu", "--backend", "cpu")
    assert result.exit_code == 2 and "a task defines class Model, get_inputs() and get_init_inputs()" in result.output
    result = run("eval", EXAMPLES / "model.py", tmp_path / "nowhere", "--backend", "cpu")
    assert result.exit_code == 2 and "give a model_new.py file or a workspace folder" in result.output
    (tmp_path / "ws").mkdir()
    result = run("eval", EXAMPLES / "model.py", tmp_path / "ws", "--backend", "cpu")
    assert "`cuda-agent workspace TASK DIR` makes one" in result.output


def test_missing_kernelbench_folder_says_where_to_get_it(tmp_path):
    result = run("eval", "level1/19", EXAMPLES / "solution_cpu", "--backend", "cpu", "--kernelbench", tmp_path / "kb")
    assert result.exit_code == 2 and "KernelBench folder" in result.output and "git clone" in result.output
    (tmp_path / "KernelBench" / "level1").mkdir(parents=True)
    result = run("eval", "level1/19", EXAMPLES / "solution_cpu", "--backend", "cpu", "--kernelbench", tmp_path)
    assert f"did you mean --kernelbench {tmp_path / 'KernelBench'}" in result.output


def test_workspace_into_a_folder_that_cannot_be_made(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")   # a file where a folder should go: not writable even for root
    result = run("workspace", EXAMPLES / "model.py", blocker / "ws", "--backend", "cpu", "--no-sandbox",
                 "--cache-dir", tmp_path / "cache")
    assert result.exit_code == 2 and "cannot create the workspace" in result.output and "Traceback" not in result.output


def test_export_sft_on_missing_or_garbage_files(tmp_path):
    result = run("export-sft", tmp_path / "nope.jsonl", "--out", tmp_path / "o.parquet")
    assert result.exit_code == 2 and "trajectories file not found" in result.output
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe")
    result = run("export-sft", garbage, "--out", tmp_path / "o.parquet")
    assert result.exit_code == 2 and "not a text file of trajectories" in result.output
    garbage.write_text('{"hello": 1}\n')
    result = run("export-sft", garbage, "--out", tmp_path / "o.parquet")
    assert result.exit_code == 2 and "garbage.jsonl:1: not a trajectory record" in result.output
    assert not (tmp_path / "o.parquet").exists()


def _fake_cache(root):
    for rel, size in (("build/pch/abc123/torch_extension_pch.h.gch", 3_000_000), ("build/obj/x.o", 1_000_000),
                      ("build/lib/k/m.so", 500_000), ("build/src/k/a.cpp", 100), ("baselines/t.json", 200)):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\0" * size)


def test_cache_clear_frees_the_builds(tmp_path):
    """It used to clear `ROOT/{obj,lib,pch,...}` while builds live in `ROOT/build/...`: 0.0 MB freed."""
    _fake_cache(tmp_path)
    (tmp_path / "notes.txt").write_text("not ours")
    result = run("cache", "clear", "--cache-dir", tmp_path)
    assert result.exit_code == 0 and "freed 4.5 MB" in result.output, result.output
    assert not (tmp_path / "build").exists() and not (tmp_path / "baselines").exists()
    assert (tmp_path / "notes.txt").exists()


def test_cache_info_breaks_the_total_down(tmp_path):
    _fake_cache(tmp_path)
    result = run("cache", "info", "--cache-dir", tmp_path)
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0] == f"{tmp_path}: 4.5 MB"
    assert any(line.split()[:3] == ["torch", "headers", "3.0"] for line in lines), result.output
    assert any("header abc123: 3.0 MB (another torch install or toolchain)" in line for line in lines)
    assert "--system-site-packages" in result.output


def test_step_progress_names_each_step_and_its_duration():
    from rich.console import Console

    from cuda_agent.env.cli.console import StepProgress

    out = io.StringIO()
    with StepProgress(Console(file=out, force_terminal=True, width=80), first="starting") as progress:
        progress("building kernels (precompiling torch headers first: once per machine, about a minute)")
        progress("verifying")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.getvalue())    # without colours and cursor moves
    for step in ("starting", "building kernels (precompiling torch headers first", "verifying"):
        assert re.search(rf"done {re.escape(step)}.* \d+\.\d s", text), text


def test_eval_refuses_a_task_too_large_for_the_machine(tmp_path):
    huge = tmp_path / "huge.py"
    huge.write_text((EXAMPLES / "model.py").read_text().replace("batch = 512", "batch = 10**9"))
    result = run("eval", huge, EXAMPLES / "solution_cpu", "--backend", "cpu", "--no-sandbox",
                 "--cache-dir", tmp_path / "cache")
    assert result.exit_code == 3, result.output
    assert "huge is too large for this machine: one input set is 4.1 TB" in result.output
    assert "available" in result.output and "--scale" in result.output


def test_eval_json_progress_stays_out_of_scripted_output(cache_dir):
    """Piped output (not a terminal) and --json carry no spinner or step lines."""
    result = run("eval", EXAMPLES / "model.py", EXAMPLES / "solution_cpu", "--json", "--backend", "cpu",
                 "--trials", "1", "--iters", "2", "--no-compile-baseline", "--no-sandbox", "--cache-dir", cache_dir)
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert payload["correct"] is True
    assert result.stderr == ""


def test_a_relative_cache_dir_from_the_command_line_is_made_absolute(tmp_path, monkeypatch):
    from cuda_agent.env.cli.args import make_config

    monkeypatch.chdir(tmp_path)
    config = make_config("cpu", cache_dir=Path("rel-cache"), no_sandbox=True)
    assert config.cache_dir == tmp_path / "rel-cache"


def test_rl_data_and_replay_errors_name_the_fix_not_a_traceback(tmp_path):
    """`rl data --dataset /missing.jsonl` used to print a traceback."""
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_text("not json\n")
    cases = {
        ("rl", "data", "--dataset", tmp_path / "missing.jsonl"): "a dataset from `cuda-agent synth`",
        ("rl", "data", "--dataset", garbage): "garbage.jsonl:1: not valid JSON",
        ("rl", "data", "--kernelbench", tmp_path): "must name a folder holding level1, level2",
        ("rl", "data", "--kernelbench", tmp_path, "--levels", "one"): "--levels takes numbers",
        ("rl", "data"): "no tasks: give --dataset and/or --kernelbench",
        ("agent", "replay", tmp_path / "missing.jsonl"): "writes RUN/trajectories.jsonl",
        ("agent", "replay", garbage): "not a trajectory record",
    }
    for args, fix in cases.items():
        extra = ("--out", tmp_path / "rl") if args[0] == "rl" else ()
        result = run(*args, *extra)
        assert result.exit_code == 2, (args, result.output)
        assert fix in result.output and "Traceback" not in result.output, (args, result.output)
    assert not (tmp_path / "rl").exists()


def test_precision_is_given_in_percent_and_zero_times_every_call():
    from cuda_agent.env.cli.args import precision_setting

    assert precision_setting(0.75) == pytest.approx(EvalConfig().precision)   # the default, both ways
    assert precision_setting(2) == pytest.approx(0.02) and precision_setting(0) is None


def test_cache_peak_measures_the_cpu_again(tmp_path):
    from cuda_agent.env.measure.peaks import Peak, cpu_peak

    stale = Peak("a stale measurement", 0.001, {"float32": 0.001})
    cpu_peak(tmp_path, measure=lambda: stale)
    result = run("cache", "peak", "--cache-dir", tmp_path)
    assert result.exit_code == 0, result.output
    fresh = cpu_peak(tmp_path, measure=lambda: pytest.fail("measured a third time"))
    assert fresh != stale and "measured" in fresh.name and fresh.bandwidth_gbps > 0.001
    assert f"{fresh.bandwidth_gbps:.1f} GB/s" in result.output
