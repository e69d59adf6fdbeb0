"""The KernelBench benchmark: baselines, scoring a solution folder or a policy, metrics and reports.

    cuda-agent baseline --levels 1,2,3 --kernelbench DIR --out runs/base
    cuda-agent bench --levels 1,2,3 --solutions DIR --out runs/mine
    cuda-agent bench --levels 1 --model NAME --base-url URL --out runs/policy
    cuda-agent report runs/mine --compare runs/policy

A run lives in one folder: `bench.sqlite` (schema in `store.py` and docs/bench.md), the solutions
and trajectories it produced, and the report. Runs resume where they stopped (`--resume`).
"""
