"""`cuda-agent doctor`: every check it knows, failing on a machine faked to miss that one piece,
says what is wrong and the command that fixes it; `--fix` runs only the safe repairs; the commands'
fail-fast preflight uses the same checks."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cuda_agent.env.infra import doctor
from cuda_agent.env.infra.doctor import Machine, TorchInfo


class FakeMachine(Machine):
    """A machine with everything an evaluation needs; tests take one piece away."""

    def __init__(self, **overrides):
        self.tools = {"c++": "/usr/bin/c++", "bwrap": "/usr/bin/bwrap", "apt-get": "/usr/bin/apt-get",
                      "nvidia-smi": "/usr/bin/nvidia-smi"}
        self.torch_info = TorchInfo("2.13.0+cu130", "13.0", True, "NVIDIA H100")
        self.root, self.sudo = True, False
        self.header, self.nvcc_version, self.sandbox_ok = True, "13.0", (True, "")
        self.sysctls: dict[str, str] = {}
        self.unwritable: str | None = None
        self.free = 100 << 30
        self.has_ninja, self.pch = True, True
        self.version = (3, 11, 7)
        self.commands: list[list[str]] = []
        for key, value in overrides.items():
            setattr(self, key, value)

    def which(self, name):
        return self.tools.get(name)

    def run(self, cmd, timeout=60):
        self.commands.append(list(cmd))
        if cmd[-1] == "--version" and cmd[0].endswith("nvcc"):
            return 0, f"Cuda compilation tools, release {self.nvcc_version}, V{self.nvcc_version}.88"
        if cmd[0] == "nvidia-smi":
            return 0, "NVIDIA H100 80GB HBM3, 580.159.04\n"
        if cmd[-1] == "--version":
            return 0, "c++ (Debian 12.2.0) 12.2.0\n"
        return 0, ""

    def python_version(self):
        return self.version

    def exists(self, path):
        return self.header if path.name == "Python.h" else True

    def torch(self):
        return self.torch_info

    def ninja(self):
        return self.has_ninja

    def cuda_home(self):
        return Path("/usr/local/cuda")

    def sandbox(self):
        return self.sandbox_ok

    def sysctl(self, name):
        return self.sysctls.get(name)

    def is_root(self):
        return self.root

    def can_sudo(self):
        return self.sudo

    def writable(self, folder):
        return self.unwritable

    def free_bytes(self, folder):
        return self.free

    def header_ready(self, backend, build_dir):
        return self.pch


def findings(machine, backend="cuda", sandbox="auto"):
    return {f.name: f for f in doctor.run_checks(backend, sandbox, Path("/cache"), machine)}


def failed(machine, name, backend="cuda", sandbox="auto"):
    finding = findings(machine, backend, sandbox)[name]
    assert finding.status == "fail", finding
    return finding


def test_a_complete_machine_passes_every_check():
    result = findings(FakeMachine())
    assert {f.status for f in result.values()} == {"ok"}, result
    assert result["gpu"].summary == "NVIDIA H100, driver 580.159.04"
    assert doctor.preflight("cuda", "auto", Path("/cache"), FakeMachine()) == []


def test_old_python():
    assert "3.9.18 is too old" in failed(FakeMachine(version=(3, 9, 18)), "python").summary


def test_torch_missing_or_too_old():
    missing = failed(FakeMachine(torch_info="ModuleNotFoundError: No module named 'torch'"), "torch")
    assert "cannot import torch" in missing.summary and "download.pytorch.org/whl/cpu" in missing.fix
    old = failed(FakeMachine(torch_info=TorchInfo("2.1.0+cpu", None, False)), "torch")
    assert "2.1.0+cpu is too old" in old.summary


def test_no_cxx_compiler_names_the_apt_command_with_sudo_when_not_root():
    as_root = failed(FakeMachine(tools={"apt-get": "/usr/bin/apt-get", "bwrap": "/b", "nvidia-smi": "/n"}),
                     "c++ compiler")
    assert as_root.fix == "apt-get install -y g++" and as_root.repair is not None
    user = failed(FakeMachine(root=False, tools={"apt-get": "/a", "bwrap": "/b", "nvidia-smi": "/n"}), "c++ compiler")
    assert user.fix == "sudo apt-get install -y g++" and user.repair is None   # sudo would ask for a password
    other = failed(FakeMachine(tools={"bwrap": "/b", "nvidia-smi": "/n"}), "c++ compiler")
    assert "package manager" in other.fix


def test_missing_python_headers():
    finding = failed(FakeMachine(header=False), "python headers")
    assert "Python.h" in finding.summary and finding.fix == "apt-get install -y python3.11-dev"


def test_missing_ninja():
    finding = failed(FakeMachine(has_ninja=False), "ninja")
    assert finding.fix.endswith("-m pip install ninja")


def test_cuda_backend_without_a_gpu():
    no_driver = FakeMachine(torch_info=TorchInfo("2.13.0+cpu", None, False), tools={"c++": "/c", "bwrap": "/b"})
    finding = failed(no_driver, "gpu")
    assert "no usable NVIDIA GPU" in finding.summary and "--backend cpu" in finding.fix
    assert findings(no_driver, backend=None)["gpu"].status == "skip"     # cpu is chosen instead
    assert findings(no_driver, backend="cpu")["nvcc"].status == "skip"


def test_gpu_present_but_torch_is_a_cpu_build():
    finding = failed(FakeMachine(torch_info=TorchInfo("2.13.0+cpu", None, False)), "gpu")
    assert "CPU build" in finding.summary and "pip install torch" in finding.fix


def test_gpu_present_but_unusable():
    finding = failed(FakeMachine(torch_info=TorchInfo("2.13.0+cu130", "13.0", False)), "gpu")
    assert "cannot use it" in finding.summary and "driver" in finding.fix


def test_nvcc_missing_or_of_another_major_version():
    class NoToolkit(FakeMachine):
        def cuda_home(self):
            return None

    assert "CUDA_HOME" in failed(NoToolkit(), "nvcc").fix
    mismatch = failed(FakeMachine(nvcc_version="12.4"), "nvcc")
    assert "12.4 does not match torch's CUDA 13.0" in mismatch.summary
    assert findings(FakeMachine(nvcc_version="13.1"))["nvcc"].status == "warn"


def test_bubblewrap_missing():
    finding = failed(FakeMachine(tools={"c++": "/c", "apt-get": "/a", "nvidia-smi": "/n"}), "sandbox")
    assert finding.fix.startswith("apt-get install -y bubblewrap") and "--no-sandbox" in finding.fix
    assert findings(FakeMachine(tools={"c++": "/c"}), sandbox="none")["sandbox"].status == "skip"


@pytest.mark.parametrize("sysctls, fix", [
    ({"kernel.apparmor_restrict_unprivileged_userns": "1"}, "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"),
    ({"kernel.unprivileged_userns_clone": "0"}, "sysctl -w kernel.unprivileged_userns_clone=1"),
    ({"user.max_user_namespaces": "0"}, "sysctl -w user.max_user_namespaces=15000"),
    ({}, "seccomp=unconfined"),
])
def test_namespaces_off_names_the_setting_that_turns_them_on(sysctls, fix):
    machine = FakeMachine(sandbox_ok=(False, "bwrap does not work here: setting up uid map: Permission denied"),
                          sysctls=sysctls, root=False)
    finding = failed(machine, "sandbox")
    assert "cannot create namespaces" in finding.summary and fix in finding.fix
    assert finding.repair is None                      # a security setting: never changed unattended


def test_unwritable_cache_and_full_disk():
    unwritable = failed(FakeMachine(unwritable="/cache is not writable (Permission denied)"), "cache")
    assert "CUDA_AGENT_CACHE" in unwritable.fix
    full = failed(FakeMachine(free=1 << 29), "disk")
    assert "0.5 GB free" in full.summary and "cuda-agent cache clear" in full.fix


def test_header_not_precompiled_is_a_warning_fixed_by_cache_warm():
    finding = findings(FakeMachine(pch=False))["torch header"]
    assert finding.status == "warn" and finding.fix == "cuda-agent cache warm" and finding.repair is not None


def test_fix_runs_only_the_safe_repairs():
    machine = FakeMachine(tools={"apt-get": "/a", "nvidia-smi": "/n"}, has_ninja=False,
                          sysctls={"user.max_user_namespaces": "0"})
    done = doctor.repair(doctor.run_checks("cuda", "auto", Path("/cache"), machine))
    assert sorted(f.name for f, error in done if error is None) == ["c++ compiler", "ninja", "sandbox"]
    installs = [c for c in machine.commands if "install" in c]
    assert ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q", "g++"] in installs
    assert any(c[-1] == "bubblewrap" for c in installs) and any(c[-1] == "ninja" for c in installs)
    assert not any("sysctl" in " ".join(c) for c in machine.commands)


def test_preflight_checks_what_the_command_needs():
    machine = FakeMachine(torch_info=TorchInfo("2.13.0+cpu", None, False), tools={"c++": "/c"}, nvcc_version="9.0")
    assert [f.name for f in doctor.preflight("cuda", "auto", Path("/cache"), machine)] == ["gpu", "sandbox"]
    assert [f.name for f in doctor.preflight("cpu", "auto", Path("/cache"), machine)] == ["sandbox"]
    assert doctor.preflight("cpu", "none", Path("/cache"), machine) == []
    assert [f.name for f in doctor.preflight("cuda", "none", None, machine)] == ["gpu"]   # synth: no builds


def test_doctor_command_prints_one_line_per_check_and_exits_1_on_failure(monkeypatch, tmp_path):
    from cuda_agent.cli import app

    monkeypatch.setattr(doctor, "Machine", lambda: FakeMachine(tools={"c++": "/c", "apt-get": "/a"}))
    result = CliRunner().invoke(app, ["doctor", "--backend", "cuda", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert any(line.startswith("FAIL sandbox: bubblewrap (bwrap) is not installed") and
               "fix: apt-get install -y bubblewrap" in line for line in lines), result.output
    assert any(line.startswith("ok   python") for line in lines)
    monkeypatch.setattr(doctor, "Machine", FakeMachine)
    healthy = CliRunner().invoke(app, ["doctor", "--cache-dir", str(tmp_path)])
    assert healthy.exit_code == 0, healthy.output


def test_commands_fail_fast_with_the_same_line(monkeypatch, tmp_path):
    """`--backend cuda` on a machine without a GPU used to score the solution -1 (eval), make a CUDA
    workspace (workspace) or work minutes for nothing (synth); now each stops at once."""
    from cuda_agent.cli import app

    monkeypatch.setattr(doctor, "Machine", lambda: FakeMachine(torch_info=TorchInfo("2.13.0+cpu", None, False),
                                                               tools={"c++": "/c", "bwrap": "/b"}))
    example = Path(__file__).resolve().parents[2] / "src" / "cuda_agent" / "examples" / "bias_relu"
    dataset = tmp_path / "tasks.jsonl"
    dataset.write_text(json.dumps({"name": "bias_relu", "code": (example / "model.py").read_text()}) + "\n")
    runs = {
        "eval": ["eval", str(example / "model.py"), str(example / "solution_cuda"), "--backend", "cuda"],
        "workspace": ["workspace", str(example / "model.py"), str(tmp_path / "ws"), "--backend", "cuda"],
        "synth": ["synth", "-n", "1", "-o", str(tmp_path / "synth"), "--backend", "cuda"],
        "bench": ["bench", "--solutions", str(tmp_path), "--dataset", str(dataset),
                  "--out", str(tmp_path / "bench"), "--backend", "cuda"],
        "baseline": ["baseline", "--dataset", str(dataset), "--out", str(tmp_path / "base"),
                     "--backend", "cuda"],
    }
    if importlib.util.find_spec("verl") is not None:   # train checks for verl first
        runs["train"] = ["train", "warmup", "--data", str(tmp_path), "--out", str(tmp_path / "rl"), "--backend", "cuda"]
    for name, args in runs.items():
        with_cache = name in ("eval", "workspace", "bench", "baseline")
        result = CliRunner().invoke(app, [*args, "--cache-dir", str(tmp_path)] if with_cache else args)
        assert result.exit_code == 3, (name, result.output)
        assert "error: gpu: no usable NVIDIA GPU" in result.output and "--backend cpu" in result.output, name
    for folder in ("ws", "synth", "bench", "base", "rl"):
        assert not (tmp_path / folder).exists(), folder
