"""What `cuda-agent synth` checks before any work (the catalog crawl alone is slow): KernelBench is
there when decontamination needs it, and `--out` holds no run made with other settings.

Each check returns the message to stop with, or None.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from cuda_agent.tasks import KERNELBENCH_ENV

# fingerprint key -> how the command line sets it (None: not an option, fixed by this version)
FLAGS = {
    "backend": lambda v: f"--backend {v}",
    "seed": lambda v: f"--seed {v}",
    "mix": lambda v: f"--mix {show(v)}",
    "window_ms": lambda v: f"--window {show(v)}",
    "decontaminate": lambda v: "" if v else "--no-decontaminate",
    "similarity_threshold": lambda v: f"--threshold {show(v)}",
    "compile": lambda v: "" if v else "--no-compile",
    "include_transformers": lambda v: "" if v else "--no-transformers",
    "composer": lambda v: f"--composer {v}",
    "llm_model": lambda v: f"--llm-model {v}" if v else "",
}
UNSET = {"decontaminate": "without --no-decontaminate", "compile": "without --no-compile",
         "include_transformers": "without --no-transformers", "llm_model": "without --llm-model"}


def show(value) -> str:
    """A setting as the command line writes it: 2:80,3:20 for a mix, 1,100 for a window."""
    if isinstance(value, dict):
        return ",".join(f"{k}:{show(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ",".join(show(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def kernelbench_problem(kernelbench: Path | None, decontaminate: bool) -> str | None:
    """Why decontamination cannot run with this KernelBench folder (the option, else $CUDA_AGENT_KERNELBENCH)."""
    if not decontaminate:
        return None
    root = kernelbench or (Path(os.environ[KERNELBENCH_ENV]) if os.environ.get(KERNELBENCH_ENV) else None)
    how = (f"pass --kernelbench DIR (the folder with level1..level3) or set {KERNELBENCH_ENV}, or "
           "--no-decontaminate to keep tasks similar to KernelBench's")
    if root is None:
        return f"decontamination needs KernelBench: {how}"
    if not any(root.glob("level*/*.py")):
        return f"no KernelBench problems (levelN/*.py) under {root}: {how}"
    return None


def settings_conflict(out: Path, fingerprint: dict) -> str | None:
    """Why `out` cannot take a run with these settings: it holds one made with others. A run that made
    no candidate yet (e.g. stopped by a missing KernelBench) binds nothing: its settings file is removed."""
    path = out / "work" / "config.json"
    if not path.is_file():
        return None
    theirs = json.loads(path.read_text())
    mine = json.loads(json.dumps(fingerprint))
    differ = [k for k in mine if mine.get(k) != theirs.get(k)]
    if not differ:
        return None
    candidates = out / "work" / "candidates.jsonl"
    if not (candidates.is_file() and candidates.stat().st_size):
        path.unlink()
        return None
    listed = "; ".join(f"{k}: {show(theirs.get(k))} in the run, {show(mine.get(k))} now" for k in differ)
    flags = [FLAGS[k](theirs.get(k)) or UNSET[k] for k in differ if k in FLAGS]
    fixed = [k for k in differ if k not in FLAGS]
    message = (f"{out} holds a run whose settings differ: {listed}. To go on, either continue that run with its "
               f"settings ({' '.join(flags) or 'as before'}), or write this run to another --out, or delete {out} "
               "to start over")
    if fixed:
        message += (f" ({', '.join(fixed)}: not options; the run was made by another version of cuda-agent, "
                    "which alone can continue it)")
    return message
