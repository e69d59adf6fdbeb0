"""Agentic RL: the published four-stage recipe on verl, and a single-machine learning check on TRL.

    cuda-agent rl data --dataset tasks.parquet --out data/rl      # verl's RL parquet, train/val
    cuda-agent train all --model Qwen/Qwen3-8B --data data/rl --out runs/rl --dry-run

- `episode`: the settings an RL episode runs under and the `KernelSession` it drives.
- `agent_loop`: verl agent loop `cuda_agent` (token-in/token-out, tools masked, milestone reward).
- `reward`: the single-turn reward for the warm-up stage.
- `data`: tasks -> verl RL parquet.  `stages`: the four stages as composed verl configs.
- `trl_env`: the same episode as a TRL `environment_factory`.  `tiny`, `sanity`: the learning check.

verl and TRL are optional (`pip install -e ".[rl]"`); nothing here imports them at package import.
"""
