"""The learning check, run longer: TRL GRPO on a tiny local model, the real environment in the loop.

    python benchmarks/rl_sanity.py --backend cpu --steps 30 --out runs/rl_sanity_cpu
    python benchmarks/rl_sanity.py --backend cuda --steps 40 --out runs/rl_sanity_cuda

Writes OUT/rl_sanity.json (per-step mean reward, labels installed, the environment's verdicts,
throughput: agent turns and evaluations per minute) and OUT/rl_sanity.png (the reward curve).
`--session module:Class` picks the KernelSession implementation (default: cuda_agent.agent's).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

NEEDED = ("trl", "datasets", "transformers", "tokenizers", "accelerate", "jmespath")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--generations", type=int, default=8, help="episodes per GRPO step")
    parser.add_argument("--out", type=Path, default=Path("runs/rl_sanity"))
    parser.add_argument("--session", default=None, help="module:Class with the KernelSession surface")
    parser.add_argument("--cache-dir", default=None, help="build and baseline cache of the environment")
    args = parser.parse_args()

    missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    if missing:   # jmespath is needed only below transformers 5.13
        import transformers

        if transformers.__version__ >= "5.13" and missing == ["jmespath"]:
            missing = []
    if missing:
        print(f"missing packages: {', '.join(missing)} (see docs/rl.md, 'The learning check on the GPU')")
        return 2

    from cuda_agent.rl import sanity

    kwargs = {"session": args.session} if args.session else {}
    result = sanity.learn(args.out, backend=args.backend, steps=args.steps, seed=args.seed,
                          generations=args.generations, cache_dir=args.cache_dir, **kwargs)
    if importlib.util.find_spec("matplotlib"):
        print("curve:", sanity.plot(result, args.out / "rl_sanity.png"))
    else:
        print("matplotlib is missing: no PNG (the JSON has the numbers)")
    print(json.dumps({k: result[k] for k in ("summary", "rewards_by_label", "throughput", "sft_seconds",
                                             "grpo_seconds")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
