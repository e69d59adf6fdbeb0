"""What an evaluation needs from this machine, checked one item at a time.

Each check answers with a `Finding`: ok, warn, fail or skip, one line saying what is wrong and the
exact command that fixes it. `cuda-agent doctor` prints them all; `preflight()` runs the ones a
command needs (eval, solve, workspace, synth, and later bench and train) so it fails fast with
the same line instead of minutes later with a build or sandbox error.

Everything the checks look at goes through `Machine`, so tests can fake each missing piece.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

MIN_PYTHON = (3, 10)
MIN_TORCH = (2, 4)
MIN_FREE_BYTES = 2 << 30        # the precompiled torch header alone is about 0.8 GB
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
DOCTOR_HINT = "`cuda-agent doctor` checks everything an evaluation needs; `cuda-agent doctor --fix` repairs what it can"


@dataclass
class TorchInfo:
    version: str
    cuda: str | None            # torch.version.cuda: None for a CPU build
    gpu_usable: bool
    gpu_name: str = ""


@dataclass
class Finding:
    name: str
    status: str                 # "ok" | "warn" | "fail" | "skip"
    summary: str
    fix: str | None = None      # the command (or action) that fixes it
    repair: Callable[[], None] | None = None   # what `doctor --fix` may do on its own

    @property
    def failed(self) -> bool:
        return self.status == "fail"

    def line(self) -> str:
        text = f"{self.name}: {self.summary}"
        return f"{text}; fix: {self.fix}" if self.fix and self.status in ("fail", "warn") else text


class Machine:
    """The real machine. Tests override single methods to fake a missing piece."""

    def which(self, name: str) -> str | None:
        return shutil.which(name)

    def run(self, cmd: list[str], timeout: float = 60) -> tuple[int, str]:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as exc:
            return 127, str(exc)
        return proc.returncode, proc.stdout + proc.stderr

    def python_version(self) -> tuple[int, int, int]:
        return tuple(sys.version_info[:3])

    def python_header(self) -> Path:
        return Path(sysconfig.get_paths()["include"]) / "Python.h"

    def exists(self, path: Path) -> bool:
        return path.exists()

    def torch(self) -> TorchInfo | str:
        """What torch this Python imports, or why it cannot (asked once)."""
        if not hasattr(self, "_torch"):
            self._torch = self._probe_torch()
        return self._torch

    def _probe_torch(self) -> TorchInfo | str:
        try:
            import torch
        except Exception as exc:  # not installed, or a broken install
            return f"{type(exc).__name__}: {exc}"
        usable = bool(torch.cuda.is_available())
        name = ""
        if usable:
            try:
                name = torch.cuda.get_device_name(0)
            except Exception:  # a driver that lists the GPU but cannot open it
                usable = False
        return TorchInfo(torch.__version__, torch.version.cuda, usable, name)

    def ninja(self) -> bool:
        try:
            import ninja  # noqa: F401
            return True
        except ImportError:
            return self.which("ninja") is not None

    def cuda_home(self) -> Path | None:
        from cuda_agent.env.builds.compiler import find_cuda_home

        return find_cuda_home()

    def sandbox(self) -> tuple[bool, str]:
        from cuda_agent.env.infra.sandbox import sandbox_available

        return sandbox_available()

    def sysctl(self, name: str) -> str | None:
        try:
            return Path("/proc/sys", *name.split(".")).read_text().strip()
        except OSError:
            return None

    def is_root(self) -> bool:
        return os.geteuid() == 0

    def can_sudo(self) -> bool:
        return self.which("sudo") is not None and self.run(["sudo", "-n", "true"], timeout=10)[0] == 0

    def writable(self, folder: Path) -> str | None:
        """None when `folder` (or the nearest folder above it that exists) can be written, else why not."""
        probe = _existing_parent(folder)
        try:
            with tempfile.NamedTemporaryFile(dir=probe, prefix=".cuda-agent-probe-"):
                pass
        except OSError as exc:
            return f"{probe} is not writable ({exc.strerror or exc})"
        return None

    def free_bytes(self, folder: Path) -> int:
        return shutil.disk_usage(_existing_parent(folder)).free

    def header_ready(self, backend: str, build_dir: Path) -> bool:
        from cuda_agent.env.builds.compiler import BuildError, header_ready

        try:
            return header_ready(backend, build_dir)
        except BuildError:
            return False


def _existing_parent(folder: Path) -> Path:
    folder = Path(folder).absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


# ---------------------------------------------------------------------------------------------
# fixes


def _as_root(machine: Machine, command: str) -> str:
    return command if machine.is_root() else f"sudo {command}"


def _apt_fix(machine: Machine, package: str, what: str) -> tuple[str, Callable[[], None] | None]:
    """The command that installs a Debian/Ubuntu package, and a repair when it can run unattended."""
    if machine.which("apt-get") is None:
        return f"install {what} with your system's package manager (Debian/Ubuntu: apt-get install {package})", None
    command = _as_root(machine, f"apt-get install -y {package}")

    def repair() -> None:
        prefix = [] if machine.is_root() else ["sudo", "-n"]
        env_prefix = ["env", "DEBIAN_FRONTEND=noninteractive"]
        rc, out = machine.run([*prefix, *env_prefix, "apt-get", "install", "-y", "-q", package], timeout=900)
        if rc != 0:  # a fresh machine may not have package lists yet
            machine.run([*prefix, "apt-get", "update", "-q"], timeout=900)
            rc, out = machine.run([*prefix, *env_prefix, "apt-get", "install", "-y", "-q", package], timeout=900)
        if rc != 0:
            raise RuntimeError(out.strip()[-500:])

    unattended = machine.is_root() or machine.can_sudo()
    return command, repair if unattended else None


def _pip_fix(machine: Machine, package: str) -> tuple[str, Callable[[], None]]:
    def repair() -> None:
        rc, out = machine.run([sys.executable, "-m", "pip", "install", "-q", package], timeout=900)
        if rc != 0:
            raise RuntimeError(out.strip()[-500:])

    return f"{Path(sys.executable).name} -m pip install {package}", repair


def torch_install_command(cuda: bool) -> str:
    """How to get the right torch wheel: a bare `pip install torch` pulls a multi-GB CUDA build."""
    if cuda:
        return "pip install torch  (the default Linux wheel on PyPI is a CUDA build)"
    return f"pip install torch --index-url {CPU_TORCH_INDEX}  (the CPU wheel; PyPI's default is a CUDA build)"


# ---------------------------------------------------------------------------------------------
# checks


def check_python(m: Machine) -> Finding:
    version = m.python_version()
    text = ".".join(map(str, version))
    if tuple(version[:2]) < MIN_PYTHON:
        need = ".".join(map(str, MIN_PYTHON))
        return Finding("python", "fail", f"{text} is too old (cuda-agent needs {need} or newer)",
                       f"install Python {need}+ and make the virtualenv with it (python3.11 -m venv .venv)")
    return Finding("python", "ok", text)


def check_torch(m: Machine) -> Finding:
    info = m.torch()
    if isinstance(info, str):
        return Finding("torch", "fail", f"cannot import torch ({info})", torch_install_command(cuda=False))
    numbers = tuple(int(p) for p in re.findall(r"\d+", info.version)[:2])
    if numbers < MIN_TORCH:
        need = ".".join(map(str, MIN_TORCH))
        return Finding("torch", "fail", f"{info.version} is too old (cuda-agent needs {need} or newer)",
                       torch_install_command(cuda=info.cuda is not None))
    build = f"CUDA {info.cuda} build" if info.cuda else "CPU build"
    return Finding("torch", "ok", f"{info.version} ({build})")


def check_cxx(m: Machine) -> Finding:
    cxx = os.environ.get("CXX", "c++")
    path = m.which(cxx)
    if path is None:
        command, repair = _apt_fix(m, "g++", "a C++ compiler")
        return Finding("c++ compiler", "fail", f"`{cxx}` not found (kernels and bindings are built with it)",
                       command, repair)
    rc, out = m.run([path, "--version"])
    if rc != 0:
        return Finding("c++ compiler", "fail", f"`{path} --version` failed: {out.strip()[:200]}",
                       "reinstall the compiler, or point CXX at a working one")
    return Finding("c++ compiler", "ok", out.strip().splitlines()[0] if out.strip() else path)


def check_python_headers(m: Machine) -> Finding:
    header = m.python_header()
    if not m.exists(header):
        major, minor = m.python_version()[:2]
        command, repair = _apt_fix(m, f"python{major}.{minor}-dev", "the Python development headers")
        return Finding("python headers", "fail", f"{header} is missing (every extension build includes it)",
                       command, repair)
    return Finding("python headers", "ok", str(header.parent))


def check_ninja(m: Machine) -> Finding:
    if not m.ninja():
        command, repair = _pip_fix(m, "ninja")
        return Finding("ninja", "fail", "not installed (torch's own extension builds need it)", command, repair)
    return Finding("ninja", "ok", "installed")


def _nvidia_smi(m: Machine) -> tuple[str, str] | None:
    """(GPU name, driver version) of the first GPU, or None without a working driver."""
    if m.which("nvidia-smi") is None:
        return None
    rc, out = m.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], timeout=30)
    if rc != 0 or not out.strip():
        return None
    name, _, driver = out.strip().splitlines()[0].rpartition(",")
    return name.strip(), driver.strip()


def check_gpu(m: Machine, backend: str | None) -> Finding:
    """`backend` "cuda": a GPU is required; None: report what is there; "cpu": not needed."""
    if backend == "cpu":
        return Finding("gpu", "skip", "not needed (cpu backend)")
    info = m.torch()
    smi = _nvidia_smi(m)
    if isinstance(info, TorchInfo) and info.gpu_usable:
        driver = f", driver {smi[1]}" if smi else ""
        return Finding("gpu", "ok", f"{info.gpu_name or 'CUDA GPU'}{driver}")
    status = "fail" if backend == "cuda" else "skip"
    if smi is None:
        return Finding("gpu", status, "no usable NVIDIA GPU (nvidia-smi finds none)" +
                       ("" if status == "fail" else "; the cpu backend will be used"),
                       "use --backend cpu, or run on a machine with an NVIDIA GPU and driver")
    if isinstance(info, TorchInfo) and info.cuda is None:
        return Finding("gpu", "fail" if status == "fail" else "warn",
                       f"{smi[0]} (driver {smi[1]}) is present but this torch ({info.version}) is a CPU build",
                       torch_install_command(cuda=True))
    return Finding("gpu", "fail" if status == "fail" else "warn",
                   f"{smi[0]} (driver {smi[1]}) is present but torch cannot use it "
                   "(a driver older than torch's CUDA, or CUDA_VISIBLE_DEVICES hides it)",
                   "update the NVIDIA driver to one that supports torch's CUDA version, or check CUDA_VISIBLE_DEVICES")


def check_nvcc(m: Machine, backend: str | None) -> Finding:
    info = m.torch()
    torch_cuda = info.cuda if isinstance(info, TorchInfo) else None
    if backend == "cpu" or (backend is None and torch_cuda is None):
        return Finding("nvcc", "skip", "not needed (cpu backend)")
    home = m.cuda_home()
    nvcc = home / "bin" / "nvcc" if home else None
    wanted = torch_cuda or "the version torch was built with"
    if nvcc is None or not m.exists(nvcc):
        return Finding("nvcc", "fail", "the CUDA toolkit (nvcc) was not found",
                       f"install the CUDA {wanted} toolkit and set CUDA_HOME to it "
                       f"(e.g. export CUDA_HOME=/usr/local/cuda-{torch_cuda or 'X.Y'})")
    rc, out = m.run([str(nvcc), "--version"])
    found = re.search(r"release (\d+)\.(\d+)", out)
    if rc != 0 or not found:
        return Finding("nvcc", "fail", f"`{nvcc} --version` failed: {out.strip()[:200]}",
                       "reinstall the CUDA toolkit, or set CUDA_HOME to a working one")
    version = f"{found[1]}.{found[2]}"
    if torch_cuda and found[1] != torch_cuda.split(".")[0]:
        return Finding("nvcc", "fail", f"nvcc {version} does not match torch's CUDA {torch_cuda} (the major "
                                       "versions must agree)",
                       f"install the CUDA {torch_cuda} toolkit and set CUDA_HOME to it, or install a torch "
                       f"built for CUDA {version}")
    if torch_cuda and version != torch_cuda:
        return Finding("nvcc", "warn", f"nvcc {version}, torch's CUDA {torch_cuda} (minor versions differ; "
                                       "usually fine)", f"install the CUDA {torch_cuda} toolkit to match exactly")
    return Finding("nvcc", "ok", f"{version} ({nvcc})")


def _userns_fix(m: Machine) -> str:
    """Why unprivileged namespaces are off, as the command that turns them on."""
    if m.sysctl("kernel.apparmor_restrict_unprivileged_userns") == "1":
        return _as_root(m, "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0") + \
            " (Ubuntu's AppArmor blocks unprivileged namespaces)"
    if m.sysctl("kernel.unprivileged_userns_clone") == "0":
        return _as_root(m, "sysctl -w kernel.unprivileged_userns_clone=1")
    if m.sysctl("user.max_user_namespaces") == "0":
        return _as_root(m, "sysctl -w user.max_user_namespaces=15000")
    return ("allow namespaces in the container (docker run --security-opt seccomp=unconfined "
            "--security-opt apparmor=unconfined, or --privileged), or pass --no-sandbox to run unsandboxed")


def check_sandbox(m: Machine, sandbox: str = "auto") -> Finding:
    if sandbox == "none":
        return Finding("sandbox", "skip", "off (--no-sandbox: candidates run unsandboxed)")
    if m.which("bwrap") is None:
        command, repair = _apt_fix(m, "bubblewrap", "bubblewrap")
        return Finding("sandbox", "fail", "bubblewrap (bwrap) is not installed; candidates run inside it",
                       f"{command} (or pass --no-sandbox to run candidates unsandboxed)", repair)
    ok, why = m.sandbox()
    if not ok:
        return Finding("sandbox", "fail", f"bubblewrap cannot create namespaces here ({why})", _userns_fix(m))
    return Finding("sandbox", "ok", "bubblewrap works")


def check_cache(m: Machine, cache_dir: Path) -> Finding:
    why = m.writable(cache_dir)
    if why:
        return Finding("cache", "fail", f"cannot write the build cache {cache_dir}: {why}",
                       "pass --cache-dir DIR or export CUDA_AGENT_CACHE=DIR (a folder you can write)")
    return Finding("cache", "ok", f"{cache_dir} is writable")


def check_disk(m: Machine, cache_dir: Path) -> Finding:
    if m.writable(cache_dir) is not None:
        return Finding("disk", "skip", "the cache folder cannot be written (see above)")
    free = m.free_bytes(cache_dir)
    text = f"{free / 1e9:.1f} GB free for the cache ({_existing_parent(cache_dir)})"
    if free < MIN_FREE_BYTES:
        return Finding("disk", "fail", f"only {text}; builds need about {MIN_FREE_BYTES / 1e9:.0f} GB",
                       "cuda-agent cache clear, or export CUDA_AGENT_CACHE=DIR on a disk with room")
    return Finding("disk", "ok", text)


def check_header(m: Machine, backend: str, cache_dir: Path) -> Finding:
    if m.header_ready(backend, Path(cache_dir) / "build"):
        return Finding("torch header", "ok", f"precompiled for the {backend} toolchain")

    def repair() -> None:
        from cuda_agent.env.builds.toolchain import prepare_toolchain

        prepare_toolchain(backend, Path(cache_dir) / "build")

    return Finding("torch header", "warn", "not precompiled yet: the first build precompiles it (a minute or two, "
                                           "once per machine and torch install)", "cuda-agent cache warm", repair)


# ---------------------------------------------------------------------------------------------
# entry points


def effective_backend(m: Machine, backend: str | None) -> str:
    if backend:
        return backend
    info = m.torch()
    return "cuda" if isinstance(info, TorchInfo) and info.gpu_usable else "cpu"


def run_checks(backend: str | None, sandbox: str, cache_dir: Path, machine: Machine | None = None) -> list[Finding]:
    """Every check, for `cuda-agent doctor`."""
    m = machine or Machine()
    findings = [check_python(m), check_torch(m), check_cxx(m), check_python_headers(m), check_ninja(m),
                check_gpu(m, backend), check_nvcc(m, backend), check_sandbox(m, sandbox),
                check_cache(m, cache_dir), check_disk(m, cache_dir)]
    if not any(f.failed for f in findings if f.name in ("torch", "c++ compiler", "nvcc")):
        findings.append(check_header(m, effective_backend(m, backend), cache_dir))
    return findings


def preflight(backend: str, sandbox: str, cache_dir: Path | None, machine: Machine | None = None) -> list[Finding]:
    """The failed checks among those a command on `backend` needs (empty: go ahead). Every command
    needs torch, the GPU it asks for, a C++ compiler and Python's headers (builds, and torch.compile
    on CPU); `cache_dir` None for commands that build no extensions (synth's filters), which then
    need neither nvcc nor the cache; `sandbox` "none" when candidates run unsandboxed or not at all."""
    m = machine or Machine()
    checks: list[Callable[[], Finding]] = [lambda: check_torch(m), lambda: check_gpu(m, backend),
                                           lambda: check_cxx(m), lambda: check_python_headers(m),
                                           lambda: check_sandbox(m, sandbox)]
    if cache_dir is not None:
        checks += [lambda: check_nvcc(m, backend), lambda: check_cache(m, Path(cache_dir)),
                   lambda: check_disk(m, Path(cache_dir))]
    return [finding for finding in (check() for check in checks) if finding.failed]


def repair(findings: list[Finding]) -> list[tuple[Finding, str | None]]:
    """Run the repairs that are safe to do unattended; (finding, None) on success or why it failed."""
    done = []
    for finding in findings:
        if finding.repair is None or finding.status not in ("fail", "warn"):
            continue
        try:
            finding.repair()
            done.append((finding, None))
        except Exception as exc:  # report and go on with the other repairs
            done.append((finding, str(exc) or type(exc).__name__))
    return done
