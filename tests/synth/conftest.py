"""Shared fixtures for the synthesis tests: one operator catalog per session, and an in-process pool.

`kernelbench` (../shared/kernelbench, read in place) comes from tests/conftest.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def catalog():
    from cuda_agent.synth.catalog import build_catalog

    return build_catalog(include_transformers=False)   # ~15 s: built once per session


@pytest.fixture(scope="session")
def catalog_file(catalog, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("catalog") / "catalog.json"
    path.write_text(json.dumps(catalog.to_dict()))
    return path


def seeded_folder(out: Path, catalog_file: Path) -> Path:
    """`out`, made with a work/ that already holds the session catalog (so runs skip the crawl)."""
    (out / "work").mkdir(parents=True)
    (out / "work" / "catalog.json").write_text(catalog_file.read_text())
    return out


@pytest.fixture
def seeded_out(tmp_path, catalog_file) -> Path:
    return seeded_folder(tmp_path / "out", catalog_file)


class InlinePool:
    """The pool interface, running jobs one at a time in this process (fast, for pipeline tests)."""

    def __init__(self, fn, workers, timeout_s, fail_after: int | None = None, running_for: float = 1.0):
        self.fn, self.queue, self.done, self.fail_after = fn, [], 0, fail_after
        self.running_for = running_for   # what running_seconds says each queued job has run
        self.spent: dict = {}            # key -> the spent_s it was submitted with

    def free(self):
        return 0 if self.queue else 1

    def busy(self):
        return len(self.queue)

    def submit(self, key, payload, spent_s=0.0):
        self.queue.append((key, payload))
        self.spent[key] = spent_s

    def running_seconds(self):
        return [(key, self.spent[key] + self.running_for) for key, _ in self.queue]

    def wait(self, timeout=0.5):
        if self.fail_after is not None and self.done >= self.fail_after:
            raise KeyboardInterrupt   # as if the user pressed Ctrl-C mid-run
        key, payload = self.queue.pop(0)
        self.done += 1
        return [(key, self.fn(payload))]

    def shutdown(self):
        self.queue.clear()


@pytest.fixture
def inline_pool():
    return InlinePool
