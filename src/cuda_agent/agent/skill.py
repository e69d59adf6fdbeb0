"""SKILL.md as a workspace holds it: the asset's text with the numbers of the evaluation in force
(its input sets, its tolerance, the reward's margin) and the interpreter that has torch written in,
never by hand; on the CPU backend, SKILL_cpu.md with this machine's build flags, SIMD instruction
sets and BLAS routines (cpu_facts.py)."""

from __future__ import annotations

import platform
import shlex
import sys
import textwrap
from functools import lru_cache
from pathlib import Path

from cuda_agent.env.config import EvalConfig

ASSETS = Path(__file__).parent / "assets"

# What each structured input set of the strict protocol is (env/workers/draws.py builds them).
_STRUCTURED = {"spikes": "a few elements carrying most of the mass", "negate": "signs flipped",
               "ramp": "scaled by a ramp along the last dimension", "scale_up": "scaled by 100",
               "aligned": "the largest values at the same positions in every input"}


def skill_text(backend: str, config: EvalConfig | None = None) -> str:
    """The SKILL.md of a workspace on `backend` evaluated under `config` (default: EvalConfig())."""
    text = (ASSETS / "SKILL.md").read_text()
    if backend == "cpu":
        text += "\n" + (ASSETS / "SKILL_cpu.md").read_text()
        for name, value in cpu_parts().items():
            text = text.replace("{{" + name + "}}", value)
    text = text.replace("{{python}}", shlex.quote(sys.executable))   # where cuda_agent and torch live
    for name, value in (("correctness", correctness_rule(config or EvalConfig())), ("target", target_rule())):
        # a numbered rule: wrapped as the hand-written ones are, continuation lines under its text
        text = text.replace("{{" + name + "}}", textwrap.fill("9. " + value, 100, subsequent_indent="   ")[3:])
    return text


def correctness_rule(config: EvalConfig) -> str:
    """Rule 5: what verification checks, with the configuration's counts and tolerances."""
    from cuda_agent.env.workers.draws import TRANSFORMS
    from cuda_agent.env.rules.verify import _TOLERANCE_FLOOR

    n = config.num_correct_trials
    floors = " and ".join(f"{floor:g} for {str(dtype).removeprefix('torch.')}"
                          for dtype, floor in _TOLERANCE_FLOOR.items())
    if config.protocol == "published":
        return (f"Correct means: same output for {n} fresh random input sets within atol = {config.atol:g}, "
                f"rtol = {config.rtol:g} (each element within atol + rtol * |reference|; tolerances at least "
                f"{floors} outputs), same dtype and shape (contiguous where the reference's output is), inputs "
                "left unmodified, no caching of results between calls.")
    sets = "; ".join(f"{t}: {_STRUCTURED.get(t, t)}" for t in TRANSFORMS)
    return (f"Correct means: same output on {n + len(TRANSFORMS)} input sets: {n} fresh random draws of "
            f"`get_inputs()` and {len(TRANSFORMS)} structured sets built from them ({sets}). Each element "
            f"within atol + rtol * |reference|, rtol = {config.rtol:g}, atol = {config.atol:g} scaled to the "
            "output: times its RMS on the task's own draws when that is below 1, and times how much larger "
            f"its RMS is on a structured set (tolerances at least {floors} outputs). Same dtype and shape, and "
            "contiguous where the reference's output is (a view with other strides is refused); "
            "outputs follow the inputs as the reference's do; inputs left unmodified, no caching of results "
            "between calls; the outputs of timed calls are checked too." + (
                " Where the task's input sizes can be halved, it is verified at half size too (rule "
                "fixed-shape): take every size from the inputs, never from `model.py`." if config.other_scale is not False
                else ""))


def target_rule() -> str:
    """Rule 6: the target and the reward, "faster" from the reward's margin."""
    from cuda_agent.env.reward import FASTER, SCALE

    return (f"Target: correct and faster than `torch.compile`. Reward: {SCALE}. \"Faster\" means {FASTER}, "
            "read from the speedup `./profile` reports: the median of per-call ratios, each call against the baseline on "
            "the same inputs, and the ratio of the calls' total times must be faster too. `./profile` says which baseline still blocks reward 3 and by how much. Eager can "
            "be the harder one to beat (it calls cuBLAS/cuDNN too).")


@lru_cache(maxsize=1)
def cpu_parts() -> dict[str, str]:
    """SKILL_cpu.md's machine-specific paragraphs: the build line, the SIMD sets, the BLAS routines."""
    from cuda_agent.agent.cpu_facts import blas_routines, build_line, simd_isa

    return {"cpu_build": build_line(), "cpu_isa": isa_paragraph(simd_isa(), platform.machine()),
            "cpu_blas": blas_paragraph(blas_routines())}


def isa_paragraph(isa: list[str], machine: str) -> str:
    found = ", ".join(f"`{i}`" for i in isa) or "no SIMD extension"
    text = f"This processor has {found} (read when this workspace was created)."
    if machine in ("x86_64", "AMD64"):
        wide = "avx2,fma" if "avx2" in isa and "fma" in isa else "avx" if "avx" in isa else None
        text += (" There is no `-march` in the flags, so the compiler's own vectorisation stays at "
                 "x86-64's baseline (SSE2, 128-bit registers).")
        if wide:
            text += (f" To use the wider units, compile the hot functions for them: "
                     f"`__attribute__((target(\"{wide}\")))`"
                     + (" (or \"avx512f\" for 512-bit registers)" if "avx512f" in isa else "")
                     + " on a function (intrinsics from `<immintrin.h>` "
                     f"work inside it), or `#pragma GCC target(\"{wide}\")` after the includes for the rest "
                     "of the file. Name only sets from the list above: an instruction the processor lacks "
                     "kills your process (SIGILL).")
    elif machine in ("aarch64", "arm64"):
        text += (" The aarch64 baseline includes NEON (`asimd`, `<arm_neon.h>`), which the compiler's "
                 "vectorisation uses at -O3.")
    return textwrap.fill(text, 100)


def blas_paragraph(routines: list[str]) -> str:
    if not routines:
        return textwrap.fill("BLAS: libtorch_cpu exports no BLAS routine on this machine: write GEMMs yourself "
                             "(tiled for the caches).", 100)
    text = (f"BLAS: libtorch_cpu exports {', '.join(f'`{r}`' for r in routines)} on this machine; declare "
            "what you call yourself. They run on one thread here, as eager does; a GEMM through them only "
            "ties eager's, so fuse what comes after it into your own pass.")
    if "sgemm_" in routines:
        text = textwrap.fill(text + " The Fortran interface takes column-major matrices and every argument "
                             "by pointer (a row-major C = A B is the column-major C^T = B^T A^T):", 100)
        return text + ("\n\n```cpp\nextern \"C\" void sgemm_(const char* transa, const char* transb, "
                       "const int* m, const int* n, const int* k,\n                       const float* alpha, "
                       "const float* a, const int* lda, const float* b, const int* ldb,\n"
                       "                       const float* beta, float* c, const int* ldc);\n"
                       "// C (M x N) = A (M x K) B (K x N), all row-major:\n"
                       "// sgemm_(\"N\", \"N\", &N, &M, &K, &one, b, &N, a, &K, &zero, c, &N);\n```")
    return textwrap.fill(text, 100)
