"""benchmarks/slim_ray_wheel.py (what `RAY=1 benchmarks/gpu_carry.sh` carries): on a small wheel shaped
like Ray's, the dropped paths are gone, the kept ones there with their modes, RECORD lists exactly the
files present with their hashes, and pip installs the result where the kept code imports."""

import base64
import csv
import hashlib
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("wheel")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "slim_ray_wheel.py"
NAME = "ray-9.1.0-py3-none-any.whl"   # the file's tags differ from WHEEL's, as in Ray's wheels
DIST = "ray-9.1.0.dist-info"

KEPT = {
    "ray/__init__.py": "from ray._private.worker import init\nfrom ray import dashboard\n",
    "ray/_private/__init__.py": "",
    "ray/_private/worker.py": "from ray.widgets import template\n\ndef init():\n    return 'core'\n",
    "ray/widgets/__init__.py": "template = 1\n",
    "ray/dashboard/__init__.py": "",
    "ray/dashboard/modules/job.py": "",
    "ray/scripts/scripts.py": "def main():\n    pass\n",
}
DROPPED = {
    "ray/jars/ray_dist.jar": "java",
    "ray/dashboard/client/build/index.html": "<html/>",
    "ray/rllib/__init__.py": "",
    "ray/rllib/algorithms/ppo.py": "",
    "ray/tune/__init__.py": "",
    "ray/train/__init__.py": "",
    "ray/serve/__init__.py": "",
    "ray/data/__init__.py": "",
    "ray/llm/__init__.py": "",
    "ray/air/__init__.py": "",
}
RAYLET = "ray/core/src/ray/raylet/raylet"


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _write_wheel(path: Path, raylet: bytes) -> None:
    files = {name: text.encode() for name, text in {**KEPT, **DROPPED}.items()}
    files[f"{DIST}/METADATA"] = b"Metadata-Version: 2.1\nName: ray\nVersion: 9.1.0\n"
    files[f"{DIST}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n"
                              b"Tag: py3-none-linux_x86_64\n")
    files[f"{DIST}/entry_points.txt"] = (b"[console_scripts]\nray = ray.scripts.scripts:main\n"
                                         b"tune = ray.tune.cli.scripts:cli\nserve = ray.serve.scripts:cli\n")
    rows = [(name, _digest(data), str(len(data))) for name, data in files.items()]
    rows.append((RAYLET, _digest(raylet), str(len(raylet))))
    record = io.StringIO()
    csv.writer(record, lineterminator="\n").writerows([*rows, (f"{DIST}/RECORD", "", "")])
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        info = zipfile.ZipInfo(RAYLET)
        info.external_attr = 0o100755 << 16
        zf.writestr(info, raylet, zipfile.ZIP_DEFLATED)
        zf.writestr(f"{DIST}/RECORD", record.getvalue())


def _slim(wheel: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    run = subprocess.run([sys.executable, str(SCRIPT), str(wheel), "-o", str(out), *extra],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    return run


def _pip_target(wheel: Path, target: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                          "--no-compile", "--target", str(target), str(wheel)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr


def test_slim_wheel_keeps_core_and_a_true_record(tmp_path):
    source = tmp_path / NAME
    _write_wheel(source, b"#!/bin/sh\necho raylet\n")
    run = _slim(source, tmp_path / "out")
    slim = tmp_path / "out" / NAME
    assert slim.exists() and f"{NAME}:" in run.stdout and " MB -> " in run.stdout

    with zipfile.ZipFile(slim) as zf:
        names = {i.filename for i in zf.infolist() if not i.is_dir()}
        assert names == set(KEPT) | {RAYLET} | {f"{DIST}/{f}" for f in ("METADATA", "WHEEL", "entry_points.txt",
                                                                         "RECORD")}
        assert (zf.getinfo(RAYLET).external_attr >> 16) & 0o777 == 0o755
        assert "Tag: py3-none-linux_x86_64" in zf.read(f"{DIST}/WHEEL").decode()
        scripts = zf.read(f"{DIST}/entry_points.txt").decode()
        assert "ray.scripts.scripts:main" in scripts and "tune" not in scripts and "serve" not in scripts
        record = list(csv.reader(io.StringIO(zf.read(f"{DIST}/RECORD").decode())))
        assert {row[0] for row in record} == names
        for name, digest, size in record:
            if name == f"{DIST}/RECORD":
                assert digest == "" and size == ""
                continue
            data = zf.read(name)
            assert digest == _digest(data) and int(size) == len(data), name

    target = tmp_path / "site"
    _pip_target(slim, target)
    assert not (target / "ray" / "jars").exists() and not (target / "ray" / "rllib").exists()
    assert not (target / "ray" / "dashboard" / "client").exists()
    assert os.access(target / RAYLET, os.X_OK)
    imported = subprocess.run([sys.executable, "-c", "import ray; print(ray.init())"], capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(target)}, cwd=tmp_path, timeout=60)
    assert imported.stdout.strip() == "core", imported.stderr


@pytest.mark.skipif(not (shutil.which("cc") and shutil.which("strip")), reason="needs a C compiler and strip")
def test_strip_leaves_native_code_that_runs(tmp_path):
    src = tmp_path / "raylet.c"
    src.write_text('#include <stdio.h>\nstatic int helper(void) { return 7; }\n'
                   'int main(void) { printf("raylet %d\\n", helper()); return 0; }\n')
    binary = tmp_path / "raylet"
    subprocess.run(["cc", "-g", "-O0", "-o", str(binary), str(src)], check=True)
    source = tmp_path / NAME
    _write_wheel(source, binary.read_bytes())
    _slim(source, tmp_path / "out", "--strip")
    with zipfile.ZipFile(tmp_path / "out" / NAME) as zf:
        stripped = zf.read(RAYLET)
        assert len(stripped) < binary.stat().st_size and b".symtab" not in stripped
        assert zf.read("ray/__init__.py") == KEPT["ray/__init__.py"].encode()   # text files untouched
    target = tmp_path / "site"
    _pip_target(tmp_path / "out" / NAME, target)
    ran = subprocess.run([str(target / RAYLET)], capture_output=True, text=True, timeout=30)
    assert ran.stdout == "raylet 7\n"


def test_import_ray_loads_nothing_that_is_dropped():
    """Where Ray is installed: none of the modules `import ray` loads lies under a dropped path."""
    pytest.importorskip("ray")
    spec = importlib.util.spec_from_file_location("slim_ray_wheel", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    listed = subprocess.run([sys.executable, "-c", "import os, sys, ray\n"
                             "base = os.path.dirname(os.path.dirname(ray.__file__))\n"
                             "for m in list(sys.modules.values()):\n"
                             "    f = getattr(m, '__file__', None) or ''\n"
                             "    if f.startswith(base + '/ray/'): print(os.path.relpath(f, base))"],
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    loaded = listed.stdout.split()
    assert "ray/_private/worker.py" in loaded
    assert not [f for f in loaded if any(f.startswith(d + "/") for d in module.DROPPED)]
