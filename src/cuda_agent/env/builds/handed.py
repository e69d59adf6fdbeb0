"""The libraries a candidate may load: those the harness hands it, each copied into its job's folder.

The sandbox binds no part of the build cache (`cache/build`, with every solution's sources, objects
and libraries); it binds the job's `libs` folder, read-only, and the harness places there a copy of
each library it hands the candidate: the harness's own (guard, device hold) and the solution's
builds that passed the link check (symbols.py). A library the check refused is never in a path the
candidate can see (compiler.build_extension deletes it before publishing anything)."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path


def handed_dir(box: Path) -> Path:
    """The job's folder of handed libraries, beside the candidate's writable `box`."""
    return Path(box).parent / "libs"


def hand(library: Path, box: Path) -> Path:
    """`library` placed in the job's handed folder (`libs/<its cache folder>/<its name>`); returns
    the path the candidate loads it from."""
    library = Path(library)
    target = handed_dir(box) / library.parent.name / library.name
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # a copy, never a hard link: nothing written to the job's copy could reach the cache's file
    partial = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
    shutil.copyfile(library, partial)
    os.replace(partial, target)
    return target
