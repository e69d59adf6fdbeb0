"""The sandbox hides the harness's cache by mounting over it: a cache folder not made yet (a fresh
machine's first evaluation) is made first, since bubblewrap cannot make a mount point on the read-only
root, and the sandboxed process then starts and sees the folder empty."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from cuda_agent.env import EvalConfig
from cuda_agent.env.infra.sandbox import sandbox_prefix

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_cache_not_made_yet_is_made_and_hidden(tmp_path):
    parent = REPO / ".cache" / f"absent-{uuid.uuid4().hex[:8]}"   # on the root the sandbox sees read-only
    cache = parent / "cache"
    box = tmp_path / "box"
    box.mkdir()
    try:
        prefix = sandbox_prefix(EvalConfig(backend="cpu", cache_dir=cache), box)
        assert cache.is_dir()
        (cache / "secret").write_text("baselines")
        done = subprocess.run([*prefix, "/bin/ls", "-A", str(cache)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == ""   # the cache's files are hidden
    finally:
        shutil.rmtree(parent, ignore_errors=True)
