"""Where the CUDA toolkit and its libraries are, and which architecture a build targets."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def find_cuda_home() -> Path | None:
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return Path(os.environ[var])
    nvcc = shutil.which("nvcc")
    if nvcc:
        home = Path(os.path.realpath(nvcc)).parent.parent
        if (home / "include" / "cuda_runtime.h").exists():
            return home
    default = Path("/usr/local/cuda")
    return default if default.exists() else None


def cuda_arch_flags() -> list[str]:
    """Target the GPU in this machine (sm_90a on Hopper, so wgmma is available)."""
    arch = os.environ.get("CUDA_AGENT_CUDA_ARCH")  # e.g. "90a" for builds on a GPU-less host
    if not arch:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            arch = f"{major}{minor}" + ("a" if major == 9 and minor == 0 else "")
        else:
            arch = "90a"
    return [f"-gencode=arch=compute_{arch},code=sm_{arch}"]


def with_library(header: str, lib: str, includes: list[str],
                 ldflags: list[str]) -> tuple[list[str], list[str], list[str]]:
    """Flags for a CUDA library (cuBLAS, cuDNN): the toolkit's copy, else the `nvidia-*` wheel that
    CUDA builds of torch install (and have already loaded, so the same library is used at run time);
    and the wheel's folders, which the compiler's sandbox is to show."""
    home = find_cuda_home()
    if home is not None and (home / "include" / header).exists():
        return includes, ldflags + [f"-l{lib}"], []
    try:
        import nvidia  # type: ignore  (namespace package of the nvidia-* wheels)

        for root in map(Path, nvidia.__path__):
            for found in root.glob(f"**/include/{header}"):
                lib_dir = found.parent.parent / "lib"
                shared = sorted(lib_dir.glob(f"lib{lib}.so*"))
                link = [f"-L{lib_dir}", f"-l:{shared[0].name}" if shared else f"-l{lib}"]
                return includes + [f"-I{found.parent}"], ldflags + link, [str(found.parent), str(lib_dir)]
    except ImportError:
        pass
    return includes, ldflags + [f"-l{lib}"], []
