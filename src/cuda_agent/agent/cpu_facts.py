"""What SKILL_cpu.md states about this machine, read when a workspace is created: how kernels/ is
built (the CPU toolchain's compiler and flags, env/builds/compiler.py), the SIMD instruction sets the
processor has, and which BLAS routines the libraries a solution links against export."""

from __future__ import annotations

import ctypes
from pathlib import Path

# x86 instruction-set flags of /proc/cpuinfo worth a kernel's attention, widest last.
_X86_ISA = ("sse4_2", "avx", "f16c", "fma", "avx2", "avx_vnni", "avx512f", "avx512dq", "avx512cd", "avx512bw",
            "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8")
# Arm: /proc/cpuinfo's "Features".
_ARM_ISA = ("asimd", "asimdhp", "asimddp", "sve", "sve2", "bf16", "i8mm", "sme")
# BLAS entry points looked up in libtorch_cpu (Fortran interface, then CBLAS).
_BLAS = ("sgemm_", "dgemm_", "sgemv_", "saxpy_", "sdot_", "cblas_sgemm", "cblas_dgemm", "cblas_sgemv")


def simd_isa(cpuinfo: str | None = None) -> list[str]:
    """The SIMD instruction sets of this processor (from /proc/cpuinfo; PyTorch's view of them where
    that file is missing)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            present = set(value.split())
            return [isa for isa in (*_X86_ISA, *_ARM_ISA) if isa in present]
    import torch

    return [torch.backends.cpu.get_cpu_capability().lower()]


def build_line() -> str:
    """The compile command of a kernels/ source on the CPU backend, include paths left out (line
    tables for crash reports where the source includes no torch header)."""
    from cuda_agent.env.builds.compiler import toolchain

    tc = toolchain("cpu")
    return f"{Path(tc.cxx).name} {' '.join((*tc.common_flags, *tc.line_tables))} -c FILE.cpp"


def blas_routines() -> list[str]:
    """The BLAS routines libtorch_cpu exports on this machine (a solution links against it)."""
    import torch.utils.cpp_extension as cpp

    lib = Path(cpp.library_paths("cpu")[0]) / "libtorch_cpu.so"
    try:
        handle = ctypes.CDLL(str(lib))
    except OSError:
        return []
    return [name for name in _BLAS if hasattr(handle, name)]
