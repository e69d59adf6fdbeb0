"""Nsight Compute's CSV details page, parsed and digested (env/measure/ncu.py), and `profile --ncu`
where ncu cannot run."""

from pathlib import Path

import pytest

from cuda_agent.env.measure.ncu import MAX_LINES, NcuReportError, digest, limiter, parse_csv

SAMPLE = (Path(__file__).parent / "data" / "ncu_details.csv").read_text()


def test_every_launch_is_read_with_its_metrics_in_common_units():
    launches = parse_csv(SAMPLE)
    assert [launch.name.split("(")[0] for launch in launches] == ["void bias_relu_kernel<float>"] * 2 + ["reduce_rows"]
    first, second, third = launches
    assert first.duration_us == pytest.approx(12.45) and second.duration_us == pytest.approx(12.55)  # "12,550" ns
    assert third.duration_us == pytest.approx(30.1)                                                 # msecond
    assert first.values == {"memory_pct": 84.31, "compute_pct": 21.07, "registers": 16.0, "static_shared": 0.0,
                            "dynamic_shared": 0.0, "theoretical_occupancy": 100.0, "achieved_occupancy": 88.5}
    assert third.values["static_shared"] == pytest.approx(2050.0) and third.block == "(128, 1, 1)"


def test_the_digest_ranks_kernels_by_time_and_names_what_limits_each():
    lines = digest(parse_csv(SAMPLE), forwards=2)
    assert lines[0].startswith("Nsight Compute: 3 kernel launches in 2 forward calls (2 kernels")
    assert lines[1] == "  1. reduce_rows: 0.01505 ms per forward (1 launch, 30.1 us each, 55% of the kernel time)"
    assert lines[2] == "     memory 10% of peak, compute 4%: limited by latency (memory and compute both under 60% of peak)"
    assert lines[3] == ("     occupancy 6% achieved of 50%; 40 registers/thread; shared 2 KiB static + 0 B dynamic "
                        "per block; grid (64, 1, 1) block (128, 1, 1)")
    assert lines[4].startswith("  2. bias_relu_kernel<float>: 0.0125 ms per forward (2 launches, 12.5 us each")
    assert lines[5] == "     memory 84% of peak, compute 21%: limited by memory"
    assert "occupancy 88% achieved of 100%; 16 registers/thread" in lines[6]
    assert len(lines) == 7


def test_a_report_recorded_on_an_h100_is_read_whole():
    # ncu 2025.3.1 over two forwards of relu(x @ x.T + 1) inside the NVTX range (its extra range columns
    # included): the sections' metrics as they print them
    launches = parse_csv((Path(__file__).parent / "data" / "ncu_h100_matmul.csv").read_text())
    assert len(launches) == 8 and len({launch.name for launch in launches}) == 4
    gemm = launches[0]
    assert gemm.name.startswith("sm80_xmma_gemm_f32f32") and gemm.duration_us == pytest.approx(22.62)
    assert gemm.values["registers"] == 218 and gemm.values["dynamic_shared"] == pytest.approx(19200.0)
    assert gemm.values["achieved_occupancy"] == 6.25 and gemm.grid == "(4, 8, 4)"
    lines = digest(launches, forwards=2)
    assert len(lines) == 13 and lines[1].startswith("  1. sm80_xmma_gemm_f32f32_f32f32_f32_tn...")
    assert "(2 launches, 22.62 us each, 62% of the kernel time)" in lines[1]
    assert lines[1].split(":")[0] != lines[4].split(":")[0]   # the two cuBLAS variants stay apart


def test_the_digest_stays_within_its_lines():
    many = SAMPLE + "".join(
        f'"{n}","1","p","h","kernel_{n}(int)","1","7","(32, 1, 1)","(1, 1, 1)","0","9.0","GPU Speed Of Light '
        f'Throughput","Duration","us","{n}",,,,,\n' for n in range(3, 40))
    lines = digest(parse_csv(many), forwards=1)
    assert len(lines) <= MAX_LINES and lines[-1].startswith("  ... ") and lines[-1].endswith("more kernels")


def test_limiter_and_a_text_that_is_no_report():
    assert limiter(80, 20) == "memory" and limiter(30, 75) == "compute" and limiter(None, 5) == "unknown"
    assert limiter(20, 30).startswith("latency")
    with pytest.raises(NcuReportError):
        parse_csv("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
                  "Counters on the target device 0.")


