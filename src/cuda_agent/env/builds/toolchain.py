"""The toolchain's warm-up: what every evaluation needs built once per toolchain, built ahead.

It sits above the builder (compiler.py) and the libraries built with it (the guard, the device hold,
the link check's baseline of the toolchain's own imports), so the builder imports none of them.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cuda_agent.env.builds.compiler import precompiled_header
from cuda_agent.env.measure.hold import build_hold
from cuda_agent.env.rules.guard import build_guard
from cuda_agent.env.rules.symbols import toolchain_imports


def prepare_toolchain(backend: str, cache_dir: Path) -> Path:
    """Build what every evaluation needs once per toolchain, now and side by side, so no evaluation
    waits for it: the precompiled torch header, the harness's guard library (and on CUDA its device
    hold) and the toolchain's own imports (the link check's baseline). Returns the header."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        guard = pool.submit(build_guard, Path(cache_dir))
        hold = pool.submit(build_hold, Path(cache_dir)) if backend == "cuda" else None
        header = precompiled_header(backend, Path(cache_dir))
        toolchain_imports(backend, str(cache_dir))
        guard.result()
        if hold is not None:
            hold.result()
    return header
