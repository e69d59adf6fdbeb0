"""The README's quick start, verbatim, on a machine that has never seen cuda-agent: a throwaway
overlay of this machine's root file system with bubblewrap, g++ and Python's venv module and
headers purged, an empty HOME and the checkout as a fresh clone has it. The set-up command must
install what is missing and the first evaluation must print the example's result line.

Root on Debian or Ubuntu only (CI); elsewhere it skips and says why. It takes minutes: the set-up
installs torch, and the first evaluation precompiles the torch header and times torch.compile,
so .ci/run starts it beside the rest of the suite."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_readme import REPO, quick_start_command

pytestmark = [pytest.mark.slow, pytest.mark.fresh]
SCRIPT = Path(__file__).with_name("fresh_root.sh")
RESULT_LINE = "examples/running_mean on cpu: correct, reward 3"


def _why_not_here() -> str | None:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "needs root on Linux (it mounts an overlay of the root file system)"
    for tool in ("unshare", "chroot", "apt-get", "git"):
        if shutil.which(tool) is None:
            return f"needs {tool} (a Debian or Ubuntu machine)"
    if not Path("/usr/bin/python3").exists():
        return "needs the system's /usr/bin/python3"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot make a mount namespace here: {probe.stderr.strip()}"
    return None


def _checkout_copy(target: Path) -> None:
    """The files a fresh clone has: tracked and not-ignored ones, as they are in the working tree."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        source = REPO / rel
        if source.is_file():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / rel)


def test_readme_quick_start_on_a_fresh_machine(tmp_path):
    why = _why_not_here()
    if why:
        pytest.skip(why)
    checkout, scratch = tmp_path / "checkout", tmp_path / "scratch"
    checkout.mkdir()
    _checkout_copy(checkout)
    python = subprocess.run(["/usr/bin/python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                            capture_output=True, text=True, check=True).stdout.strip()
    purge = f"bubblewrap g++ python{python}-venv python{python}-dev"
    command = quick_start_command()
    start = time.monotonic()
    try:
        proc = subprocess.run(["bash", str(SCRIPT), str(scratch), str(checkout), purge, command],
                              capture_output=True, text=True, timeout=2400, stdin=subprocess.DEVNULL)
    finally:
        subprocess.run(["rm", "-rf", str(scratch)], check=False)   # the overlay's writes: a venv, torch, builds
    output = proc.stdout + proc.stderr
    print(f"{command!r} in {time.monotonic() - start:.0f} s:\n{output}")
    assert proc.returncode == 0, output
    assert f"fresh_root: purged {purge}" in output and "bwrap is still installed" not in output
    assert "installing bubblewrap g++" in output, output                 # the set-up installed the sandbox
    assert RESULT_LINE in output, output
    assert "Traceback" not in output