def test_profile_ncu_says_why_there_is_no_digest_off_the_gpu(tmp_path, monkeypatch):
    from cuda_agent.agent.ncu_section import ncu_section
    from cuda_agent.agent.workspace import CommandResult, Workspace
    from cuda_agent.env import EvalConfig
    from cuda_agent.env.result import EvalResult
    from cuda_agent.tasks import Solution
    from tests.env.helpers import example_task

    ws = Workspace.create(example_task(), tmp_path / "ws", eval_config=EvalConfig(backend="cpu", cache_dir=tmp_path))
    built = CommandResult("profile", True, "", EvalResult(task="t", backend="cpu", compiled=True), Solution({}))
    assert ncu_section(ws, built) == "--ncu: Nsight Compute profiles CUDA kernels: this evaluation runs on the CPU"
    ws.backend, ws.eval_config = "cuda", EvalConfig(backend="cuda", cache_dir=tmp_path)
    monkeypatch.setattr("cuda_agent.env.run.ncu_run.ncu_path", lambda: None)
    assert ncu_section(ws, built) == ("--ncu: Nsight Compute (ncu) is not on PATH; no kernel table either (the profile "
                                      "did not get that far)")
    unbuilt = CommandResult("profile", False, "", EvalResult(task="t", backend="cuda"), Solution({}))
    assert ncu_section(ws, unbuilt) == "--ncu: nothing to profile (the solution did not build)"


def test_the_workspace_script_takes_ncu_for_profile_only(tmp_path, capsys):
    from cuda_agent.agent.workspace_cli import main

    with pytest.raises(SystemExit) as refused:
        main(["verify", "--ncu", "--workspace", str(tmp_path)])
    assert refused.value.code == 2 and "--ncu goes with profile" in capsys.readouterr().err


def test_eval_ncu_says_why_off_the_gpu_and_keeps_stdout_json(capsys):
    from cuda_agent.env import EvalConfig
    from cuda_agent.env.cli.commands import _print_ncu
    from cuda_agent.env.result import EvalResult
    from cuda_agent.tasks import Solution
    from tests.env.helpers import example_task

    _print_ncu(example_task(), Solution({}), EvalConfig(backend="cpu"), EvalResult(task="t", backend="cpu",
                                                                                    compiled=True), as_json=True)
    out, err = capsys.readouterr()
    assert out == "" and err == "--ncu: Nsight Compute profiles CUDA kernels: this evaluation runs on the CPU\n"


FAKE_NCU = '''#!{python}
# Stands in for Nsight Compute: runs the profiled command as ncu would (the command after `-o REPORT`),
# then writes the report, which `--import ... --csv` prints as the recorded CSV.
import subprocess, sys
args = sys.argv[1:]
if "--import" in args:
    print(open({sample!r}).read())
    sys.exit(0)
report = args[args.index("-o") + 1]
with open({log!r}, "a") as log:
    log.write(" ".join(args[:args.index("-o")]) + "\\n")
    ran = subprocess.run(args[args.index("-o") + 2:], capture_output=True, text=True)
    log.write(f"exit {{ran.returncode}}\\n" + ran.stderr[-2000:] + "\\n")
open(report + ".ncu-rep", "w").write("report")
'''


def test_the_profiled_process_runs_as_ncu_is_told_and_its_report_is_digested(tmp_path, monkeypatch):
    import stat
    import sys

    from cuda_agent.env import EvalConfig
    from cuda_agent.env.run import ncu_run
    from cuda_agent.tasks import Solution
    from tests.env.helpers import example_task

    ncu, log = tmp_path / "ncu", tmp_path / "ncu.log"
    ncu.write_text(FAKE_NCU.format(python=sys.executable, sample=str(Path(__file__).parent / "data" / "ncu_details.csv"),
                                   log=str(log)))
    ncu.chmod(ncu.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(ncu_run, "ncu_path", lambda: str(ncu))
    plain = Solution({"model_new.py": "import torch\n\n\nclass ModelNew(torch.nn.Module):\n"
                                      "    def __init__(self, features):\n        super().__init__()\n\n"
                                      "    def forward(self, x):\n        return torch.relu(x)\n"})
    lines = ncu_run.ncu_digest(example_task(), plain, EvalConfig(backend="cuda", sandbox="none", cache_dir=tmp_path))
    assert lines[0].startswith("Nsight Compute: 3 kernel launches in 3 forward calls") and len(lines) == 7
    told, exit_line = log.read_text().splitlines()[:2]
    assert "--nvtx --nvtx-include cuda_agent_profiled/ --section=SpeedOfLight --section=Occupancy " \
           "--section=LaunchStats --launch-count 48 -f" in told
    # the profiled process loaded the solution and got as far as the device (none here)
    assert exit_line != "exit 0" and "Torch not compiled with CUDA enabled" in log.read_text()
