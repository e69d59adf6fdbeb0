"""SKILL.md as a workspace holds it: the asset's text with the numbers of the evaluation in force
(its input sets, its tolerance, the reward's margin) written in, never by hand."""

from __future__ import annotations

import textwrap
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
                f"{floors} outputs), same dtype and shape, inputs left unmodified, no caching of results "
                "between calls.")
    sets = "; ".join(f"{t}: {_STRUCTURED.get(t, t)}" for t in TRANSFORMS)
    return (f"Correct means: same output on {n + len(TRANSFORMS)} input sets: {n} fresh random draws of "
            f"`get_inputs()` and {len(TRANSFORMS)} structured sets built from them ({sets}). Each element "
            f"within atol + rtol * |reference|, rtol = {config.rtol:g}, atol = {config.atol:g} scaled to the "
            "output: times its RMS on the task's own draws when that is below 1, and times how much larger "
            f"its RMS is on a structured set (tolerances at least {floors} outputs). Same dtype and shape; "
            "outputs follow the inputs as the reference's do; inputs left unmodified, no caching of results "
            "between calls; the outputs of timed calls are checked too.")


def target_rule() -> str:
    """Rule 6: the target and the reward, "faster" from the reward's margin."""
    from cuda_agent.env.reward import FASTER, SCALE

    return (f"Target: correct and faster than `torch.compile`. Reward: {SCALE}. \"Faster\" means {FASTER}, "
            "read from the speedup `./profile` reports: the median of per-call ratios, each call against the baseline on "
            "the same inputs. `./profile` says which baseline still blocks reward 3 and by how much. Eager can "
            "be the harder one to beat (it calls cuBLAS/cuDNN too).")
