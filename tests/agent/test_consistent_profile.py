"""A scripted policy profiles the same candidate twice (two workspace objects, so nothing is answered
from a record) and reads one consistent set of lines: the reward line, the target line and the
speedups agree within each profile, and two profiles of one candidate give the same reward unless one
of them says it was decided within the noise. Real evaluations on the CPU backend (the bias + ReLU
example): a kernel faster than eager (by a fifth to a half: decided beyond the margin
on an unloaded machine), and the same kernel slowed by a dialled spin until its speedup over
eager lies near the margin."""

from __future__ import annotations

import os
import re
from dataclasses import replace

from cuda_agent.agent.workspace import Workspace
from cuda_agent.env.explain import UNRESOLVED
from cuda_agent.env.reward import NEEDED, decisive, is_faster_speedup, speedup_words, totals_decide
from tests.env.helpers import HONEST_BODY, cpu_workspace, example_task, kernel

SPIN_CALIBRATION = 400_000   # spin iterations of the calibration run (about a millisecond or two here)


def spinning(spin: int) -> dict[str, str]:
    """The example's CPU solution, its kernel followed by `spin` dependent volatile adds."""
    body = HONEST_BODY + f"\nvolatile float sink = 0.f;\nfor (int64_t i = 0; i < {spin}; ++i) sink = sink + 0.5f;\n"
    return cpu_workspace(kernel(body)).files


def profile(tmp_path, config, files: dict[str, str], name: str):
    """A fresh workspace object (no records) profiling `files`: the text the policy reads, the result."""
    ws = Workspace.create(example_task(), tmp_path / name, eval_config=config, overwrite=True)
    for rel, text in files.items():
        (ws.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws.root / rel).write_text(text)
    out = Workspace.open(ws.root).profile()
    assert out.ok and out.answered_by is None, out.text
    return out.text, out.result


def contradictions(text: str, r) -> list[str]:
    """Lines of one profile that disagree with each other or with the result they report."""
    found = []
    rewards = re.findall(r"^  reward (-?\d+)", text, re.M)
    if rewards != [f"{r.reward:g}"]:
        found.append(f"reward lines {rewards} for reward {r.reward}")
    target = "target not met yet" in text
    read = decisive(r.speedup_vs_eager, r.speedup_totals.get("eager"))   # the figure the reward reads
    if not r.time_resolved:   # the kernel's time inside the harness's noise (a loaded machine): no speed decided
        if r.reward != 1 or target or f"target not decided: {UNRESOLVED}" not in text:
            found.append(f"reward {r.reward} or a target line for a time not told apart from zero")
    else:
        if target != (not is_faster_speedup(read)):   # no torch.compile baseline here
            found.append(f"target line {target} for a speedup of {read}")
        if (r.reward >= 2) != is_faster_speedup(read):
            found.append(f"reward {r.reward} for a speedup of {read}")
        if totals_decide(r.speedup_vs_eager, r.speedup_totals.get("eager")) != ("calls' total time is only" in text):
            found.append("the totals decided, but the profile does not say so (or says so when they did not)")
    if f"you are {speedup_words(r.speedup_vs_eager)}" not in text:
        found.append("the eager line's words are not the speedup's")
    saved = re.search(r"time saved vs eager PyTorch ([+-][\d.]+)%", text.replace(" %", "%"))
    if saved and (float(saved.group(1)) >= 0) != (read >= 1):
        found.append(f"time saved {saved.group(1)} % for a speedup of {read}")
    if ("within noise" in text) != r.within_noise:
        found.append("the within-noise words and the result disagree")
    interval = r.speedup_ci.get("eager")
    if interval and f"speedup 95 % CI {interval[0]:.2f}-{interval[1]:.2f}x" not in text:
        found.append("the eager interval is not shown")
    if r.within_noise and not (interval and interval[0] <= NEEDED <= interval[1]):
        found.append("within noise, but the interval does not hold the margin")
    return found


def unloaded() -> bool:
    """The machine had cores to spare over the last minute (its load average under half of them)."""
    return os.getloadavg()[0] < 0.5 * (os.cpu_count() or 1)


def profiled_twice(tmp_path, config, files, name):
    runs = [profile(tmp_path, config, files, f"{name}{i}") for i in range(2)]
    for text, r in runs:
        assert not contradictions(text, r), (contradictions(text, r), text)
    (_, first), (_, second) = runs
    # Two rewards differ only where a profile said the margin was inside its interval, on an unloaded
    # machine: under load the baselines' own times drift between evaluations (2x on a busy 2-core
    # machine), which no single evaluation's interval can see.
    if first.reward != second.reward and unloaded():
        assert first.within_noise or second.within_noise, [t for t, _ in runs]
    return runs


def test_the_same_candidate_profiled_twice_reads_consistently(tmp_path, real_eval_config):
    config = replace(real_eval_config, iters=None, warmup=5)   # the CPU's default count of timed calls
    fast = profiled_twice(tmp_path, config, spinning(0), "fast")
    if unloaded():   # under load a memory-bound eager slows more than the kernel: 1.11x within noise, seen in CI
        assert all(r.reward == 2 and not r.within_noise for _, r in fast), [t for t, _ in fast]

    # the spin's cost per iteration from a calibration run, then a spin putting the kernel at the margin
    _, calibration = profile(tmp_path, config, spinning(SPIN_CALIBRATION), "calibration")
    kernel_ms = min(r.kernel_ms for _, r in fast)
    per_spin = (calibration.kernel_ms - kernel_ms) / SPIN_CALIBRATION
    target_ms = calibration.kernel_ms * calibration.speedup_vs_eager / NEEDED   # read as the reward reads it
    spin = max(0, int(SPIN_CALIBRATION + (target_ms - calibration.kernel_ms) / max(per_spin, 1e-9)))
    near = profiled_twice(tmp_path, config, spinning(spin), "near")
    for _, r in fast + near:   # what each took, for the report (-s)
        print(f"speedup {r.speedup_vs_eager:.3f} CI {r.speedup_ci.get('eager')} reward {r.reward} "
              f"within_noise {r.within_noise} timed calls {r.timings['kernel'].iters}")
    for _, r in near:   # decided within the noise only after timing on past the schedule's calls (20 or 21)
        assert not r.within_noise or r.timings["kernel"].iters > 21, r.timings["kernel"]
