"""Files the harness writes into a candidate's writable box."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def box_file(box: Path, name: str):
    """A file the harness writes into a candidate's writable box, as an open binary file: written under
    a new name of its own (created exclusively) and renamed over `name` once complete, so a link the
    candidate's code planted under `name` is replaced, never written through (the harness's user,
    outside the sandbox, would otherwise write wherever it points)."""
    fd, temporary = tempfile.mkstemp(dir=box, prefix=f".{name}-")
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
        os.replace(temporary, Path(box) / name)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
