"""A GPU as the harness numbers it, named for another process.

The harness numbers GPUs as its own process sees them: index i is the i-th entry of its
CUDA_VISIBLE_DEVICES (every GPU in order when that is unset). A worker is given its GPU by setting
its CUDA_VISIBLE_DEVICES, which names GPUs as the machine does, so the index must be translated:
under Ray, whose actor for a machine's third GPU sees it as index 0 with CUDA_VISIBLE_DEVICES=2, a
worker given "0" would run on the machine's first GPU, beside every other actor's workers.
"""

from __future__ import annotations

import os


def physical_gpu(index: int | None) -> str:
    """The entry of this process's CUDA_VISIBLE_DEVICES for its GPU `index` (None: 0), or the index
    itself where that variable does not list it (unset: every GPU visible, in order)."""
    index = index or 0
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return visible[index] if index < len(visible) else str(index)
