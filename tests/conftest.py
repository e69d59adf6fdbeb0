"""Shared fixtures: a session-wide build cache (C++ builds are the slow part of the suite)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "src" / "cuda_agent" / "examples"
KERNELBENCH = REPO.parent / "shared" / "kernelbench"


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    # CI may share a warm cache between runs of the suite through this variable.
    shared = os.environ.get("CUDA_AGENT_TEST_CACHE")
    return Path(shared) if shared else tmp_path_factory.mktemp("cuda-agent-cache")


@pytest.fixture(scope="session")
def kernelbench() -> Path:
    from cuda_agent.tasks import KERNELBENCH_ENV

    # The copy beside the checkout first; the variable for machines where it lives elsewhere.
    places = [KERNELBENCH] + ([Path(os.environ[KERNELBENCH_ENV])] if os.environ.get(KERNELBENCH_ENV) else [])
    for place in places:
        if (place / "level1").is_dir():
            return place
    pytest.skip("KernelBench problems not found; looked in " + ", ".join(str(p) for p in places)
                + f" (put them beside the checkout, or set {KERNELBENCH_ENV})")
